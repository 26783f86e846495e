"""Making a partition log durable: ``flush`` (fsync), the time-based policy. Mixed into
:class:`broker_impl.storage.partition_log.PartitionLog` (whose lock, segments, dirty marks and
dir failure channel these methods use).

The fsyncs run outside the log's lock, as Kafka's ``UnifiedLog.flush`` runs them: under the
lock a flush only takes what it will sync — duplicated descriptors of the dirty segments' files
(and of the partition dir / log dir whose entries are unsynced) — and clears the marks; it then
fsyncs without the lock, and moves the recovery point under the lock again. Appends, reads and
the dir's other jobs on this log go on meanwhile; before, an append to a log waited behind the
whole fsync of that log, and the dir's data worker — one thread for every log of the dir —
with it.

What that must keep true:

* A flush that returns has made durable everything appended before it began. Two flushes of
  one log may overlap (the dir's flush threads run 8): each also syncs what the others still
  in flight took (:attr:`_inflight`), so the later one does not return — or move the recovery
  point — on the strength of an fsync that has not finished.
* The recovery point moves only to the log end seen when the flush began, never down, and not
  at all when a truncation ran meanwhile (the flushed offsets may be gone and new data at them
  unsynced).
* A segment deleted or closed during the fsync (retention, truncation, a swap, the dir going
  offline) is no disk failure: the duplicated descriptor stays valid. An fsync error is: it
  goes through the failure channel as before (op ``fsync``).
* The leader-epoch file is written before the recovery point passes the epochs' offsets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from broker_impl.storage import flush_deferral
from broker_impl.storage.errors import KafkaStorageError


@dataclass(eq=False)
class _Unsynced:
    """What one flush syncs: segment base offset → with its index; the partition dir's entries
    (a rolled segment's new file); the log dir's entry of the partition dir (a new log)."""
    segments: dict[int, bool] = field(default_factory=dict)
    entry: bool = False
    parent: bool = False


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:   # a duplicate's close reports nothing about the data: the fsync did
            pass


class LogFlushing:
    def flush(self) -> bool:
        """fsync every segment with unflushed data (outside the lock); the recovery point
        becomes the log end seen when the flush began. True if it flushed; a log closed since
        the flush was noted (deleted, swapped out) is skipped, an offline one raises."""
        with self._lock:
            if self.closed:
                if self.is_offline:   # its append is not acked: the data never reached the disk
                    raise KafkaStorageError(self.log_dir, None, "fsync",
                                            f"{self.topic}-{self.partition}: {self.log_dir} went offline before the flush")
                return False
            taken, fds = self._take_unsynced()
            end, truncations = self.log_end_offset, self._truncations
            self._inflight.append(taken)
        try:
            with self._channel.io(self.log_dir, "fsync"):
                for fd in fds:
                    os.fsync(fd)
        finally:
            _close_all(fds)
            with self._lock:
                self._inflight.remove(taken)
        with self._lock:
            if self._epochs_unpersisted:                 # before the recovery point moves past them
                self._persist_epochs(self.epoch_cache.entries)
            self._last_flush_ms = self._now_ms()
            if self._truncations == truncations and end > self.recovery_point:
                self.recovery_point = end
        return True

    def _take_unsynced(self) -> tuple[_Unsynced, list[int]]:
        """Under the lock: what this flush syncs — the dirty segments and entries, and whatever
        flushes still in flight took — as duplicated descriptors; the marks are cleared."""
        want = _Unsynced({base: False for base in self._dirty}, self._segment_entry_unsynced, self._parent_unsynced)
        for other in self._inflight:
            for base, index in other.segments.items():
                want.segments[base] = want.segments.get(base, False) or index
            want.entry |= other.entry
            want.parent |= other.parent
        taken, fds = _Unsynced(entry=want.entry, parent=want.parent), []
        try:
            with self._channel.io(self.log_dir, "fsync"):
                for seg in self._segments:
                    if seg.base_offset in want.segments:
                        seg_fds, taken.segments[seg.base_offset] = seg.take_sync_fds(want.segments[seg.base_offset])
                        fds.extend(seg_fds)
                for path in ([self.path] if want.entry else []) + ([self.log_dir] if want.parent else []):
                    fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
        except BaseException:
            _close_all(fds)
            raise
        self._dirty.clear()
        self._unflushed_messages = 0
        self._segment_entry_unsynced = self._parent_unsynced = False
        return taken, fds

    def maybe_flush(self, now_ms: int) -> bool:
        """Time-based flush policy (log.flush.interval.ms); True if it flushed (or, in a dir job,
        noted the flush for the dir's flush threads). A log whose lock is taken — an append or
        another operation under way — waits for the next round instead of holding up the
        caller's thread."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._dirty and now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
                flush_deferral.flush_due(self)   # in the maintenance job: on the dir's flush threads
                return True
            return False
        finally:
            self._lock.release()
