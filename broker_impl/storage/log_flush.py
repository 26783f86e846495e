"""Making a partition log durable: ``flush`` (fsync), the time-based policy. A part of
:class:`broker_impl.storage.partition_log.PartitionLog` (its ``flusher``), working through the
:class:`FlushHost` protocol: the log's lock, segments, unflushed marks (the log's own: its
appends, rolls and truncations set them; a flush takes and clears them) and dir failure channel.
The flusher owns the flushes under way (``inflight``) and the time of the last one.

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
  in flight took (:attr:`LogFlusher.inflight`), so the later one does not return — or move the recovery
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
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from broker_impl.storage import flush_deferral
from broker_impl.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from broker_impl.storage.failure import DirFailureChannel
    from broker_impl.storage.log_config import LogConfig
    from broker_impl.storage.segment import LogSegment


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


class FlushHost(Protocol):
    """The partition log as its flusher sees it."""
    log_dir: str
    path: str
    topic: str
    partition: int
    config: LogConfig
    closed: bool
    recovery_point: int
    _lock: threading.RLock
    _channel: DirFailureChannel
    _now_ms: Callable[[], int]
    _segments: list[LogSegment]
    # the unflushed marks: segment base offsets with unsynced writes, messages since the
    # last flush, a rolled segment's entry in the partition dir, a new log's in the log dir
    _dirty: set[int]
    _unflushed_messages: int
    _segment_entry_unsynced: bool
    _parent_unsynced: bool
    _truncations: int    # counts truncations: a flush across one keeps the recovery point

    @property
    def log_end_offset(self) -> int: ...

    @property
    def is_offline(self) -> bool: ...

    def flush(self) -> bool:
        """The flusher's :meth:`LogFlusher.flush` (what :mod:`.flush_deferral` calls)."""
        ...

    def _persist_epochs_if_due(self) -> None:
        """Write the leader-epoch file if an entry was assigned since it was written."""
        ...


class LogFlusher:
    __slots__ = ("host", "inflight", "last_flush_ms")

    def __init__(self, host: FlushHost, now_ms: int) -> None:
        self.host = host
        self.inflight: list[_Unsynced] = []   # what the flushes under way took
        self.last_flush_ms = now_ms

    def flush(self) -> bool:
        """fsync every segment with unflushed data (outside the lock); the recovery point
        becomes the log end seen when the flush began. True if it flushed; a log closed since
        the flush was noted (deleted, swapped out) is skipped, an offline one raises."""
        log = self.host
        with log._lock:
            if log.closed:
                if log.is_offline:   # its append is not acked: the data never reached the disk
                    raise KafkaStorageError(log.log_dir, None, "fsync",
                                            f"{log.topic}-{log.partition}: {log.log_dir} went offline before the flush")
                return False
            taken, fds = self._take_unsynced()
            end, truncations = log.log_end_offset, log._truncations
            self.inflight.append(taken)
        try:
            with log._channel.io(log.log_dir, "fsync"):
                for fd in fds:
                    os.fsync(fd)
        finally:
            _close_all(fds)
            with log._lock:
                self.inflight.remove(taken)
        with log._lock:
            log._persist_epochs_if_due()                 # before the recovery point moves past them
            self.last_flush_ms = log._now_ms()
            if log._truncations == truncations and end > log.recovery_point:
                log.recovery_point = end
        return True

    def _take_unsynced(self) -> tuple[_Unsynced, list[int]]:
        """Under the lock: what this flush syncs — the dirty segments and entries, and whatever
        flushes still in flight took — as duplicated descriptors; the marks are cleared."""
        log = self.host
        want = _Unsynced({base: False for base in log._dirty}, log._segment_entry_unsynced, log._parent_unsynced)
        for other in self.inflight:
            for base, index in other.segments.items():
                want.segments[base] = want.segments.get(base, False) or index
            want.entry |= other.entry
            want.parent |= other.parent
        taken, fds = _Unsynced(entry=want.entry, parent=want.parent), []
        try:
            with log._channel.io(log.log_dir, "fsync"):
                for seg in log._segments:
                    if seg.base_offset in want.segments:
                        seg_fds, taken.segments[seg.base_offset] = seg.take_sync_fds(want.segments[seg.base_offset])
                        fds.extend(seg_fds)
                for path in ([log.path] if want.entry else []) + ([log.log_dir] if want.parent else []):
                    fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
        except BaseException:
            _close_all(fds)
            raise
        log._dirty.clear()
        log._unflushed_messages = 0
        log._segment_entry_unsynced = log._parent_unsynced = False
        return taken, fds

    def maybe_flush(self, now_ms: int) -> bool:
        """Time-based flush policy (log.flush.interval.ms); True if it flushed (or, in a dir job,
        noted the flush for the dir's flush threads). A log whose lock is taken — an append or
        another operation under way — waits for the next round instead of holding up the
        caller's thread."""
        log = self.host
        if not log._lock.acquire(blocking=False):
            return False
        try:
            if log._dirty and now_ms - self.last_flush_ms >= log.config.flush_interval_ms:
                flush_deferral.flush_due(log)   # in the maintenance job: on the dir's flush threads
                return True
            return False
        finally:
            log._lock.release()
