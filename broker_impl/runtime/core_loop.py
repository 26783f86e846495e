"""Feeding the pure core and executing its effects, in order (:class:`CoreLoop`).

Every input of the broker core (controller answers, metadata batches, storage errors,
timers, SIGTERM) ends in :meth:`CoreLoop.feed` with the effects the core returned; they run
one at a time, in order, never re-entrantly (an effect that feeds the core again only
queues). Storage errors have one inlet, :meth:`CoreLoop.report_storage_error` (the storage
layer's failure channel, any thread): queued, and given to the core between two effects
as ``on_storage_error(dir_id, errno, op)``. Errors reported while the logs load, before
the core exists, wait for it.

Where each effect goes (:class:`EffectSinks`, wired by ``broker.py``):

==============================================  ==========================================
EmitEvent                                       the node event log
SendRegistration / SendHeartbeat / SendAssign.  ``controller`` (:mod:`.controller_requests`)
storage effects (:data:`STORAGE_EFFECTS`)       ``storage`` (:mod:`.storage_effects`, a
                                                worker per dir, in order per partition)
partition-role effects (:data:`ROLE_EFFECTS`)   ``role`` (:mod:`.dataplane`, after the
                                                storage effects of the same partition)
Halt / Shutdown                                 ``halt`` / ``finish``
==============================================  ==========================================
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any, Callable

from broker_impl.state import effects as fx
from broker_impl.state.core import BrokerCore
from broker_impl.storage import DirFailure
from kafka_common import ids
from kafka_runtime.events import EventLog

STORAGE_EFFECTS = (fx.CreateLog, fx.DeleteLog, fx.MarkDirOffline, fx.CreateFutureLog,
                   fx.DeleteFutureLog)
ROLE_EFFECTS = (fx.BecomeLeader, fx.BecomeFollower, fx.UpdateLeaderState, fx.StartFetcher, fx.StopFetcher,
                fx.StartDirMover, fx.StopDirMover, fx.SwapFutureLog, fx.MarkPartitionsOffline)
CONTROLLER_EFFECTS = (fx.SendRegistration, fx.SendHeartbeat, fx.SendAssignments)


@dataclass(frozen=True, slots=True)
class EffectSinks:
    controller: Callable[[Any], None]
    storage: Callable[[Any], None]
    role: Callable[[Any], None]
    halt: Callable[[str], None]          # the core already wrote the halt event
    finish: Callable[[int, str], None]   # exit code, reason


class CoreLoop:
    def __init__(self, events: EventLog, now_ms: Callable[[], int], halt: Callable[[str], None]) -> None:
        self.events = events
        self.now_ms = now_ms
        self._halt = halt
        self.core: BrokerCore | None = None
        self.sinks: EffectSinks | None = None
        self.wake = asyncio.Event()
        self._pending: collections.deque = collections.deque()
        self._storage_errors: collections.deque[DirFailure] = collections.deque()
        self._executing = False

    def attach(self, core: BrokerCore, sinks: EffectSinks) -> None:
        self.core, self.sinks = core, sinks

    # ------------------------------------------------------------------ inputs
    def report_storage_error(self, failure: DirFailure) -> None:
        """On the loop (the runtime hops here from the failing thread)."""
        self._storage_errors.append(failure)
        if self.core is not None:
            self.feed([])

    def feed(self, effects: list) -> None:
        """Execute effects; storage errors reported meanwhile are fed after the current effect."""
        self._pending.extend(effects)
        if self._executing or self.core is None:
            return
        self._executing = True
        try:
            while self._pending or self._storage_errors:
                if self._pending:
                    self._execute(self._pending.popleft())
                    continue
                f = self._storage_errors.popleft()
                if f.op == "probe":
                    self.events.emit("probe_failed", path=f.path, errno=f.errno,
                                     dir_id=ids.to_base64(f.dir_id) if f.dir_id else None)
                if f.dir_id is None:
                    self._halt(f"I/O error on log dir {f.path} which has no directory id ({f.op}: errno {f.errno})")
                    return
                self._pending.extend(self.core.on_storage_error(f.dir_id, f.errno, f.op, self.now_ms()))
        finally:
            self._executing = False
        self.wake.set()

    async def run_timers(self, stopping: Callable[[], bool]) -> None:
        """``core.tick`` at the core's next deadline, or at once after any feed."""
        assert self.core is not None
        while not stopping():  # a flag: 3.11's wait_for may swallow a cancel
            deadline = self.core.next_deadline_ms()
            timeout = None if deadline is None else max(0.0, (deadline - self.now_ms()) / 1000)
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            self.feed(self.core.tick(self.now_ms()))

    # ------------------------------------------------------------------ effects
    def _execute(self, e: Any) -> None:
        sinks = self.sinks
        assert sinks is not None
        if isinstance(e, fx.EmitEvent):
            self.events.emit(e.event, **e.as_dict())
        elif isinstance(e, CONTROLLER_EFFECTS):
            sinks.controller(e)
        elif isinstance(e, STORAGE_EFFECTS):
            sinks.storage(e)
        elif isinstance(e, ROLE_EFFECTS):
            sinks.role(e)
        elif isinstance(e, fx.Halt):
            sinks.halt(e.reason)
        elif isinstance(e, fx.Shutdown):
            sinks.finish(0 if e.clean else 1, e.reason)
        else:
            raise TypeError(f"unknown effect {e!r}")
