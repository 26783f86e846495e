"""``topic_admin``: the schedule's admin actions (``delete-topic`` / ``create-topic``) did what
KIP-858 and Kafka's fixes say, judged from the history:

- every admin action succeeded (its ``fault_injected`` ``result`` is ``none``);
- **stray removed**: every replica of a deleted incarnation (its partitions' replicas as the
  controller last committed them, by topic id) had its log deleted on its broker
  (``log_deleted`` of that topic id, then ``log_removed``) — at the deletion, or, for a replica
  whose dir was offline then, as a stray when the dir came back (``stray``). A replica whose
  dir was replaced (``replace-disk``) went with the disk; one whose dir never came back (a
  disk fault with no ``disk_repaired`` after it) cannot be judged → unknown;
- **re-created topic intact**: no log of a topic's newest incarnation was deleted, none of a
  deleted incarnation's records was consumed from it (never mixed up: KAFKA-16157), every
  record acked to it by its create-topic action was consumed at its offset, and each of its
  partitions ends with every replica in the ISR.
Pure.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from harness.checkers.base import UNKNOWN, CheckResult
from harness.scenario.faults import DIR_LOSING_MODES
from harness.history.model import Event, History

__all__ = ["check_topic_admin"]


def _admin_actions(history: History) -> list[Event]:
    return [e for e in history.faults() if e.get("kind") == "admin"]


def _replicas_by_incarnation(history: History) -> dict[str, dict[int, tuple[list[int], list[int], list[str]]]]:
    """topic id → partition → (replicas, isr, directories) as the controller last committed them."""
    out: dict[str, dict[int, Any]] = defaultdict(dict)
    for e in history.events("partition_change", source="node"):
        tid = e.get("topic_id")
        if tid is None:
            continue
        pid = int(e.get("partition", -1))
        old = out[str(tid)].get(pid, ([], [], []))
        out[str(tid)][pid] = (list(e.get("replicas", old[0]) or old[0]), list(e.get("isr", old[1]) or old[1]),
                              list(e.get("directories", old[2]) or old[2]))
    return out


def _dir_back(history: History, broker: int, dir_id: str, after_ns: int) -> str:
    """'replaced', 'back' or 'away': what became of a broker's dir that a disk fault took."""
    faults = [e for e in history.faults() if e.node_id == broker and e.ts_ns <= after_ns
              and e.get("kind") == "disk" and e.get("mode") in DIR_LOSING_MODES
              and dir_id in (e.get("dir_ids") or [e.get("dir_id")])]
    if not faults:
        return "back"
    if any(e.get("kind") == "replace-disk" and e.node_id == broker and dir_id in (e.get("dir_ids") or [])
           for e in history.faults()):
        return "replaced"
    if any(e.node_id == broker and e.get("dir_id") == dir_id for e in history.events("disk_repaired", source="harness")):
        return "back"
    return "away"


def check_topic_admin(scenario, history: History) -> CheckResult:
    actions = _admin_actions(history)
    if not actions:
        return CheckResult("topic_admin", UNKNOWN, "no admin actions in the history")
    problems: list[str] = []
    unknown: list[str] = []
    for a in actions:
        if a.get("result") != "none":
            problems.append(f"{a.get('fault_id')}: {a.get('action')} {a.get('topic')} answered {a.get('result')}")
    deleted = defaultdict(list)     # (broker, topic id) → log_deleted events
    removed = set()                 # (broker, path)
    for e in history.events("log_deleted", source="node"):
        deleted[(e.node_id, e.get("topic_id"))].append(e)
    for e in history.events("log_removed", source="node"):
        removed.add((e.node_id, e.get("path")))
    incarnations = _replicas_by_incarnation(history)
    strays = 0
    ok_deletions = 0
    for a in (a for a in actions if a.get("action") == "delete-topic" and a.get("result") == "none"):
        tid = a.get("topic_id")
        for pid, (replicas, _isr, dirs) in sorted(incarnations.get(str(tid), {}).items()):
            for i, b in enumerate(replicas):
                evs = [e for e in deleted.get((b, tid), []) if int(e.get("partition", -1)) == pid]
                name = f"{a.get('topic')}-{pid} (id {tid}) on broker {b}"
                if not evs:
                    fate = _dir_back(history, b, dirs[i] if i < len(dirs) else "", a.ts_ns)
                    if fate == "away":
                        unknown.append(f"{name}: its dir never came back")
                    elif fate != "replaced":
                        problems.append(f"{name}: its log was never deleted")
                    continue
                if not any((b, e.get("path")) in removed for e in evs):
                    problems.append(f"{name}: renamed for deletion but never removed")
                    continue
                ok_deletions += 1
                strays += any(e.get("stray") for e in evs)
    creations = [a for a in actions if a.get("action") == "create-topic" and a.get("result") == "none"]
    newest = {}
    for a in creations:   # a topic's newest incarnation: its last creation not deleted after
        if not any(d.get("topic") == a.get("topic") and d.ts_ns > a.ts_ns and d.get("result") == "none"
                   for d in actions if d.get("action") == "delete-topic"):
            newest[a.get("topic")] = a
    consumed = {(op.value_id): (op.topic, op.partition, op.offset) for op in history.ops("consume", "ok")
                if op.value_id is not None}
    gone_processes = {f"admin-{a.get('fault_id')}" for a in creations if a not in newest.values()}
    checked = 0
    for topic, a in sorted(newest.items()):
        tid = a.get("topic_id")
        if any(deleted.get((b, tid)) for b in {k[0] for k in deleted}):
            problems.append(f"{topic} (id {tid}): a log of the re-created topic was deleted")
        mixed = [vid for vid, where in consumed.items() if where[0] == topic
                 and vid.rsplit("-", 1)[0] in gone_processes]
        if mixed:
            problems.append(f"{topic}: {len(mixed)} records of a deleted incarnation consumed from it, e.g. {mixed[0]}")
        process = f"admin-{a.get('fault_id')}"
        for op in history.ops("produce", "ok"):
            if op.process != process or op.offset is None:
                continue
            checked += 1
            if consumed.get(op.value_id) != (op.topic, op.partition, op.offset):
                problems.append(f"{topic}: record {op.value_id} acked at {op.partition}/{op.offset} not consumed there")
                break
        for pid, (replicas, isr, _dirs) in sorted(incarnations.get(str(tid), {}).items()):
            if sorted(isr) != sorted(replicas):
                problems.append(f"{topic}-{pid}: ends with ISR {isr} of replicas {replicas}")
    details = {"admin_actions": [{k: a.get(k) for k in ("fault_id", "action", "topic", "topic_id", "result")}
                                 for a in actions],
               "replicas_deleted": ok_deletions, "strays_deleted": strays, "new_records_checked": checked,
               "problems": problems[:20], "unknown": unknown[:20]}
    if problems:
        return CheckResult("topic_admin", False, "; ".join(problems[:3]), details)
    if unknown:
        return CheckResult("topic_admin", UNKNOWN, "; ".join(unknown[:3]), details)
    return CheckResult("topic_admin", True,
                       f"{ok_deletions} replicas of deleted topics removed ({strays} as strays when their dir came "
                       f"back); re-created topics intact ({checked} acked records consumed at their offsets, ISR full)",
                       details)
