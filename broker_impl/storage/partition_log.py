"""One partition's log: ordered segments in ``<log dir>/<topic>-<partition>/``.

API used by the broker runtime (all methods are thread-safe; every OSError goes through the
dir failure channel and surfaces as :class:`KafkaStorageError`; the offset properties, the
``high_watermark`` setter and ``end_offset_for_epoch`` take no lock and do no I/O, so the
broker's event loop may use them while the log's dir worker is inside a slow append)::

    log.append_as_leader(records: bytes, leader_epoch: int) -> (base_offset, last_offset)
        validate v2 batches (CRC-32C), check idempotent producers' sequences against
        ``producer_state`` (atomically with the append), assign offsets from log_end_offset,
        stamp the leader epoch, write; InvalidRecordBatch on bad input (dir stays online);
        ProducerSequenceError (OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH) refused;
        a retried batch of a known producer (a duplicate) → its ORIGINAL (first, last)
        offsets, nothing appended
    log.append_as_follower(records: bytes) -> (first_offset, last_offset) | None
        batches already carry offsets and epochs (from the leader); first offset ≥ LEO
    log.read(offset, max_bytes, upper_offset=None, min_one=True) -> bytes
        whole batches from the one containing ``offset``; at least one batch if any exists
        below ``upper_offset`` (the HW for consumers, None for followers); b"" at the end;
        OffsetOutOfRange outside [log_start_offset, log_end_offset]; every batch's CRC is
        checked (``batch_crc.verify_read``): a corrupt one takes the dir offline
    log.log_start_offset, log.log_end_offset, log.high_watermark (settable, clamped),
    log.recovery_point, log.latest_epoch, log.end_offset_for_epoch(epoch) -> (epoch, offset)
    log.assign_epoch_start_offset(epoch, offset)     on becoming leader (Kafka's makeLeader)
    log.truncate_to(offset)                         follower truncation of a divergent tail
    log.truncate_fully_and_start_at(offset)         follower far behind the leader's start
    log.flush(), log.maybe_flush(now_ms)            fsync; log.flush.interval.messages/.ms
    log.offset_for_timestamp(ts_ms) -> offset | None    ListOffsets by time (header scan)
    log.increment_log_start_offset(offset) -> start  DeleteRecords / a follower following the
                                                    leader's log start; whole segments below go
    log.enforce_retention(wall_ms, max_segments) -> deleted segments (retention.ms/.bytes)
    log.size_bytes, log.close(), log.delete()
    log.producer_state                              ``broker_impl.state.producers.ProducerState``

Producer state (Kafka's ProducerStateManager): every append — leader, follower, future log —
records its batches' producer id / epoch / sequences / offsets in ``producer_state``; a load
and a truncation rebuild it from the log's tail (:mod:`broker_impl.storage.log_open`).

The log's parts, each seeing the log through its own host protocol: retention, the log start
and truncation (:mod:`.log_trim`); flush, fsyncs outside the lock (:mod:`.log_flush`); the
in-memory tail ``read_tail`` serves (:mod:`.log_tail`). Creation and loading: :mod:`.log_open`.

Segments roll by size (``log.segment.bytes``) and age (``log.roll.ms``, clock injected as
``now_ms``; less each segment's jitter, :func:`roll_jitter_ms`). A new segment is named by its
base offset; the previous one is fsynced at roll and the recovery point moves to its end.
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
import uuid
from typing import Callable

from kafka_common import batch_header as bh
from kafka_runtime import fsutil
from broker_impl.state.producers import Outcome, ProducerState, SequencedBatch
from broker_impl.storage import batch_crc, flush_deferral, log_open
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.epoch_cache import LeaderEpochCache, end_offset_for
from broker_impl.storage.errors import (INVALID_PRODUCER_EPOCH, MESSAGE_TOO_LARGE, OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        InvalidRecordBatch, KafkaStorageError, OffsetOutOfRange,
                                        LogClosed, ProducerSequenceError)
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig, roll_jitter_ms
from broker_impl.storage.log_flush import LogFlusher
from broker_impl.storage.log_recovery import RecoverySummary
from broker_impl.storage.log_tail import TailCache
from broker_impl.storage.log_trim import LogTrimmer
from broker_impl.storage.segment import LogSegment

NowMs = Callable[[], int]


FLUSH_NEVER = 2**63 - 1   # log.flush.interval.messages' default: no flush by count


class PartitionLog:
    """The segments, offsets, lock and unflushed marks; three parts, each holding a reference
    to the log as its host protocol: ``tail`` (:class:`~.log_tail.TailCache`), ``flusher``
    (:class:`~.log_flush.LogFlusher`), ``trimmer`` (:class:`~.log_trim.LogTrimmer`)."""

    def __init__(self, *, log_dir: str, path: str, topic: str, partition: int, topic_id: uuid.UUID | None,
                 config: LogConfig, channel: DirFailureChannel, now_ms: NowMs) -> None:
        self.log_dir = log_dir
        self.path = path
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.config = config
        self._channel = channel
        self._now_ms = now_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start = 0
        self._hw = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._dirty: set[int] = set()  # base offsets of segments with unflushed writes
        self.epoch_cache = LeaderEpochCache([], self._persist_epochs, self._epochs_assigned)
        self._epochs_unpersisted = False   # assigned since the file was last written (the next flush writes it)
        self.recovery = RecoverySummary()
        self.producer_state = ProducerState()
        self.closed = False
        self._parent_unsynced = False  # a new log's dir entry, not yet synced in the log dir
        self._segment_entry_unsynced = False   # a rolled segment's entry, not yet synced in self.path
        self._truncations = 0          # counts truncations: a flush across one keeps the recovery point
        # the newest appended batches, in memory; its read is the log's (lock-free, on the loop)
        self.tail = TailCache(self)
        self.read_tail = self.tail.read
        self.flusher = LogFlusher(self, now_ms())   # fsync, outside the lock; the time-based policy
        self.trimmer = LogTrimmer(self)             # log start, retention, truncation

    # ---- creation and loading: :mod:`broker_impl.storage.log_open` ----------------------------
    @classmethod
    def create(cls, log_dir: str, topic: str, partition: int, topic_id: uuid.UUID | None, config: LogConfig,
               channel: DirFailureChannel, now_ms: NowMs, *, dir_name: str | None = None) -> "PartitionLog":
        """A new, empty log in ``<log_dir>/<dir_name>`` (default: ``<topic>-<partition>``)."""
        return log_open.create(cls, log_dir, topic, partition, topic_id, config, channel, now_ms, dir_name=dir_name)

    @classmethod
    def load(cls, log_dir: str, dir_name: str, config: LogConfig, channel: DirFailureChannel, now_ms: NowMs, *,
             recovery_point: int, high_watermark: int, clean_shutdown: bool,
             log_start_offset: int = 0) -> "PartitionLog":
        """Open an existing partition dir; recover segments at or after ``recovery_point``
        (everything is trusted after a clean shutdown) truncating at the first bad batch."""
        return log_open.load(cls, log_dir, dir_name, config, channel, now_ms, recovery_point=recovery_point,
                             high_watermark=high_watermark, clean_shutdown=clean_shutdown,
                             log_start_offset=log_start_offset)

    def _rebuild_producer_state(self) -> None:
        """:func:`.log_open.rebuild_producer_state` (raises OSError: callers run it inside a
        channel.io block)."""
        log_open.rebuild_producer_state(self._segments, self.config.producer_state_scan_bytes, self.producer_state)

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _persist_epochs(self, entries: list[tuple[int, int]]) -> None:
        with self._channel.io(self.log_dir, "epoch_checkpoint"):
            ckpt.write_epochs(os.path.join(self.path, ckpt.EPOCH_CHECKPOINT), entries)
        self._epochs_unpersisted = False

    def _persist_epochs_if_due(self) -> None:
        if self._epochs_unpersisted:
            self._persist_epochs(self.epoch_cache.entries)

    def _epochs_assigned(self) -> None:
        """A new epoch entry (a leader's epoch start, a follower's batches of a new epoch): it
        covers offsets at or after the log end, none of them flushed yet, so the file is written
        by the flush that makes them durable, before the recovery point passes them (after an
        unclean stop, recovery rebuilds the entries of the batches past the recovery point).
        Kafka's KAFKA-15046: an fsync of this file per new leader in front of the appends was
        a produce-latency spike — here ~100 of them on a broker taking over 100 leaders."""
        self._epochs_unpersisted = True

    # ---- offsets -------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        # Lock-free (no I/O): the event loop sets it while an append may hold the log's lock
        # on a slow disk. Clamped again after the store in case a truncation ran meanwhile.
        self._hw = min(max(value, self._log_start), self.log_end_offset)
        leo = self.log_end_offset
        if self._hw > leo:
            self._hw = leo

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def is_offline(self) -> bool:
        return self._channel.is_offline(self.log_dir)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Lock-free, on a snapshot of the epoch entries (never waits for an append in
        progress on a slow disk)."""
        leo = self.log_end_offset
        return end_offset_for(self.epoch_cache.snapshot, epoch, leo)

    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        with self._lock:
            self._check_open("epoch_checkpoint")
            self.epoch_cache.assign(epoch, offset)

    # ---- append --------------------------------------------------------------------------
    def _validate(self, records: bytes | bytearray | memoryview) -> list[tuple[int, bh.BatchHeader]]:
        if not records:
            raise InvalidRecordBatch(f"{self.topic}-{self.partition}: no record batches to append")
        try:
            headers = batch_crc.checked_batches(records)
        except bh.CorruptBatch as exc:
            raise InvalidRecordBatch(f"{self.topic}-{self.partition}: {exc}") from None
        for pos, header in headers:
            if header.size_bytes > self.config.segment_bytes:
                raise InvalidRecordBatch(f"{self.topic}-{self.partition}: batch at {pos} is {header.size_bytes} "
                                         f"bytes, more than log.segment.bytes={self.config.segment_bytes}",
                                         MESSAGE_TOO_LARGE)
            if header.last_offset_delta < 0 or header.record_count < 0:
                raise InvalidRecordBatch(f"{self.topic}-{self.partition}: batch at {pos} has negative "
                                         f"last_offset_delta/record_count")
        return headers

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> tuple[int, int]:
        """Append producer batches: offsets assigned from the log end, leader epoch stamped."""
        headers = self._validate(records)
        buf = bytearray(records)
        with self._lock:
            self._check_open("append")
            verdict = self.producer_state.check_batches([SequencedBatch.of(h) for _, h in headers])
            if verdict.outcome is Outcome.DUPLICATE:
                return verdict.first_offset, verdict.last_offset  # a retry: already in the log
            if verdict.outcome is Outcome.OUT_OF_ORDER:
                raise ProducerSequenceError(f"{self.topic}-{self.partition}: {verdict.message}",
                                            OUT_OF_ORDER_SEQUENCE_NUMBER)
            if verdict.outcome is Outcome.FENCED_EPOCH:
                raise ProducerSequenceError(f"{self.topic}-{self.partition}: {verdict.message}", INVALID_PRODUCER_EPOCH)
            first = next_offset = self.log_end_offset
            stamped = []
            for pos, header in headers:
                bh.set_base_offset(buf, pos, next_offset)
                bh.set_partition_leader_epoch(buf, pos, leader_epoch)
                stamped.append((pos, bh.read_header(buf, pos)))
                next_offset += header.last_offset_delta + 1
            self._append(buf, stamped)
            self.epoch_cache.assign(leader_epoch, first)
            return first, next_offset - 1

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> tuple[int, int] | None:
        """Append batches fetched from the leader as they are (offsets and epochs kept)."""
        if not records:
            return None
        headers = self._validate(records)
        with self._lock:
            self._check_open("append")
            expected = self.log_end_offset
            for pos, header in headers:
                if header.base_offset < expected:
                    raise InvalidRecordBatch(f"{self.topic}-{self.partition}: out of order offsets: batch at {pos} "
                                             f"starts at {header.base_offset}, log end is {expected}")
                expected = header.next_offset
            self._append(records, headers)
            self.epoch_cache.assign_many([(h.partition_leader_epoch, h.base_offset) for _, h in headers])
            return headers[0][1].base_offset, headers[-1][1].last_offset

    def _append(self, data: bytes | bytearray | memoryview, headers: list[tuple[int, bh.BatchHeader]]) -> None:
        last_offset = headers[-1][1].last_offset
        seg = self._segments[-1]
        now = self._now_ms()
        if seg.size > 0 and (seg.size + len(data) > self.config.segment_bytes
                             or self._aged(seg, now)
                             or not seg.can_hold(last_offset)):
            seg = self._roll(headers[0][1].base_offset)
            self.tail.clear()   # read() does not cross segments: neither does read_tail()
        with self._channel.io(self.log_dir, "append"):
            seg.append(data, headers)
        self.tail.remember(data, headers, self._hw)
        for _, header in headers:
            self.producer_state.record_header(header)
        self._dirty.add(seg.base_offset)
        self._unflushed_messages += sum(h.record_count for _, h in headers)
        if self._unflushed_messages >= self.config.flush_interval_messages:
            flush_deferral.flush_due(self)   # now, or by the dir worker's flush threads

    def _aged(self, seg: LogSegment, now: int) -> bool:
        age, cfg = now - seg.created_ms, self.config
        if age >= cfg.roll_ms:
            return True
        return cfg.roll_jitter_ms > 0 and age >= cfg.roll_ms - roll_jitter_ms(
            self.topic, self.partition, seg.base_offset, cfg.roll_ms, cfg.roll_jitter_ms)

    def _roll(self, base_offset: int) -> LogSegment:
        """A new active segment. The old one's fsync and the sync of the new file's entry in
        the partition dir are a flush (:meth:`flush`): with a flush by count configured, the
        next one of those; otherwise :func:`flush_deferral.flush_soon` runs it now, or in a dir
        job leaves it to the dir's flush threads without the job's answer waiting for it (Kafka
        flushes a rolled segment asynchronously too)."""
        with self._channel.io(self.log_dir, "roll"):
            new = LogSegment.create(self.path, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                                    created_ms=self._now_ms())
        self._segment_entry_unsynced = True
        self._add_segment(new)
        if self.config.flush_interval_messages >= FLUSH_NEVER:
            flush_deferral.flush_soon(self)
        # else: the old segment stays dirty and the next flush by count (a few messages away)
        # syncs it and the new file's entry — a roll burst (every partition of a topic created
        # at once rolls in the same second) adds no fsyncs of its own in front of those flushes
        return new

    # ---- read ----------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, upper_offset: int | None = None, min_one: bool = True) -> bytes:
        with self._lock:
            self._check_open("read")
            leo = self.log_end_offset
            if offset < self._log_start or offset > leo:
                raise OffsetOutOfRange(offset, self._log_start, leo)
            i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            with self._channel.io(self.log_dir, "read"):
                for seg in self._segments[i:]:
                    if seg.next_offset > offset:  # the first segment holding offsets ≥ offset
                        data = seg.read(offset, max_bytes, upper_offset, min_one)
                        batch_crc.verify_read(data, seg.log_path, offset)   # nothing corrupt is served
                        return data
            return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """ListOffsets by time without a time index: the base offset of the first batch whose
        max timestamp is ≥ ``timestamp_ms`` (a linear header scan; None if there is none)."""
        with self._lock:
            with self._channel.io(self.log_dir, "read"):
                for seg in self._segments:
                    pos = 0
                    while pos < seg.size:
                        header = seg.header_at(pos)
                        if header.max_timestamp >= timestamp_ms:
                            return max(header.base_offset, self._log_start)
                        pos += header.size_bytes
            return None

    def segment_marks(self) -> list[tuple[int, int, int]]:
        """(base offset, size in bytes, file modification time in ms) of every segment, oldest
        first — what ListOffsets v0 answers from (Kafka's ``legacyFetchOffsetsBefore``)."""
        with self._lock:
            with self._channel.io(self.log_dir, "read"):
                return [(seg.base_offset, seg.size, int(os.stat(seg.log_path).st_mtime * 1000))
                        for seg in self._segments]

    # ---- the parts' calls: flush (LogFlusher), log start / retention / truncation (LogTrimmer)
    def flush(self) -> bool:
        return self.flusher.flush()

    def maybe_flush(self, now_ms: int) -> bool:
        return self.flusher.maybe_flush(now_ms)

    def increment_log_start_offset(self, offset: int) -> int:
        return self.trimmer.increment_log_start_offset(offset)

    def enforce_retention(self, wall_ms: int, max_segments: int = 1 << 30) -> int:
        return self.trimmer.enforce_retention(wall_ms, max_segments)

    def truncate_to(self, offset: int) -> bool:
        return self.trimmer.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.trimmer.truncate_fully_and_start_at(offset)

    # ---- life cycle ----------------------------------------------------------------------
    def _check_open(self, op: str) -> None:
        """Before an operation under the log's lock: its dir is not offline, and the log was
        not closed meanwhile (deleted — topic deleted, replica moved away — or its dir taken
        offline): an append or read that was queued before the close must not meet the
        closed files and report its healthy dir as failed (Kafka's KAFKA-15391)."""
        self._channel.check(self.log_dir, op)
        if self.closed:
            raise LogClosed(f"{self.topic}-{self.partition} in {self.log_dir} was closed ({op})")

    def close(self) -> None:
        """Close file handles without flushing (used for offline dirs and at shutdown after flush)."""
        with self._lock:
            for seg in self._segments:
                seg.close()
            self.tail.clear()
            self.closed = True

    def delete(self) -> None:
        """Remove the partition dir and everything in it."""
        with self._lock:
            self.close()
            with self._channel.io(self.log_dir, "delete_log"):
                if os.path.lexists(self.path):  # already gone is not a disk failure
                    shutil.rmtree(self.path)
                fsutil.fsync_dir(self.log_dir)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition} in {self.log_dir}, start={self._log_start}, "
                f"end={self.log_end_offset}, hw={self._hw}, segments={len(self._segments)})")
