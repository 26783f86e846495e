"""The operator's actions: the ``reassignment_complete`` check and the
``leader_rebalance_ms`` metric, from the controller's committed partition changes. Pure.

``reassignment_complete`` (optional; scenarios with an ``admin`` ``reassign`` action): every
partition of every reassign plan (the action's ``plan``: {"t/p": target replicas}) ends —
at its last committed state — with exactly the target replicas, fully replicated (ISR =
replicas), a leader, and no reassignment in progress; false listing those that do not (or
when an action recorded an error), unknown when no reassign action ran.

``preferred_leaders`` (optional): at the end every partition is led by its first replica.

``leader_rebalance_ms`` (metric): for each ``restart`` of a broker *b* at *T* after which
some partition whose preferred replica (its first replica) is *b* was led by another
broker: *T* → the first committed state where every such partition is led by *b* again
(through the controller's auto rebalance or an operator's PREFERRED ElectLeaders). No row
when leadership never came back.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.checkers.base import UNKNOWN, CheckResult
from harness.checkers.common import injected_faults, partition_timelines
from harness.history.model import History

__all__ = ["check_reassignment_complete", "check_preferred_leaders", "leader_rebalance_rows"]

MS = 1_000_000


def check_reassignment_complete(scenario: Any, history: History) -> CheckResult:
    actions = [f for f in injected_faults(history) if f.kind == "admin" and f.attrs.get("action") == "reassign"]
    if not actions:
        return CheckResult("reassignment_complete", UNKNOWN, "no reassign action ran")
    timelines = partition_timelines(history)
    problems: list[str] = []
    moved = 0
    for f in actions:
        result = f.attrs.get("result")
        if result not in (None, "none", {}):
            problems.append(f"{f.fault_id}: the reassignment was answered {result}")
        for key, target in (f.attrs.get("plan") or {}).items():
            topic, _, p = str(key).rpartition("/")
            states = timelines.get((topic, int(p)), [])
            last = states[-1] if states else None
            moved += 1
            if last is None or last.replicas is None:
                problems.append(f"{key}: no committed state")
            elif list(last.replicas) != list(target):
                problems.append(f"{key}: replicas {list(last.replicas)}, not the target {list(target)}")
            elif sorted(last.isr) != sorted(target):
                problems.append(f"{key}: ISR {list(last.isr)} is not all of {list(target)}")
            elif last.leader < 0:
                problems.append(f"{key}: no leader")
    details = {"partitions": moved, "problems": problems[:50]}
    if problems:
        return CheckResult("reassignment_complete", False, f"{len(problems)} problem(s): {problems[0]}", details)
    return CheckResult("reassignment_complete", True,
                       f"{moved} partition(s) moved, each on its target replicas, fully replicated, led", details)


def leader_rebalance_rows(history: History, row: Callable[..., dict]) -> list[dict]:
    timelines = partition_timelines(history)
    rows = []
    for f in injected_faults(history):
        if f.kind != "process" or f.mode != "restart" or f.node_id is None:
            continue
        b, T = f.node_id, f.ts_ns
        preferred = []
        for key, states in timelines.items():
            before = [s for s in states if s.ts_ns <= T]
            at = before[-1] if before else None
            if at is not None and at.replicas and at.replicas[0] == b:
                preferred.append(key)
        current = {k: _leader_at(timelines[k], T) for k in preferred}
        if all(leader == b for leader in current.values()):
            continue   # nothing to bring back
        changes = sorted((s.ts_ns, k, s.leader) for k in preferred for s in timelines[k] if s.ts_ns > T)
        for ts, key, leader in changes:
            current[key] = leader
            if all(v == b for v in current.values()):
                rows.append(row("leader_rebalance_ms", (ts - T) / MS, fault=f, node_id=b))
                break
    return rows


def _leader_at(states, ts_ns: int) -> int:
    before = [s for s in states if s.ts_ns <= ts_ns]
    return before[-1].leader if before else -1


def check_preferred_leaders(scenario: Any, history: History) -> CheckResult:
    """``preferred_leaders`` (optional): at its last committed state every partition is led by
    its preferred replica (its first replica) — leadership came back after the faults."""
    timelines = partition_timelines(history)
    if not timelines:
        return CheckResult("preferred_leaders", UNKNOWN, "no partition in the metadata")
    off = sorted(f"{t}/{p}: leader {s[-1].leader}, preferred {s[-1].replicas[0]}"
                 for (t, p), s in timelines.items()
                 if s and s[-1].replicas and s[-1].leader != s[-1].replicas[0] and not t.startswith("__"))
    details = {"partitions": len(timelines), "not_preferred": off[:50]}
    if off:
        return CheckResult("preferred_leaders", False, f"{len(off)} partition(s) not led by their preferred "
                                                       f"replica at the end: {off[0]}", details)
    return CheckResult("preferred_leaders", True, f"all {len(timelines)} partition(s) led by their preferred "
                                                  "replica at the end", details)
