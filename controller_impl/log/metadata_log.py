"""The controller's metadata log on disk: ``<metadata.log.dir>/__cluster_metadata-0/``.

Segment files ``<base offset, 20 digits>.log`` hold Kafka v2 record batches back to back
(``kafka_common.metadata.batches``: CRC-32C, leader epoch in ``partitionLeaderEpoch``).
Offsets are gap-free from 0.

* :meth:`MetadataLog.append` writes one batch and fdatasyncs it before returning: a caller
  that answers a request after ``append`` never acknowledges a change that a crash loses.
* It is the Raft log: ``start_offset`` (the first offset held: segments wholly below the
  newest snapshot are deleted), ``end_offset`` (next offset to write), ``high_watermark``
  (everything below it is committed — Raft's to say, set by :meth:`commit`). The leader
  writes with :meth:`write_batch` (no sync: many requests' records per fsync) then
  :meth:`flush`; a follower :meth:`append_batch` (the leader's bytes, its epochs kept) and
  :meth:`truncate_to` on divergence. ``epoch_starts`` indexes the epochs per offset.
* :meth:`open` recovers: it walks every segment, checks each batch (header, CRC, offset
  continuity, records decode) and truncates at the first bad byte — a torn or corrupt
  tail is cut off (not fatal) and reported in ``recovery``. Later segments are removed.
  Each good record is passed to ``on_record(record, offset)`` (replay into an image); with
  no ``on_record`` the records are not decoded (header, CRC and record count are checked),
  which is what makes start-up from a snapshot fast.
* :meth:`read` returns whole batches containing ``fetch_offset`` or later and below a
  limit (the high watermark), at least one batch even over ``max_bytes``.

Errors: ``OSError`` from the disk propagates (the controller treats a failed metadata dir
as fatal); :class:`LogError` for API misuse (non-contiguous offsets, bad truncation).
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Callable, Sequence

from kafka_common.batch_header import CorruptBatch, read_header, crc_ok
from kafka_common.metadata.batches import encode_batch
from kafka_runtime.fsutil import fsync_dir

from controller_impl.log.recovery import Recovery, recover
from controller_impl.log.segments import DIR_NAME, LogError, Segment, segment_name

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


class MetadataLog:
    """The metadata log of one controller (module docstring); recovery at open is
    :func:`~controller_impl.log.recovery.recover`'s, through the
    :class:`~controller_impl.log.recovery.RecoveringLog` protocol this class implements."""

    def __init__(self, directory: str, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._segments: list[Segment] = []
        # one entry per batch: base offsets (for bisect) and (segment index, pos, size, last)
        self._bases: list[int] = []
        self._where: list[tuple[int, int, int, int]] = []
        self.start_offset = 0
        self.end_offset = 0
        self.flushed_end = 0
        self.high_watermark = 0
        self.last_epoch = -1
        self.epoch_starts: list[tuple[int, int]] = []  # (leader epoch, first offset)
        self.recovery = Recovery()
        self.bytes_written = 0
        self.fsyncs = 0

    # -- opening / recovery -----------------------------------------------------------
    @classmethod
    def open(cls, metadata_log_dir: str, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
             on_record: Callable[[Any, int], None] | None = None) -> "MetadataLog":
        directory = os.path.join(metadata_log_dir, DIR_NAME)
        created = not os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        if created:
            fsync_dir(metadata_log_dir)
        log = cls(directory, segment_bytes)
        recover(log, on_record)
        log.high_watermark = log.end_offset  # single controller: what is durable is committed
        return log

    # -- the RecoveringLog side (controller_impl.log.recovery) -----------------------------
    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def add_segment(self, seg: Segment) -> None:
        self._segments.append(seg)

    def index_batch(self, base: int, last: int, epoch: int, seg_index: int, pos: int, size: int) -> None:
        self._bases.append(base)
        self._where.append((seg_index, pos, size, last))
        self.end_offset = last + 1
        if epoch != self.last_epoch:
            self.last_epoch = epoch
            self.epoch_starts.append((epoch, base))

    def roll(self, base_offset: int) -> None:
        path = os.path.join(self.directory, segment_name(base_offset))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.fsync(fd)
        fsync_dir(self.directory)
        self._segments.append(Segment(base_offset, path, fd, 0))

    # -- writing ----------------------------------------------------------------------
    def append(self, records: Sequence[Any], *, leader_epoch: int = 0, timestamp_ms: int,
               commit: bool = True) -> tuple[int, int]:
        """Write ``records`` as one batch at ``end_offset``, fdatasync; returns (first, last)."""
        data = encode_batch(self.end_offset, records, leader_epoch=leader_epoch,
                            timestamp_ms=timestamp_ms)
        first, last = self.append_batch(data)
        if commit:
            self.commit(last + 1)
        return first, last

    def write_batch(self, records: Sequence[Any], *, leader_epoch: int, timestamp_ms: int) -> tuple[int, int]:
        """Write ``records`` as one batch at ``end_offset`` WITHOUT syncing (the leader's
        group commit: several batches, then one :meth:`flush`). Returns (first, last)."""
        data = encode_batch(self.end_offset, records, leader_epoch=leader_epoch, timestamp_ms=timestamp_ms)
        return self.append_batch(data, sync=False)

    def flush(self) -> int:
        """fdatasync what was written; returns the end offset now durable. Safe to call from a
        worker thread while the loop writes more (what it writes later is not claimed)."""
        end = self.end_offset
        os.fdatasync(self._segments[-1].fd)  # earlier segments were synced when rolled
        self.fsyncs += 1
        self.flushed_end = max(self.flushed_end, min(end, self.end_offset))
        return end

    def append_batch(self, data: bytes, *, sync: bool = True) -> tuple[int, int]:
        """Append one encoded batch (a Raft follower's path); its base offset must be
        ``end_offset``. Durable on return when ``sync``; not committed until :meth:`commit`."""
        header = read_header(data, 0)
        if header.size_bytes != len(data) or not crc_ok(data, 0, header):
            raise LogError("append_batch: not exactly one valid batch")
        if header.base_offset != self.end_offset:
            raise LogError(f"append_batch: base offset {header.base_offset} != end offset {self.end_offset}")
        seg = self._segments[-1]
        if seg.size > 0 and seg.size + len(data) > self.segment_bytes:
            os.fdatasync(seg.fd)  # a rolled segment is complete and durable
            self.roll(self.end_offset)
            seg = self._segments[-1]
        view = memoryview(data)
        pos = seg.size
        written = 0
        while written < len(data):
            written += os.pwrite(seg.fd, view[written:], pos + written)
        if sync:
            os.fdatasync(seg.fd)
            self.fsyncs += 1
        self.bytes_written += len(data)
        seg.size += len(data)
        self.index_batch(header.base_offset, header.last_offset, header.partition_leader_epoch,
                    len(self._segments) - 1, pos, len(data))
        if sync:
            self.flushed_end = self.end_offset
        return header.base_offset, header.last_offset

    def append_fetched(self, data: bytes | memoryview) -> list[tuple[int, int, int]]:
        """A follower's fetched bytes as they are: the whole batches that continue the log
        (those below ``end_offset`` are skipped: already held), each checked once (header,
        CRC) and written with one ``pwrite`` per segment, not synced. Stops at the first gap
        or bad batch (what precedes it is kept). Returns (base, last, leader epoch) of each
        batch written."""
        view = memoryview(data)
        total = len(view)
        written: list[tuple[int, int, int]] = []
        run_start = run_end = 0          # the bytes of the run not written yet
        run: list[tuple[int, int, int, int, int]] = []   # (base, last, epoch, pos in data, size)
        expected = self.end_offset
        pos = 0
        while pos < total:
            try:
                header = read_header(view, pos)
            except CorruptBatch:
                break
            size = header.size_bytes
            if pos + size > total or header.base_offset > expected:
                break
            if header.base_offset < expected:
                if header.last_offset >= expected:
                    break  # overlaps what we hold: not a batch boundary of ours
                pos += size
                continue
            if not crc_ok(view, pos, header):
                break
            seg = self._segments[-1]
            pending = run_end - run_start
            if seg.size + pending > 0 and seg.size + pending + size > self.segment_bytes:
                self._write_run(view, run_start, run_end, run)
                written.extend((b, last, e) for b, last, e, _, _ in run)
                run = []
                seg = self._segments[-1]
                if seg.size > 0:
                    os.fdatasync(seg.fd)  # a rolled segment is complete and durable
                    self.roll(expected)
                run_start = run_end = pos
            if not run:
                run_start = run_end = pos
            run.append((header.base_offset, header.last_offset, header.partition_leader_epoch, pos, size))
            run_end = pos + size
            expected = header.last_offset + 1
            pos += size
        if run:
            self._write_run(view, run_start, run_end, run)
            written.extend((b, last, e) for b, last, e, _, _ in run)
        return written

    def _write_run(self, view: memoryview, start: int, end: int, run: list) -> None:
        seg = self._segments[-1]
        at = seg.size
        chunk = view[start:end]
        done = 0
        while done < len(chunk):
            done += os.pwrite(seg.fd, chunk[done:], at + done)
        seg_index = len(self._segments) - 1
        for base, last, epoch, pos, size in run:
            self.index_batch(base, last, epoch, seg_index, at + pos - start, size)
        seg.size += end - start
        self.bytes_written += end - start

    def commit(self, offset: int) -> None:
        """Everything below ``offset`` is committed (never moves backwards)."""
        if offset > self.end_offset:
            raise LogError(f"commit {offset} beyond end offset {self.end_offset}")
        self.high_watermark = max(self.high_watermark, offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a batch boundary, not below the HW)."""
        if offset < self.high_watermark:
            raise LogError(f"truncate_to {offset} below the high watermark {self.high_watermark}")
        i = bisect.bisect_left(self._bases, offset)
        if i < len(self._bases) and self._bases[i] != offset or (i == len(self._bases) and offset != self.end_offset):
            raise LogError(f"truncate_to {offset}: not a batch boundary")
        if i == len(self._bases):
            return
        seg_index, pos, _, _ = self._where[i]
        for seg in self._segments[seg_index + 1:]:
            os.close(seg.fd)
            os.unlink(seg.path)
        del self._segments[seg_index + 1:]
        seg = self._segments[seg_index]
        os.ftruncate(seg.fd, pos)
        os.fsync(seg.fd)
        seg.size = pos
        fsync_dir(self.directory)
        del self._bases[i:]
        del self._where[i:]
        self.end_offset = offset
        self.flushed_end = min(self.flushed_end, offset)
        while self.epoch_starts and self.epoch_starts[-1][1] >= offset:
            self.epoch_starts.pop()
        self.last_epoch = self.epoch_starts[-1][0] if self.epoch_starts else -1

    def drop_segments_before(self, offset: int) -> int:
        """Delete the segments wholly below ``offset`` (covered by a snapshot); never the
        active one. Returns the new ``start_offset``."""
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            seg = self._segments.pop(0)
            os.close(seg.fd)
            os.unlink(seg.path)
            k = bisect.bisect_left(self._bases, self._segments[0].base_offset)
            del self._bases[:k]
            del self._where[:k]
            self._where = [(si - 1, pos, size, last) for si, pos, size, last in self._where]
            self.start_offset = self._segments[0].base_offset
            while len(self.epoch_starts) > 1 and self.epoch_starts[1][1] <= self.start_offset:
                self.epoch_starts.pop(0)
        return self.start_offset

    def reset_to(self, offset: int) -> None:
        """Drop the whole log; it starts empty at ``offset`` (after installing a snapshot)."""
        for seg in self._segments:
            os.close(seg.fd)
            os.unlink(seg.path)
        self._segments, self._bases, self._where, self.epoch_starts = [], [], [], []
        self.start_offset = self.end_offset = self.flushed_end = offset
        self.high_watermark = max(self.high_watermark, offset)
        self.last_epoch = -1
        self.roll(offset)

    # -- reading ----------------------------------------------------------------------
    def read(self, fetch_offset: int, max_bytes: int, *, limit: int | None = None) -> bytes:
        """Whole batches from the one holding ``fetch_offset``, ending below ``limit``
        (default: the high watermark); at least one batch if any is there."""
        limit = self.high_watermark if limit is None else limit
        if fetch_offset >= limit:
            return b""
        i = bisect.bisect_right(self._bases, fetch_offset) - 1
        if i < 0:
            i = 0
        out: list[bytes] = []
        total = 0
        while i < len(self._bases) and self._where[i][3] < limit:
            seg_index, pos, size, _ = self._where[i]
            if out and total + size > max_bytes:
                break
            # coalesce consecutive batches of the same segment into one pread
            j = i + 1
            run = size
            while (j < len(self._bases) and self._where[j][0] == seg_index and self._where[j][3] < limit
                   and total + run + self._where[j][2] <= max_bytes):
                run += self._where[j][2]
                j += 1
            out.append(os.pread(self._segments[seg_index].fd, run, pos))
            total += run
            i = j
        return b"".join(out)

    def batch_count(self) -> int:
        return len(self._bases)

    def segment_files(self) -> list[str]:
        return [s.path for s in self._segments]

    def close(self) -> None:
        for seg in self._segments:
            try:
                os.close(seg.fd)
            except OSError:
                pass
        self._segments = []
