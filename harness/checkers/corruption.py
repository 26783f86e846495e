"""no_corrupt_consumed: no consumer ever got a value other than the one produced.

Every consume op of the history — the drain, group members, readers — carries an ``error``
when the consumer found the value's bytes differ from what its producer sent (the values are
a function of their id: ``harness.workload.producer.value_of``; the consumers run with librdkafka's
``check.crcs`` off, its default, so a corrupt batch a broker served would reach them). Such
an op starts with :data:`CORRUPT_VALUE`. The check is false when any exists (listing them),
unknown when nothing was consumed, else true. Pure.

``corruption_detect_ms`` (:func:`corruption_detect_rows`, in the metrics): for every
``corrupt-reads`` / ``corrupt-writes`` disk fault, the first flipped bit the device served the
node (``fault_first_hit``; the injection when the backend dates none) → that node's reaction:
``dir_offline`` of the faulted dir with ``EBADMSG`` (a read met a CRC mismatch) or a
``log_truncated_at_recovery`` (a recovery cut the log at the corrupt batch).
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult
from harness.history.model import History

__all__ = ["CORRUPT_VALUE", "EBADMSG", "check_no_corrupt_consumed", "corruption_detect_rows"]

CORRUPT_VALUE = "corrupt value"
EBADMSG = 74
CORRUPT_MODES = ("corrupt-reads", "corrupt-writes")
MS = 1_000_000


def check_no_corrupt_consumed(scenario, history: History) -> CheckResult:
    consumed = [op for op in history.ops("consume") if op.type == "ok"]
    bad = [op for op in consumed if (op.error or "").startswith(CORRUPT_VALUE)]
    by_process: dict[str, int] = {}
    for op in consumed:
        by_process[op.process] = by_process.get(op.process, 0) + 1
    details = {"consumed": len(consumed), "consumed_by": by_process, "corrupt_count": len(bad),
               "corrupt": [{"process": op.process, "topic": op.topic, "partition": op.partition, "offset": op.offset,
                            "value_id": op.value_id, "error": op.error} for op in bad[:20]]}
    if bad:
        return CheckResult("no_corrupt_consumed", False,
                           f"{len(bad)} of {len(consumed)} consumed values were not what was produced "
                           f"(first: {bad[0].process} {bad[0].topic}-{bad[0].partition}@{bad[0].offset})", details)
    if not consumed:
        return CheckResult("no_corrupt_consumed", UNKNOWN, "nothing was consumed", details)
    return CheckResult("no_corrupt_consumed", True, f"{len(consumed)} consumed values, every one as produced", details)


def corruption_detect_rows(history: History, faults, row) -> list[dict]:
    """``corruption_detect_ms`` rows (``row`` = the metrics module's row builder)."""
    out = []
    hits = {str(e.get("fault_id")): e for e in history.events("fault_first_hit", source="harness")}
    for f in faults:
        if f.kind != "disk" or f.mode not in CORRUPT_MODES or f.node_id is None:
            continue
        start = hits[f.fault_id].ts_ns if f.fault_id in hits else f.ts_ns
        reactions = [e for e in history.events("dir_offline", source="node", node_id=f.node_id)
                     if e.ts_ns >= f.ts_ns and e.get("errno") == EBADMSG
                     and (not f.dir_ids or str(e.get("dir_id")) in f.dir_ids)]
        reactions += [e for e in history.events("log_truncated_at_recovery", source="node", node_id=f.node_id)
                      if e.ts_ns >= f.ts_ns]
        if reactions:
            first = min(reactions, key=lambda e: e.ts_ns)
            out.append(row("corruption_detect_ms", max(0, first.ts_ns - start) / MS, fault=f,
                           dir_id=str(first.get("dir_id")) if first.get("dir_id") is not None else None))
    return out
