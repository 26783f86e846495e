"""One log segment: ``<base>.log`` (v2 batches back to back) + ``<base>.index`` (sparse).

Kafka's on-disk layout: files are named by the segment's base offset on 20 digits
(``00000000000000000000.log``). The offset index holds 8-byte entries
``(offset - base_offset: int32, file position: int32)``, big-endian, one every
``index_interval_bytes`` of log data, each pointing at the start of a batch. Unlike Kafka we
do not preallocate the index file: its size is exactly 8 × entries. No ``.timeindex`` is
written (nothing here looks offsets up by timestamp).

Batches are opaque: only the 61-byte header is read (:mod:`kafka_common.batch_header`).
This module raises plain ``OSError`` on I/O failure; :class:`~.partition_log.PartitionLog`
routes those through the dir failure channel.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from typing import Iterator

from kafka_common import batch_header as bh

_INDEX_ENTRY = struct.Struct(">ii")
INDEX_ENTRY_BYTES = 8
MAX_RELATIVE_OFFSET = 2**31 - 1
RECOVERY_CHUNK_BYTES = 8 << 20
HEADER_SCAN_CHUNK_BYTES = 1 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(file_name: str) -> int | None:
    stem, dot, ext = file_name.partition(".")
    if ext != "log" or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


@dataclass(slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    epochs: list[tuple[int, int]]  # (partition_leader_epoch, base_offset) of each batch, in order
    reason: str = ""


def _pwrite_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


def _pread_exact(fd: int, n: int, pos: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = os.pread(fd, n, pos)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
        pos += len(chunk)
    return b"".join(chunks)


class LogSegment:
    """A segment's files and in-memory index. Not thread-safe: the partition log locks."""

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int, created_ms: int) -> None:
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = os.path.join(dir_path, segment_name(base_offset) + ".log")
        self.index_path = os.path.join(dir_path, segment_name(base_offset) + ".index")
        self.size = 0
        self.next_offset = base_offset  # offset after the last batch (== base when empty)
        # the largest batch max timestamp (time-based retention); None = not known yet (a
        # loaded or truncated segment: computed by a header scan when retention needs it)
        self.max_timestamp: int | None = None
        self._index_offsets: list[int] = []  # absolute offsets
        self._index_positions: list[int] = []
        self._bytes_since_index = 0
        self._log_fd = -1
        self._index_fd = -1
        # the index file changed since its last fsync: a flush syncs it only then (a sync of a
        # clean file still costs the device a cache flush; with small records most flushes of
        # a segment find its index unchanged)
        self._index_unsynced = False

    # ---- open / create -------------------------------------------------------------------
    @classmethod
    def create(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int, created_ms: int) -> "LogSegment":
        seg = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes, created_ms=created_ms)
        seg._log_fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        # an empty new index needs no sync of its own: the sync of the partition dir that makes
        # the new files' entries durable (at the log's creation, or the roll's flush) covers it
        seg._index_fd = os.open(seg.index_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        return seg

    @classmethod
    def open_existing(cls, dir_path: str, base_offset: int, *, index_interval_bytes: int, created_ms: int) -> "LogSegment":
        seg = cls(dir_path, base_offset, index_interval_bytes=index_interval_bytes, created_ms=created_ms)
        seg._log_fd = os.open(seg.log_path, os.O_RDWR)
        seg._index_fd = os.open(seg.index_path, os.O_RDWR | os.O_CREAT, 0o644)
        seg._index_unsynced = True   # written by an earlier process: maybe not synced (a kill -9)
        seg.size = os.fstat(seg._log_fd).st_size
        return seg

    def load_trusted(self) -> bool:
        """Load a segment below the recovery point: read its index, find its next offset by
        walking headers from the last index entry. False if anything looks wrong (the caller
        then runs :meth:`recover`)."""
        raw = _pread_exact(self._index_fd, os.fstat(self._index_fd).st_size, 0)
        if len(raw) % INDEX_ENTRY_BYTES:
            return False
        last_off, last_pos = self.base_offset - 1, -1
        offsets, positions = [], []
        for rel, pos in _INDEX_ENTRY.iter_unpack(raw):
            off = self.base_offset + rel
            if off <= last_off or pos <= last_pos or pos >= self.size or rel < 0:
                return False
            offsets.append(off)
            positions.append(pos)
            last_off, last_pos = off, pos
        pos = positions[-1] if positions else 0
        next_offset = self.base_offset
        while pos < self.size:
            if not positions and pos >= self.index_interval_bytes:
                return False  # that batch would have an entry (an older build indexed every first batch): lost
            head = _pread_exact(self._log_fd, bh.HEADER_BYTES, pos)
            try:
                header = bh.read_header(head)
            except bh.CorruptBatch:
                return False
            if pos + header.size_bytes > self.size or header.base_offset < next_offset:
                return False
            if positions and pos == positions[-1] and header.base_offset != offsets[-1]:
                return False
            next_offset = header.next_offset
            pos += header.size_bytes
        self._index_offsets, self._index_positions = offsets, positions
        self.next_offset = next_offset
        self._bytes_since_index = self.size - (positions[-1] if positions else 0)
        return True

    def recover(self, min_offset: int) -> RecoveryResult:
        """Scan every batch (header, CRC-32C, increasing offsets ≥ ``min_offset``), rebuild the
        index, and truncate the file at the first invalid or torn batch."""
        self._index_offsets, self._index_positions = [], []
        self._bytes_since_index = 0
        epochs: list[tuple[int, int]] = []
        expected = max(min_offset, self.base_offset)
        pos, reason = 0, ""
        buf, buf_pos = b"", 0
        while pos < self.size:
            if pos + bh.HEADER_BYTES > buf_pos + len(buf):
                buf_pos, buf = pos, _pread_exact(self._log_fd, min(RECOVERY_CHUNK_BYTES, self.size - pos), pos)
            try:
                header = bh.read_header(buf, pos - buf_pos)
            except bh.CorruptBatch as exc:
                reason = str(exc)
                break
            end = pos + header.size_bytes
            if end > self.size:
                reason = f"torn batch at position {pos}: {header.size_bytes} bytes, {self.size - pos} on disk"
                break
            if end > buf_pos + len(buf):
                buf_pos, buf = pos, _pread_exact(self._log_fd, max(min(RECOVERY_CHUNK_BYTES, self.size - pos), header.size_bytes), pos)
            if not bh.crc_ok(buf, pos - buf_pos, header):
                reason = f"CRC mismatch in batch at position {pos} (offset {header.base_offset})"
                break
            if header.base_offset < expected or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET \
                    or header.last_offset_delta < 0:
                reason = f"batch at position {pos} has offset {header.base_offset}, expected ≥ {expected}"
                break
            self._maybe_index(header.base_offset, pos, header.size_bytes)
            epochs.append((header.partition_leader_epoch, header.base_offset))
            expected = header.next_offset
            self.next_offset = header.next_offset
            pos = end
        truncated = self.size - pos
        if truncated:
            os.ftruncate(self._log_fd, pos)
            self.size = pos
        self._rewrite_index()
        return RecoveryResult(valid_bytes=pos, truncated_bytes=truncated, epochs=epochs, reason=reason)

    # ---- write ---------------------------------------------------------------------------
    def _maybe_index(self, offset: int, pos: int, nbytes: int) -> bool:
        """An index entry once ``index_interval_bytes`` were written since the last one. As in
        Kafka, a segment's first batch gets none (a lookup before the first entry reads from
        position 0): a segment smaller than the interval — every segment of a small-record
        partition rolled by age — keeps an empty index that no flush has to sync."""
        added = False
        if self._bytes_since_index >= self.index_interval_bytes:
            if not self._index_positions or pos > self._index_positions[-1]:
                self._index_offsets.append(offset)
                self._index_positions.append(pos)
                self._bytes_since_index = 0
                added = True
        self._bytes_since_index += nbytes
        return added

    def append(self, data: bytes | bytearray | memoryview, headers: list[tuple[int, bh.BatchHeader]]) -> None:
        """Write ``data`` (validated batches; ``headers`` = (position in data, header)) at the end."""
        start = self.size
        _pwrite_all(self._log_fd, data, start)
        self.size = start + len(data)
        new_entries = []
        for rel_pos, header in headers:
            if self._maybe_index(header.base_offset, start + rel_pos, header.size_bytes):
                new_entries.append(_INDEX_ENTRY.pack(header.base_offset - self.base_offset, start + rel_pos))
        if headers:
            self.next_offset = headers[-1][1].next_offset
            if self.max_timestamp is not None or start == 0:
                newest = max(h.max_timestamp for _, h in headers)
                self.max_timestamp = newest if self.max_timestamp is None else max(self.max_timestamp, newest)
        if new_entries:
            first_new = len(self._index_positions) - len(new_entries)
            _pwrite_all(self._index_fd, b"".join(new_entries), first_new * INDEX_ENTRY_BYTES)
            self._index_unsynced = True

    def _rewrite_index(self) -> None:
        data = b"".join(_INDEX_ENTRY.pack(o - self.base_offset, p)
                        for o, p in zip(self._index_offsets, self._index_positions))
        self._index_unsynced = True
        os.ftruncate(self._index_fd, 0)
        _pwrite_all(self._index_fd, data, 0)

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def flush(self) -> None:
        os.fsync(self._log_fd)
        if self._index_unsynced:
            os.fsync(self._index_fd)
            self._index_unsynced = False

    def take_sync_fds(self, with_index: bool) -> tuple[list[int], bool]:
        """For a flush that fsyncs outside its log's lock: duplicates of the .log's descriptor
        and, if it changed since its last sync (or ``with_index``), the .index's, plus whether
        the index is among them. A duplicate stays valid when the segment is closed or deleted
        meanwhile (an fsync of the unlinked file is then harmless). The index counts as synced
        from here: a write to it after this call marks it again. The caller closes the fds."""
        index = with_index or self._index_unsynced
        fds = [os.dup(self._log_fd)]
        if index:
            try:
                fds.append(os.dup(self._index_fd))
            except OSError:
                os.close(fds[0])
                raise
        self._index_unsynced = False
        return fds, index

    # ---- read ----------------------------------------------------------------------------
    def header_at(self, pos: int) -> bh.BatchHeader:
        return bh.read_header(_pread_exact(self._log_fd, bh.HEADER_BYTES, pos))

    def tail_start(self, max_bytes: int) -> int:
        """A batch start from which at most about ``max_bytes`` of this segment remain: the
        first indexed position at or after ``size - max_bytes`` (else the last indexed one, so
        at most ``max_bytes`` + one index interval + one batch; 0 for a short segment)."""
        if max_bytes >= self.size or not self._index_positions:
            return 0
        i = bisect.bisect_left(self._index_positions, self.size - max_bytes)
        return self._index_positions[min(i, len(self._index_positions) - 1)]

    def iter_headers(self, start_pos: int = 0, chunk_bytes: int = HEADER_SCAN_CHUNK_BYTES) -> Iterator[bh.BatchHeader]:
        """Headers of the batches from ``start_pos`` (a batch start) to the end, the file read
        in chunks of ``chunk_bytes``; stops at a header that does not parse (raises OSError)."""
        pos, buf, buf_pos = start_pos, b"", start_pos
        while pos < self.size:
            rel = pos - buf_pos
            if rel + bh.HEADER_BYTES > len(buf):
                buf, buf_pos, rel = _pread_exact(self._log_fd, min(chunk_bytes, self.size - pos), pos), pos, 0
            try:
                header = bh.read_header(buf, rel)
            except bh.CorruptBatch:
                return
            yield header
            pos += header.size_bytes

    def find_batch(self, offset: int) -> tuple[int, bh.BatchHeader] | None:
        """(position, header) of the first batch whose last offset ≥ ``offset``."""
        i = bisect.bisect_right(self._index_offsets, offset) - 1
        pos = self._index_positions[i] if i >= 0 else 0
        while pos < self.size:
            header = self.header_at(pos)
            if header.last_offset >= offset:
                return pos, header
            pos += header.size_bytes
        return None

    def read(self, offset: int, max_bytes: int, upper_offset: int | None, min_one: bool) -> bytes:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` (but the
        first batch whole if ``min_one``), stopping before a batch whose base offset is
        ≥ ``upper_offset``."""
        found = self.find_batch(offset)
        if found is None:
            return b""
        pos, first = found
        if upper_offset is not None and first.base_offset >= upper_offset:
            return b""
        want = min(max(max_bytes, first.size_bytes if min_one else 0), self.size - pos)
        data = _pread_exact(self._log_fd, want, pos)
        end = 0
        while end + bh.HEADER_BYTES <= len(data):
            header = bh.read_header(data, end)
            if end + header.size_bytes > len(data):
                break
            if upper_offset is not None and header.base_offset >= upper_offset:
                break
            if end + header.size_bytes > max_bytes and not (min_one and end == 0):
                break
            end += header.size_bytes
        return data[:end]

    # ---- truncate / close ----------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop the batch containing ``offset`` and everything after; returns bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        pos, header = found
        removed = self.size - pos
        self.max_timestamp = None
        os.ftruncate(self._log_fd, pos)
        self.size = pos
        self.next_offset = header.base_offset if pos > 0 else self.base_offset
        i = bisect.bisect_left(self._index_positions, pos)
        del self._index_offsets[i:], self._index_positions[i:]
        self._bytes_since_index = pos - (self._index_positions[-1] if self._index_positions else 0)
        self._index_unsynced = True
        os.ftruncate(self._index_fd, i * INDEX_ENTRY_BYTES)
        return removed

    def largest_timestamp(self) -> int:
        """The largest batch max timestamp (a header scan the first time for a loaded
        segment); a segment whose batches carry no timestamp (-1) falls back to the file's
        modification time, as Kafka's ``largestTimestamp`` does."""
        if self.max_timestamp is None:
            newest = -1
            for header in self.iter_headers(0):
                newest = max(newest, header.max_timestamp)
            self.max_timestamp = newest
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    def close(self) -> None:
        for attr in ("_log_fd", "_index_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                setattr(self, attr, -1)
                try:
                    os.close(fd)
                except OSError:
                    pass

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    @property
    def index_entries(self) -> int:
        return len(self._index_offsets)
