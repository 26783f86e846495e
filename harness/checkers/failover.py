"""Failover: the failed replica leaves ISR/leadership within a bound; healthy dirs untouched.

For every disk fault in the history (``fault_injected`` with ``kind=disk``) on broker *b* at
time *T*, with the metadata view replayed from the controller's events up to *T*:

- **affected** partitions are those whose replica on *b* lives in a failed dir (all of *b*'s
  partitions for ``metadata``/``all``). Each must reach a committed state without *b* in the
  ISR (or leaderless, when *b* was the last ISR member) by ``T + expect.failover_within_ms``.
  Modes that a busy broker must notice (error, error-writes, enospc, remove, permission, on
  a whole dir) are always judged; the others (flaky, error-reads, corruption, bad blocks, any
  fault limited to one file's blocks) only when the broker logged ``dir_offline``; a
  corruption the broker's recovery found and cut from the log (``log_truncated_at_recovery``
  after the fault) is handled without a failover: true, nothing affected.
- ``expect.leader_moves`` True: affected partitions led by *b* get another leader in the
  bound; False: affected partitions *b* only followed keep their leader over the window.
- an affected partition never takes *b* back into its ISR while *b*'s replica is still on a
  failed dir (before the fault is healed): "partitions on it stay offline" (S3).
- **healthy** partitions (*b*'s replicas on other dirs) keep *b* in their ISR from *T* until
  the bound or the next deliberate disturbance of *b* (restart, kill, network fault).
- ``delay`` and ``lose-unsynced`` faults: the dir must not go offline (no ``dir_offline``) —
  no false failover.
- ``expect.isr_recovers``: at the end, *b* is in the ISR of every partition it replicates
  on a dir that is online then.
- replace-disk faults: the broker registers a directory id it never had (a fresh disk).
- ``expect.moved_replica_survives`` (move-replica faults): True → *b* stays in the moved
  partition's ISR — or, when the controller had already accepted the target as the replica's
  dir, leaves it at the dir failure and is back within the bound (the broker reverts the
  assignment); False → it leaves the ISR within the bound, unless the swap landed in the
  target as the source failed (the swap's own delete of the old log can be what fails it):
  then the replica lives in a healthy dir and must stay in the ISR. A move whose swap finished
  before the dir fault is ``unknown``: nothing mid-move was exercised.
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult, merge_valid
from harness.checkers.common import (
    WHOLE_NODE_DIRS,
    NOT_A_FAILURE_MODES, InjectedFault, must_detect, dir_offline_events, first_after, injected_faults, node_actions,
    partition_timelines,
)
from harness.checkers.corruption import CORRUPT_MODES
from harness.checkers.replay import LOST, view_at
from harness.history.model import History

__all__ = ["check_failover"]

MS = 1_000_000


def _left(b: int):
    return lambda s: b not in s.isr or s.leader == -1


def _judge_fault(f: InjectedFault, history: History, timelines, bound_ms: int, expect, moved: set) -> tuple:
    b, T = f.node_id, f.ts_ns
    end = history.end_ns or T
    deadline = T + bound_ms * MS
    out = {"fault_id": f.fault_id, "node_id": b, "mode": f.mode, "dir_ids": list(f.dir_ids), "problems": []}
    verdicts = []
    view = view_at(history, T)
    mine = [p for p in view.partitions_of(b) if (p.topic, p.partition) not in moved]
    whole = f.dir_ref in WHOLE_NODE_DIRS
    affected = [p for p in mine if whole or p.dir_of(b) in f.dir_ids]
    healthy = [p for p in mine if p not in affected]
    if not view.partitions:
        out["problems"].append("no partition_change events before the fault: placement unknown")
        return UNKNOWN, out
    seen = dir_offline_events(history, b, f.dir_ids, T) if not whole else []
    if f.mode in NOT_A_FAILURE_MODES:
        if seen:
            out["problems"].append(f"dir went offline under a {f.mode} fault at +{(seen[0].ts_ns - T) / MS:.0f} ms")
            verdicts.append(False)
        else:
            verdicts.append(True)
        affected, healthy = [], mine  # a slow dir is a healthy dir
    elif not must_detect(f) and not whole and not seen:
        cut = [e for e in history.events("log_truncated_at_recovery", source="node", node_id=b) if e.ts_ns >= T]
        if f.mode in CORRUPT_MODES and cut:
            # found by the broker's recovery (a restart after an unclean stop) and cut from its log:
            # Kafka's path for a corrupt batch found at load; the dir stays online, nothing fails over
            out["handled_at_recovery"] = [f"{e.get('topic')}-{e.get('partition')}: {e.get('truncated_bytes')} "
                                          f"bytes at +{(e.ts_ns - T) / MS:.0f} ms" for e in cut]
            verdicts.append(True)
        else:
            out["not_observed"] = "the broker never marked the dir offline (fault mode need not surface)"
            verdicts.append(UNKNOWN)
        affected, healthy = [], [p for p in mine if p not in affected]
    out["affected"] = [f"{p.topic}-{p.partition}" for p in affected]
    out["healthy"] = [f"{p.topic}-{p.partition}" for p in healthy]
    left_ms = {}
    for p in affected:
        key = (p.topic, p.partition)
        hit = first_after(timelines.get(key, []), T, _left(b))
        name = f"{p.topic}-{p.partition}"
        if hit is not None and hit.ts_ns <= deadline:
            left_ms[name] = (hit.ts_ns - T) / MS
            verdicts.append(True)
        elif hit is not None:
            out["problems"].append(f"{name}: broker {b} left the ISR after {(hit.ts_ns - T) / MS:.0f} ms > {bound_ms} ms")
            verdicts.append(False)
        elif end >= deadline:
            out["problems"].append(f"{name}: broker {b} still in the ISR {bound_ms} ms after the fault")
            verdicts.append(False)
        else:
            out["problems"].append(f"{name}: history ends before the bound")
            verdicts.append(UNKNOWN)
        if hit is not None and f.dir_ids:
            back = first_after(timelines.get(key, []), hit.ts_ns, lambda s: b in s.isr and s.replicas is not None
                               and s.directories is not None and b in s.replicas
                               and s.directories[s.replicas.index(b)] in f.dir_ids)
            if back is not None and (f.healed_ns is None or back.ts_ns < f.healed_ns):
                out["problems"].append(f"{name}: broker {b} rejoined the ISR at +{(back.ts_ns - T) / MS:.0f} ms "
                                       "while its replica is still on the failed dir")
                verdicts.append(False)
        if expect.leader_moves is True and p.leader == b:
            moved_to = first_after(timelines.get(key, []), T, lambda s: s.leader != b)
            if moved_to is None or moved_to.ts_ns > deadline:
                out["problems"].append(f"{name}: leader did not move off broker {b} within {bound_ms} ms")
                verdicts.append(False if end >= deadline else UNKNOWN)
        if expect.leader_moves is False and p.leader != b:
            changed = first_after(timelines.get(key, []), T, lambda s, l=p.leader: s.leader not in (l,))
            if changed is not None and changed.ts_ns <= deadline:
                out["problems"].append(f"{name}: leader changed {p.leader} → {changed.leader} (expected unchanged)")
                verdicts.append(False)
    out["left_isr_ms"] = left_ms
    if expect.leader_moves is True and affected and not any(p.leader == b for p in affected):
        out["problems"].append(f"broker {b} led none of the affected partitions at fault time")
        verdicts.append(UNKNOWN)
    disturbed = [e.ts_ns for e in node_actions(history, b, T + 1)]
    window_end = min([deadline] + disturbed)
    for p in healthy:
        key = (p.topic, p.partition)
        if b not in p.isr:
            continue
        hit = first_after(timelines.get(key, []), T, _left(b))
        if hit is not None and hit.ts_ns <= window_end:
            out["problems"].append(f"{p.topic}-{p.partition} (healthy dir): broker {b} removed from the ISR "
                                   f"at +{(hit.ts_ns - T) / MS:.0f} ms ({hit.reason})")
            verdicts.append(False)
    return merge_valid(verdicts), out


def _judge_recovery(b: int, history: History) -> tuple:
    final = view_at(history, history.end_ns or 0)
    broker = final.brokers.get(b)
    if broker is None:
        return UNKNOWN, {"node_id": b, "problem": "no registration seen"}
    missing = [f"{p.topic}-{p.partition}" for p in final.partitions_of(b)
               if broker.dir_online(p.dir_of(b)) and b not in p.isr]
    return (not missing), {"node_id": b, "not_back_in_isr": missing}


def _move_event(history: History, b: int, key: tuple, name: str, after_ns: int, before_ns: int | None = None):
    """The broker's first ``name`` event (dir_move_done, dir_move_accepted, …) for partition
    ``key`` in [after_ns, before_ns]."""
    for e in history.events(name, source="node", node_id=b):
        if e.ts_ns < after_ns or (before_ns is not None and e.ts_ns > before_ns):
            continue
        if (str(e.get("topic")), int(e.get("partition", -1))) == key:
            return e
    return None


def _judge_move(f: InjectedFault, history: History, timelines, bound_ms: int, survives: bool) -> tuple:
    b, key = f.node_id, (str(f.attrs.get("topic")), int(f.attrs.get("partition", -1)))
    states = timelines.get(key, [])
    name = f"{key[0]}-{key[1]}"
    later = [g.ts_ns for g in injected_faults(history) if g.kind == "disk" and g.node_id == b and g.ts_ns >= f.ts_ns]
    start = later[0] if later else f.ts_ns
    deadline = start + bound_ms * MS
    base = {"fault_id": f.fault_id, "partition": name}
    done = _move_event(history, b, key, "dir_move_done", f.ts_ns, start) if later else None
    if done is not None:
        # the swap happened before the dir failed: the fault hit a finished move, so neither
        # outcome of a failure mid-move was exercised (a pass here would be vacuous)
        return UNKNOWN, {**base, "problem": f"the move finished {(start - done.ts_ns) / MS:.0f} ms before the "
                                            "dir fault: nothing mid-move was tested"}
    hit = first_after(states, f.ts_ns, _left(b))
    landed = _move_event(history, b, key, "dir_move_done", start, deadline) if later and not survives else None
    if landed is not None:
        # the swap landed in the target as the source failed (its own delete of the old log is
        # often what fails the dir): the replica lives in a healthy dir and stays in the ISR
        swap = {**base, "swap_landed_ms": (landed.ts_ns - start) / MS}
        if hit is None:
            return True, swap
        return False, {**swap, "problem": f"the swap landed in the target, yet broker {b} left the ISR "
                                          f"({hit.reason}) {(hit.ts_ns - start) / MS:.0f} ms after the dir fault"}
    if survives:
        if hit is None:
            return True, base
        # the controller had the target as the replica's dir (assignment acked before the
        # target failed): it takes b out of the ISR when the dir goes offline, and the
        # broker's revert (AssignReplicasToDirs back to the source, behaviour §4.3) must
        # bring b back within the bound
        accepted = _move_event(history, b, key, "dir_move_accepted", f.ts_ns, hit.ts_ns)
        back = first_after(states, hit.ts_ns + 1, lambda s: b in s.isr and s.leader != -1)
        if accepted is not None and back is not None and back.ts_ns <= deadline:
            return True, {**base, "reverted": True, "out_of_isr_ms": (back.ts_ns - hit.ts_ns) / MS}
        why = "though the move should cancel" if accepted is None else \
            f"and was not back within {bound_ms} ms of the fault after the reverted assignment"
        return False, {**base, "problem": f"broker {b} left the ISR ({hit.reason}) {why}"}
    lost = any(s.replicas is not None and s.directories is not None and b in s.replicas
               and s.directories[s.replicas.index(b)] == LOST for s in states if s.ts_ns >= f.ts_ns)
    if hit is not None and hit.ts_ns <= deadline:
        return True, {**base, "reason": hit.reason, "lost_dir_recorded": lost}
    if hit is None and (history.end_ns or 0) < deadline:
        return UNKNOWN, {**base, "problem": "history ends before the bound"}
    return False, {**base, "problem": f"broker {b} did not leave the ISR (LOST_DIR expected)"}


def _judge_replace(f: InjectedFault, history: History) -> tuple:
    """After a replace-disk, the broker registers a directory id it never had before."""
    b = f.node_id
    before = view_at(history, f.ts_ns).brokers.get(b)
    known = set(before.dirs) if before is not None else set()
    for e in history.events(("registered", "registration_change", "broker_log_dirs_changed"), source="node",
                            role="controller"):
        if e.ts_ns < f.ts_ns or e.get("broker_id") != b:
            continue
        dirs = e.get("dirs", e.get("log_dirs", e.get("online_dirs"))) or []
        known_all = known | set(f.dir_ids)
        new = [d for d in dirs if d not in known_all]
        if new:
            return True, {"fault_id": f.fault_id, "node_id": b, "new_dir_ids": new,
                          "after_ms": (e.ts_ns - f.ts_ns) / MS}
    if not known:
        return UNKNOWN, {"fault_id": f.fault_id, "node_id": b, "problem": "broker's dirs before the swap unknown"}
    return False, {"fault_id": f.fault_id, "node_id": b, "problem": f"broker {b} never registered a new dir id"}


def check_failover(scenario, history: History) -> CheckResult:
    expect = scenario.expect
    faults = injected_faults(history)
    timelines = partition_timelines(history)
    moves = [f for f in faults if f.kind == "move-replica"]
    moved = {(str(f.attrs.get("topic")), int(f.attrs.get("partition", -1))) for f in moves}
    disk = [f for f in faults if f.kind == "disk" and f.node_id is not None]
    if not disk and not moves and not any(f.kind == "replace-disk" for f in faults):
        return CheckResult("failover", UNKNOWN, "no disk fault in the history", {})
    verdicts, per_fault = [], []
    for f in disk:
        v, d = _judge_fault(f, history, timelines, expect.failover_within_ms, expect, moved)
        verdicts.append(v)
        per_fault.append({**d, "valid": v})
    details: dict = {"faults": per_fault, "bound_ms": expect.failover_within_ms}
    if expect.moved_replica_survives is not None:
        for f in moves:
            v, d = _judge_move(f, history, timelines, expect.failover_within_ms, expect.moved_replica_survives)
            verdicts.append(v)
            details.setdefault("moves", []).append({**d, "valid": v})
    for f in faults:
        if f.kind == "replace-disk" and f.node_id is not None:
            v, d = _judge_replace(f, history)
            verdicts.append(v)
            details.setdefault("replaced", []).append({**d, "valid": v})
    if expect.isr_recovers:
        for b in sorted({f.node_id for f in disk}):
            v, d = _judge_recovery(b, history)
            verdicts.append(v)
            details.setdefault("recovery", []).append({**d, "valid": v})
    valid = merge_valid(verdicts)
    problems = [p for d in per_fault for p in d.get("problems", [])]
    problems += [d["problem"] for d in details.get("moves", []) + details.get("replaced", []) if d.get("problem")]
    problems += [f"broker {d['node_id']}: not back in ISR of {d.get('not_back_in_isr')}"
                 for d in details.get("recovery", []) if d["valid"] is False]
    summary = "; ".join(problems[:5]) if problems else \
        f"{len(disk)} disk fault(s): failed replicas left ISR/leadership within {expect.failover_within_ms} ms"
    return CheckResult("failover", valid, summary, details)
