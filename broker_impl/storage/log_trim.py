"""Removing a partition log's old or divergent data: the log start offset, retention and
truncation. Mixed into :class:`broker_impl.storage.partition_log.PartitionLog` (whose lock,
segments and dir failure channel these methods use).

Retention (Kafka's ``deleteOldSegments``): only whole segments below the high watermark are
deleted, oldest first, while the log is over ``retention_bytes`` or the segment's newest
batch timestamp is older than ``retention_ms`` (wall clock, passed in); if that includes the
active segment, a new one is rolled first. The log start offset then becomes the first kept
segment's base. DeleteRecords moves the log start inside a segment (reads below it are
OFFSET_OUT_OF_RANGE) and deletes the segments wholly below it. The log start offset is
persisted by the log manager (``log-start-offset-checkpoint``) and given back to ``load``.
"""

from __future__ import annotations

from kafka_runtime import fsutil
from broker_impl.storage.segment import LogSegment


class LogTrimming:
    # ---- log start offset and retention ----------------------------------------------------
    def increment_log_start_offset(self, offset: int) -> int:
        """Move the log start up to ``offset`` (never down; at most the log end) and delete
        the segments wholly below it; returns the log start offset."""
        with self._lock:
            self._check_open("delete_records")
            offset = min(offset, self.log_end_offset)
            if offset <= self._log_start:
                return self._log_start
            self._log_start = offset
            with self._channel.io(self.log_dir, "delete_segments"):
                while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
                    self._drop_oldest_segment()
            self._after_start_moved()
            return self._log_start

    def enforce_retention(self, wall_ms: int, max_segments: int = 1 << 30) -> int:
        """Delete old segments by ``retention_ms`` / ``retention_bytes`` (at most
        ``max_segments`` per call: bounded work); returns how many were deleted."""
        cfg = self.config
        if cfg.retention_ms < 0 and cfg.retention_bytes < 0:
            return 0
        with self._lock:
            if self.closed:
                return 0
            self._check_open("retention")
            hw = self._hw
            total = self.size_bytes
            doomed = 0
            with self._channel.io(self.log_dir, "retention"):
                for seg in self._segments:
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
                if doomed == len(self._segments):
                    self._roll(self.log_end_offset)  # the active segment goes too: a new one first
                    self._tail = None
                for _ in range(doomed):
                    self._drop_oldest_segment()
            self._log_start = max(self._log_start, self._segments[0].base_offset)
            self._after_start_moved()
            return doomed

    def _drop_oldest_segment(self) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        self._dirty.discard(seg.base_offset)
        seg.delete()

    def _after_start_moved(self) -> None:
        self.epoch_cache.truncate_from_start(self._log_start)
        self._hw = min(max(self._hw, self._log_start), self.log_end_offset)
        self.recovery_point = max(self.recovery_point, self._log_start)

    # ---- truncation ----------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Remove every offset ≥ ``offset`` (the batch containing it included, as Kafka does).
        True if anything was removed."""
        with self._lock:
            if offset >= self.log_end_offset:
                return False
            if offset < self._log_start:
                self.truncate_fully_and_start_at(offset)
                return True
            with self._channel.io(self.log_dir, "truncate"):
                while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                    seg = self._segments.pop()
                    self._bases.pop()
                    self._dirty.discard(seg.base_offset)
                    seg.delete()
                self._segments[-1].truncate_to(offset)
                self._dirty.add(self._segments[-1].base_offset)
                self._rebuild_producer_state()  # batches at or above the truncation point are gone
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = offset)."""
        with self._lock:
            with self._channel.io(self.log_dir, "truncate"):
                new = LogSegment.create(self.path, offset, index_interval_bytes=self.config.index_interval_bytes,
                                        created_ms=self._now_ms())
                for seg in self._segments:
                    if seg.base_offset != offset:
                        seg.delete()
                    else:
                        seg.close()
                self._segments, self._bases = [], []
                self._add_segment(new)
                self._dirty = {offset}
                fsutil.fsync_dir(self.path)
            self._log_start = offset
            self.epoch_cache.clear()
            self.producer_state.clear()
            self._after_truncation()

    def _after_truncation(self) -> None:
        self._tail = None
        self._truncations += 1   # a flush under way must not move the recovery point past this
        leo = self.log_end_offset
        self.epoch_cache.truncate_from_end(leo)
        self._hw = min(max(self._hw, self._log_start), leo)
        self.recovery_point = min(self.recovery_point, leo)
