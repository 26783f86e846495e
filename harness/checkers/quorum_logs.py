"""Committed prefixes agree: the controllers' metadata logs, replayed side by side.

Input (collected by the runner after the final heal, read-only from each controller's
metadata disk): per controller, its batches ``(base offset, last offset, leader epoch,
CRC)`` and the end offset of its newest snapshot (offsets below it are held through the
snapshot); and ``committed`` — the highest offset known committed (the active
controller's high watermark at the end, or anything higher a broker applied).

Verdict:
- **agree**: two controllers holding a batch at the same base offset below ``committed``
  hold the same batch (same last offset, epoch and CRC — Raft copies batches byte for byte);
- **no committed record lost**: every offset below ``committed`` is held (in a batch or a
  snapshot) by a majority of the controllers — a committed record is on a majority and a
  voter never truncates below its high watermark;
- ``unknown`` when fewer than two controllers' logs could be read.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.checkers.base import UNKNOWN, CheckResult

__all__ = ["check_committed_prefixes", "check_quorum_logs"]

Batch = tuple[int, int, int, int]  # base offset, last offset, epoch, crc


def check_committed_prefixes(logs: Mapping[int, Sequence[Batch]], snapshot_ends: Mapping[int, int],
                             committed: int) -> CheckResult:
    name = "quorum_logs"
    if len(logs) < 2:
        return CheckResult(name, UNKNOWN, f"{len(logs)} controller log(s) readable: nothing to compare",
                           {"controllers": sorted(logs)})
    disagreements: list[str] = []
    by_base: dict[int, tuple[int, Batch]] = {}
    for node in sorted(logs):
        for batch in logs[node]:
            base = batch[0]
            if base >= committed:
                continue
            seen = by_base.get(base)
            if seen is None:
                by_base[base] = (node, batch)
            elif seen[1] != batch:
                disagreements.append(f"offset {base}: controller {seen[0]} has {seen[1]}, controller {node} has {batch}")
    majority = len(logs) // 2 + 1
    held_by = {}
    lost: list[int] = []
    for node, batches in logs.items():
        held_by[node] = _covered(batches, snapshot_ends.get(node, 0), committed)
    # walk the committed range by the batch boundaries every controller agrees on
    cuts = sorted({0, committed} | {b[0] for b in by_base.values() for b in [b[1]]}
                  | {b[1][1] + 1 for b in by_base.values()} | set(snapshot_ends.values()))
    for lo, hi in zip(cuts, cuts[1:]):
        if lo >= committed:
            break
        holders = sum(1 for ranges in held_by.values() if any(a <= lo and hi <= b for a, b in ranges))
        if holders < majority:
            lost.append(lo)
    details = {"controllers": sorted(logs), "committed": committed,
               "batches_compared": len(by_base), "disagreements": disagreements[:20],
               "offsets_below_a_majority": lost[:20]}
    if disagreements:
        return CheckResult(name, False, f"{len(disagreements)} committed batch(es) differ between controllers",
                           details)
    if lost:
        return CheckResult(name, False, f"committed offsets from {lost[0]} held by fewer than {majority} "
                                        f"controllers", details)
    return CheckResult(name, True, f"{len(logs)} controllers agree on the {committed} committed offsets",
                       details)


def _covered(batches: Sequence[Batch], snapshot_end: int, committed: int) -> list[tuple[int, int]]:
    """The [lo, hi) ranges below ``committed`` a controller holds (its snapshot, then batches)."""
    ranges: list[tuple[int, int]] = []
    if snapshot_end > 0:
        ranges.append((0, snapshot_end))
    for base, last, _, _ in sorted(batches):
        if base >= committed:
            break
        if ranges and ranges[-1][1] >= base:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last + 1))
        else:
            ranges.append((base, last + 1))
    return ranges


def check_quorum_logs(scenario, history) -> CheckResult:
    """The check over a run: the ``quorum_logs`` action the runner records after the heal."""
    found = history.events("quorum_logs", source="harness")
    if not found:
        return CheckResult("quorum_logs", UNKNOWN, "the controllers' logs were not collected")
    e = found[-1]
    committed = e.get("committed")
    logs = {int(k): [tuple(b) for b in v] for k, v in (e.get("logs") or {}).items()}
    if committed is None:
        return CheckResult("quorum_logs", UNKNOWN, "no active controller at the end: committed offset unknown",
                           {"errors": e.get("errors")})
    ends = {int(k): int(v) for k, v in (e.get("snapshot_ends") or {}).items()}
    result = check_committed_prefixes(logs, ends, int(committed))
    if e.get("errors"):
        result = CheckResult(result.name, result.valid, result.summary,
                             {**result.details, "unreadable": e.get("errors")})
    return result
