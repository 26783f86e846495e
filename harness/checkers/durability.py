"""Durability: every acked record is consumed exactly at its offset (Jepsen's Kafka analyses).

Judged from the client ops alone:

- **lost** — acked (produce ``ok`` with an offset) but never consumed although the drain
  consumer read the partition past that offset (``drained`` event). Not read that far:
  **not_reached** → unknown.
- **offset_mismatch** — acked at offset o, consumed only at other offsets.
- **inconsistent_offsets** — one (topic, partition, offset) read with two different values.
- **duplicates** — a value consumed at more than one position.
- **reordered** — one producer's record A acked before record B was invoked, same partition,
  but offset(A) > offset(B).
- **phantom** — a consumed value no producer ever sent.
Records whose produce failed or timed out (fail/info) may or may not be present: never an
error (their presence is reported as ``indeterminate_present``). Records sent to a topic that
an admin action deleted afterwards (a ``delete-topic`` after their invoke) went with it:
not checked (``deleted_with_topic``); a re-created topic's records are checked as any.

An ack **without an offset** is librdkafka's implicit ack (idempotent producer): a batch of
the partition failed with an uncertain outcome (e.g. REQUEST_TIMED_OUT, NOT_LEADER) while a
later batch of the same producer succeeded, which proves the earlier records were written,
so librdkafka reports them delivered with offset -1001 (``msg.offset()`` None). Such a
record is checked by value: consumed on its partition → durable (``ack_without_offset``
counts them); not consumed although a record the same producer acked later on that
partition was → **lost**; otherwise **not_reached**.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from harness.checkers.base import UNKNOWN, CheckResult
from harness.history.model import History

__all__ = ["DurabilityReport", "analyse_durability", "check_durability", "topic_deletions"]

EXAMPLES = 20


@dataclass
class DurabilityReport:
    acked: int = 0
    indeterminate: int = 0
    consumed: int = 0
    lost: list[dict] = field(default_factory=list)
    not_reached: list[dict] = field(default_factory=list)
    offset_mismatch: list[dict] = field(default_factory=list)
    inconsistent_offsets: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    reordered: list[dict] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    indeterminate_present: int = 0
    ack_without_offset: int = 0
    deleted_with_topic: int = 0

    @property
    def errors(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in
                ("lost", "offset_mismatch", "inconsistent_offsets", "duplicates", "reordered", "phantom")}


def analyse_durability(history: History) -> DurabilityReport:
    r = DurabilityReport()
    pairs = history.produce_pairs()
    sent = {p.invoke.value_id for p in pairs}
    reads: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    at: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for op in history.ops("consume", "ok"):
        if op.value_id is None or op.topic is None or op.partition is None or op.offset is None:
            continue
        r.consumed += 1
        reads[op.value_id].add((op.topic, op.partition, op.offset))
        at[(op.topic, op.partition, op.offset)].add(op.value_id)
    drained: dict[tuple[str, int], int] = {}
    for e in history.events("drained"):
        key = (str(e.get("topic")), int(e.get("partition", -1)))
        drained[key] = max(drained.get(key, -1), int(e.get("offset", -1)))
    acked_by_process: dict[tuple[str, str, int], list] = defaultdict(list)
    unplaced: list[tuple[str, str, int, int, str]] = []   # acks without offset not consumed
    deletions = topic_deletions(history)
    for p in pairs:
        vid = p.invoke.value_id
        if any(ts > p.invoke.ts_ns for ts in deletions.get(p.invoke.topic, ())):
            r.deleted_with_topic += 1
            continue
        if p.outcome != "ok":
            r.indeterminate += 1
            if vid in reads:
                r.indeterminate_present += 1
            continue
        r.acked += 1
        c = p.completion
        topic = c.topic if c.topic is not None else p.invoke.topic
        part = c.partition if c.partition is not None else p.invoke.partition
        if c.offset is None and topic is not None and part is not None:
            r.ack_without_offset += 1
            if not any(t == topic and q == part for t, q, _ in reads.get(vid, ())):
                unplaced.append((p.invoke.process, topic, part, c.ts_ns, vid))
            continue
        if c.offset is None or topic is None or part is None:
            r.ack_without_offset += 1
            r.not_reached.append({"value_id": vid, "topic": topic, "partition": part, "offset": None})
            continue
        acked_by_process[(p.invoke.process, topic, part)].append((p.invoke.ts_ns, c.ts_ns, c.offset, vid))
        where = reads.get(vid, set())
        if (topic, part, c.offset) in where:
            continue
        info = {"value_id": vid, "topic": topic, "partition": part, "offset": c.offset}
        if where:
            r.offset_mismatch.append({**info, "consumed_at": sorted(where)})
        elif drained.get((topic, part), -1) > c.offset:
            r.lost.append(info)
        else:
            r.not_reached.append({**info, "drained_to": drained.get((topic, part))})
    for process, topic, part, done_ns, vid in unplaced:
        info = {"value_id": vid, "topic": topic, "partition": part, "offset": None}
        later_read = any(done_b >= done_ns and (topic, part, off_b) in reads.get(vid_b, ())
                         for _, done_b, off_b, vid_b in acked_by_process.get((process, topic, part), ()))
        (r.lost if later_read else r.not_reached).append(info)
    for vid, where in reads.items():
        if len(where) > 1:
            r.duplicates.append({"value_id": vid, "positions": sorted(where)})
        if vid not in sent:
            r.phantom.append(vid)
    for pos, vids in at.items():
        if len(vids) > 1:
            r.inconsistent_offsets.append({"position": pos, "values": sorted(vids)})
    for (process, topic, part), acks in acked_by_process.items():
        # B invoked after A completed must get a larger offset: sort by invoke time, keep the
        # suffix minimum of offsets, binary-search the first B invoked after A's completion.
        by_invoke = sorted(acks)
        invokes = [a[0] for a in by_invoke]
        suffix_min: list[tuple[int, str]] = [(0, "")] * len(by_invoke)
        best = (2**63, "")
        for i in range(len(by_invoke) - 1, -1, -1):
            if by_invoke[i][2] < best[0]:
                best = (by_invoke[i][2], by_invoke[i][3])
            suffix_min[i] = best
        for _, done_a, off_a, vid_a in acks:
            j = bisect.bisect_right(invokes, done_a)
            if j < len(by_invoke) and suffix_min[j][0] < off_a:
                r.reordered.append({"process": process, "topic": topic, "partition": part,
                                    "first": [vid_a, off_a], "then": [suffix_min[j][1], suffix_min[j][0]]})
    return r


def topic_deletions(history: History) -> dict[str, list[int]]:
    """When each topic was deleted by an admin action of the schedule (topic → times)."""
    out: dict[str, list[int]] = defaultdict(list)
    for e in history.faults():
        if e.get("kind") == "admin" and e.get("action") == "delete-topic" and e.get("result") == "none":
            out[str(e.get("topic"))].append(e.ts_ns)
    return out


def check_durability(scenario, history: History) -> CheckResult:
    r = analyse_durability(history)
    details = {"acked": r.acked, "indeterminate": r.indeterminate, "consumed": r.consumed,
               "indeterminate_present": r.indeterminate_present, "ack_without_offset": r.ack_without_offset,
               "deleted_with_topic": r.deleted_with_topic,
               "not_reached": len(r.not_reached), **{f"{k}_count": v for k, v in r.errors.items()},
               "examples": {k: getattr(r, k)[:EXAMPLES] for k in list(r.errors) + ["not_reached"] if getattr(r, k)}}
    if scenario is not None and scenario.workload.acks != "all":
        return CheckResult("durability", UNKNOWN, f"acks={scenario.workload.acks}: acked records may be lost", details)
    bad = {k: v for k, v in r.errors.items() if v}
    if bad:
        return CheckResult("durability", False,
                           "; ".join(f"{v} {k.replace('_', ' ')}" for k, v in bad.items()) + f" of {r.acked} acked",
                           details)
    if r.acked == 0:
        return CheckResult("durability", UNKNOWN, "no acked records to check", details)
    if r.not_reached:
        return CheckResult("durability", UNKNOWN,
                           f"{len(r.not_reached)} acked records beyond what the drain consumer reached", details)
    implicit = (f" ({r.ack_without_offset} acked without an offset — librdkafka's implicit ack — consumed "
                f"on their partition)") if r.ack_without_offset else ""
    return CheckResult("durability", True, f"all {r.acked} acked records consumed at their offsets{implicit}", details)
