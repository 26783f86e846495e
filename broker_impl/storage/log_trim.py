"""Removing a partition log's old or divergent data: the log start offset, retention and
truncation. A part of :class:`broker_impl.storage.partition_log.PartitionLog` (its ``trimmer``),
holding no state of its own: it works on the log's lock, segments, offsets and dir failure
channel through the :class:`TrimHost` protocol.

Retention (Kafka's ``deleteOldSegments``): only whole segments below the high watermark are
deleted, oldest first, while the log is over ``retention_bytes`` or the segment's newest
batch timestamp is older than ``retention_ms`` (wall clock, passed in); if that includes the
active segment, a new one is rolled first. The log start offset then becomes the first kept
segment's base. DeleteRecords moves the log start inside a segment (reads below it are
OFFSET_OUT_OF_RANGE) and deletes the segments wholly below it. The log start offset is
persisted by the log manager (``log-start-offset-checkpoint``) and given back to ``load``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Protocol

from kafka_runtime import fsutil
from broker_impl.storage.segment import LogSegment

if TYPE_CHECKING:
    from broker_impl.state.producers import ProducerState
    from broker_impl.storage.epoch_cache import LeaderEpochCache
    from broker_impl.storage.failure import DirFailureChannel
    from broker_impl.storage.log_config import LogConfig
    from broker_impl.storage.log_tail import TailCache


class TrimHost(Protocol):
    """The partition log as its trimmer sees it."""
    log_dir: str
    path: str
    config: LogConfig
    closed: bool
    recovery_point: int
    epoch_cache: LeaderEpochCache
    producer_state: ProducerState
    tail: TailCache
    _lock: threading.RLock
    _channel: DirFailureChannel
    _now_ms: Callable[[], int]
    _segments: list[LogSegment]
    _bases: list[int]        # the segments' base offsets (bisected by reads)
    _dirty: set[int]         # base offsets of segments with unflushed writes
    _log_start: int
    _hw: int
    _truncations: int

    @property
    def log_end_offset(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    def _check_open(self, op: str) -> None: ...
    def _add_segment(self, seg: LogSegment) -> None: ...
    def _roll(self, base_offset: int) -> LogSegment: ...
    def _rebuild_producer_state(self) -> None: ...


class LogTrimmer:
    __slots__ = ("host",)

    def __init__(self, host: TrimHost) -> None:
        self.host = host

    # ---- log start offset and retention ----------------------------------------------------
    def increment_log_start_offset(self, offset: int) -> int:
        """Move the log start up to ``offset`` (never down; at most the log end) and delete
        the segments wholly below it; returns the log start offset."""
        log = self.host
        with log._lock:
            log._check_open("delete_records")
            offset = min(offset, log.log_end_offset)
            if offset <= log._log_start:
                return log._log_start
            log._log_start = offset
            with log._channel.io(log.log_dir, "delete_segments"):
                while len(log._segments) > 1 and log._segments[1].base_offset <= offset:
                    self._drop_oldest_segment()
            self._after_start_moved()
            return log._log_start

    def enforce_retention(self, wall_ms: int, max_segments: int = 1 << 30) -> int:
        """Delete old segments by ``retention_ms`` / ``retention_bytes`` (at most
        ``max_segments`` per call: bounded work); returns how many were deleted."""
        log = self.host
        cfg = log.config
        if cfg.retention_ms < 0 and cfg.retention_bytes < 0:
            return 0
        with log._lock:
            if log.closed:
                return 0
            log._check_open("retention")
            hw = log._hw
            total = log.size_bytes
            doomed = 0
            with log._channel.io(log.log_dir, "retention"):
                for seg in log._segments:
                    if doomed >= max_segments or seg.size == 0 or seg.next_offset > hw:
                        break
                    by_size = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
                    by_time = cfg.retention_ms >= 0 and wall_ms - seg.largest_timestamp() > cfg.retention_ms
                    if not (by_size or by_time):
                        break
                    doomed += 1
                    total -= seg.size
                if not doomed:
                    return 0
                if doomed == len(log._segments):
                    log._roll(log.log_end_offset)  # the active segment goes too: a new one first
                    log.tail.clear()
                for _ in range(doomed):
                    self._drop_oldest_segment()
            log._log_start = max(log._log_start, log._segments[0].base_offset)
            self._after_start_moved()
            return doomed

    def _drop_oldest_segment(self) -> None:
        log = self.host
        seg = log._segments.pop(0)
        log._bases.pop(0)
        log._dirty.discard(seg.base_offset)
        seg.delete()

    def _after_start_moved(self) -> None:
        log = self.host
        log.epoch_cache.truncate_from_start(log._log_start)
        log._hw = min(max(log._hw, log._log_start), log.log_end_offset)
        log.recovery_point = max(log.recovery_point, log._log_start)

    # ---- truncation ----------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every offset ≥ ``offset`` (the batch containing it included, as Kafka does).
        True if anything was removed."""
        log = self.host
        with log._lock:
            if offset >= log.log_end_offset:
                return False
            if offset < log._log_start:
                self.truncate_fully_and_start_at(offset)
                return True
            with log._channel.io(log.log_dir, "truncate"):
                while len(log._segments) > 1 and log._segments[-1].base_offset >= offset:
                    seg = log._segments.pop()
                    log._bases.pop()
                    log._dirty.discard(seg.base_offset)
                    seg.delete()
                log._segments[-1].truncate_to(offset)
                log._dirty.add(log._segments[-1].base_offset)
                log._rebuild_producer_state()  # batches at or above the truncation point are gone
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = offset)."""
        log = self.host
        with log._lock:
            with log._channel.io(log.log_dir, "truncate"):
                new = LogSegment.create(log.path, offset, index_interval_bytes=log.config.index_interval_bytes,
                                        created_ms=log._now_ms())
                for seg in log._segments:
                    if seg.base_offset != offset:
                        seg.delete()
                    else:
                        seg.close()
                log._segments, log._bases = [], []
                log._add_segment(new)
                log._dirty = {offset}
                fsutil.fsync_dir(log.path)
            log._log_start = offset
            log.epoch_cache.clear()
            log.producer_state.clear()
            self._after_truncation()

    def _after_truncation(self) -> None:
        log = self.host
        log.tail.clear()
        log._truncations += 1   # a flush under way must not move the recovery point past this
        leo = log.log_end_offset
        log.epoch_cache.truncate_from_end(leo)
        log._hw = min(max(log._hw, log._log_start), leo)
        log.recovery_point = min(log.recovery_point, leo)
