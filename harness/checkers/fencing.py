"""Fencing rule (decision D4): no multi-dir broker is unfenced while it has UNASSIGNED
replicas in metadata or a non-empty assignment queue.

At every controller ``unfenced`` event for broker *b* (metadata replayed up to it):
- *b* registered more than one dir and some partition lists *b* with directory UNASSIGNED →
  violation;
- *b*'s own assignment events (``assignment_queued``/``assignment_sent``/``assignment_acked``
  with field ``queued`` = QueuedReplicaToDirAssignments after the event) show a non-empty
  queue for the whole heartbeat interval before the unfence → violation (every heartbeat in
  that interval must have carried ``want_fence=true``).
No unfence event at all → unknown (nothing to judge).
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult
from harness.checkers.replay import UNASSIGNED, replay
from harness.history.model import History

__all__ = ["check_fencing"]

ASSIGNMENT_EVENTS = ("assignment_queued", "assignment_sent", "assignment_acked")


def check_fencing(scenario, history: History) -> CheckResult:
    hb_ns = scenario.configs.heartbeat_interval_ms * 1_000_000 if scenario is not None else 0
    unfences, violations = [], []
    for e, view in replay(history):
        if e.event != "unfenced" or e.get("broker_id") is None:
            continue
        b = int(e.get("broker_id"))
        broker = view.broker(b)
        unassigned = [f"{p.topic}-{p.partition}" for p in view.partitions_of(b) if p.dir_of(b) == UNASSIGNED]
        queue = [a for a in history.events(ASSIGNMENT_EVENTS, source="node", node_id=b)
                 if a.ts_ns <= e.ts_ns and a.get("queued") is not None]
        last_queued = int(queue[-1].get("queued")) if queue else None
        row = {"broker_id": b, "ts_ns": e.ts_ns, "registered_dirs": broker.registered_dirs,
               "unassigned": unassigned, "queued": last_queued}
        unfences.append(row)
        if broker.registered_dirs > 1 and unassigned:
            violations.append(f"broker {b} unfenced with UNASSIGNED replicas {unassigned[:10]}")
        elif broker.registered_dirs > 1 and last_queued and queue[-1].ts_ns <= e.ts_ns - hb_ns:
            violations.append(f"broker {b} unfenced with {last_queued} queued assignments "
                              f"(queue non-empty since {(e.ts_ns - queue[-1].ts_ns) / 1e6:.0f} ms)")
    details = {"unfences": unfences, "violations": violations}
    if violations:
        return CheckResult("fencing", False, "; ".join(violations[:5]), details)
    if not unfences:
        return CheckResult("fencing", UNKNOWN, "no controller unfenced event in the history", details)
    return CheckResult("fencing", True, f"{len(unfences)} unfence(s), none with UNASSIGNED replicas "
                                        "or queued assignments", details)
