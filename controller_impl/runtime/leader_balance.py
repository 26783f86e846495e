"""The active controller's own leader moves, on timers (the decisions are the pure state's,
:mod:`controller_impl.state.operator_ops`):

- every second: unclean elections for leaderless partitions of topics whose
  ``unclean.leader.election.enable`` is true (nothing is scanned when no config says so);
- every ``leader.imbalance.check.interval.seconds`` (when ``auto.leader.rebalance.enable``):
  PREFERRED elections for the brokers above ``leader.imbalance.per.broker.percentage``.
  Each check that moved leaders writes a ``leader_rebalance`` node event
  (``moved``: partitions whose leadership went back, ``brokers``: [broker, should lead, moved]).

Both go through the write path of every request (:meth:`LeaderWrites.run`, the rows
``UNCLEAN_ELECTIONS`` and ``LEADER_BALANCE`` of :mod:`.request_table`), so their records are
committed before the next check.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from controller_impl.runtime.image_io import FatalError
from controller_impl.runtime.leader_writes import LeaderWrites, NotActive
from controller_impl.runtime.request_table import LEADER_BALANCE, UNCLEAN_ELECTIONS

if TYPE_CHECKING:
    from controller_impl.runtime.host import ControllerHost

UNCLEAN_CHECK_S = 1.0


async def balance_loop(runtime: ControllerHost, writes: LeaderWrites) -> None:
    cfg = runtime.cfg
    interval_s = max(1, int(getattr(cfg, "leader_imbalance_check_interval_seconds", 300)))
    auto = bool(getattr(cfg, "auto_leader_rebalance_enable", True))
    loop = asyncio.get_running_loop()
    next_balance = loop.time() + interval_s
    while True:
        await asyncio.sleep(UNCLEAN_CHECK_S)
        if not runtime.active:
            next_balance = loop.time() + interval_s  # a new leader waits a whole interval
            continue
        try:
            lines = await writes.run(UNCLEAN_ELECTIONS, None)
            for line in lines or ():
                runtime.events.emit("unclean_leader_election", detail=line)
                runtime.log_line(line)
            if auto and loop.time() >= next_balance:
                next_balance = loop.time() + interval_s
                moved = await writes.run(LEADER_BALANCE, None)
                total = sum(m for _, _, m in moved or ())
                if moved:
                    runtime.events.emit("leader_rebalance", moved=total,
                                        brokers=[list(m) for m in moved])
                    runtime.log_line(f"leader rebalance: {total} leadership(s) back to the preferred replica "
                                      f"({', '.join(f'broker {b}: {m} of {n}' for b, n, m in moved)})")
        except (FatalError, NotActive):
            continue
        except Exception as exc:  # a timer must not die: report and try again next time
            runtime.events.emit("tick_error", error=f"leader balance: {type(exc).__name__}: {exc}")
            runtime.log_line(f"leader balance failed: {type(exc).__name__}: {exc}")
