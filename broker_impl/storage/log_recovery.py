"""Recovery of one partition's segments at load (Kafka's ``LogLoader``): which segments are
trusted, which are re-read batch by batch and truncated at the first bad one, and the
leader epochs found on the way. Used by :func:`broker_impl.storage.log_open.load`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from broker_impl.storage.segment import LogSegment, parse_segment_name

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoverySummary:
    recovered_segments: int = 0
    truncated_bytes: int = 0
    deleted_segments: int = 0
    reasons: list[str] = field(default_factory=list)


def recover_segments(path: str, index_interval_bytes: int, recovery_point: int, clean_shutdown: bool,
                     now_ms: int) -> tuple[list[LogSegment], list[tuple[int, int]], RecoverySummary]:
    """Open the segments of the partition dir ``path``; recover those at or after
    ``recovery_point`` (everything is trusted after a clean shutdown), truncating at the
    first bad batch and deleting the segments after it. Returns the segments (at least one),
    the (epoch, start offset) pairs seen in recovered batches, and what recovery did.
    Raises OSError (callers run it inside a channel.io block)."""
    names = sorted(os.listdir(path))
    bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
    for n in names:  # leftovers of an interrupted write / orphan indexes
        stem, _, ext = n.partition(".")
        if n.endswith(".tmp") or (ext in ("index", "timeindex") and stem.isdigit() and int(stem) not in bases):
            os.unlink(os.path.join(path, n))
    recovered_epochs: list[tuple[int, int]] = []
    summary = RecoverySummary()
    segments: list[LogSegment] = []
    expected = 0
    for i, base in enumerate(bases):
        seg = LogSegment.open_existing(path, base, index_interval_bytes=index_interval_bytes, created_ms=now_ms)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        trusted = clean_shutdown or (next_base is not None and next_base <= recovery_point)
        if not (trusted and seg.load_trusted()):
            result = seg.recover(expected)
            summary.recovered_segments += 1
            recovered_epochs += result.epochs
            if result.truncated_bytes:
                summary.truncated_bytes += result.truncated_bytes
                summary.reasons.append(f"{seg.log_path}: {result.reason}")
                log.warning("recovery of %s truncated %d bytes: %s", seg.log_path, result.truncated_bytes,
                            result.reason)
            seg.flush()
            if result.truncated_bytes or (next_base is not None and seg.next_offset > next_base):
                segments.append(seg)
                for later in bases[i + 1:]:
                    LogSegment(path, later, index_interval_bytes=1, created_ms=now_ms).delete()
                    summary.deleted_segments += 1
                break
        segments.append(seg)
        expected = seg.next_offset
    if not segments:
        segments.append(LogSegment.create(path, 0, index_interval_bytes=index_interval_bytes, created_ms=now_ms))
    return segments, recovered_epochs, summary


def scan_epochs(segments: list[LogSegment]) -> list[tuple[int, int]]:
    """(epoch, base offset) of every batch, from the batch headers (when the epoch checkpoint
    is unusable); stops at a header that does not parse (trusted data: keep what was read)."""
    return [(h.partition_leader_epoch, h.base_offset) for seg in segments for h in seg.iter_headers()]
