"""The metadata log's recovery at open: every segment walked, each batch checked (header,
CRC, offset continuity, records decode), the log cut at the first bad byte and later
segments removed, what was done reported in :class:`Recovery`; and :func:`scan_batches`,
the same walk read-only, for checkers that compare controllers' logs.

:func:`recover` works on the log it opens through the small :class:`RecoveringLog`
protocol (:class:`~controller_impl.log.metadata_log.MetadataLog` is the one
implementation): its offsets, its segment table and its batch index."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kafka_common.batch_header import CorruptBatch, read_header, crc_ok
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata.records import RecordDecodeError
from kafka_runtime.fsutil import fsync_dir

from controller_impl.log.segments import DIR_NAME, SUFFIX, Segment


@dataclass
class Recovery:
    segments: int = 0
    batches: int = 0
    records: int = 0
    truncated_bytes: int = 0
    truncated_at: tuple[str, int] | None = None  # (segment file, byte position)
    reason: str = ""
    removed_segments: list[str] = field(default_factory=list)


class RecoveringLog(Protocol):
    """The log being opened, as :func:`recover` sees it."""

    directory: str
    start_offset: int
    end_offset: int
    flushed_end: int
    recovery: Recovery

    @property
    def segment_count(self) -> int: ...

    def add_segment(self, seg: Segment) -> None:
        """A recovered segment, after the others."""
        ...

    def index_batch(self, base: int, last: int, epoch: int, seg_index: int, pos: int, size: int) -> None:
        """A good batch: offsets ``base``..``last`` at ``pos`` of segment ``seg_index``."""
        ...

    def roll(self, base_offset: int) -> None:
        """A new, empty segment starting at ``base_offset``."""
        ...


def recover(log: RecoveringLog, on_record: Callable[[Any, int], None] | None) -> None:
    """Open-time recovery of ``log`` (module docstring); each good record is passed to
    ``on_record(record, offset)`` when given."""
    directory = log.directory
    names = sorted(n for n in os.listdir(directory)
                   if n.endswith(SUFFIX) and n[:-len(SUFFIX)].isdigit())
    for n in os.listdir(directory):  # leftovers of an interrupted roll/truncate
        if n.endswith(".tmp"):
            os.unlink(os.path.join(directory, n))
    rec = log.recovery
    stop = False
    for name in names:
        path = os.path.join(directory, name)
        if stop:
            os.unlink(path)
            rec.removed_segments.append(name)
            continue
        base = int(name[:-len(SUFFIX)])
        if not log.segment_count:  # the log may start after a snapshot
            log.start_offset = log.end_offset = base
        if base != log.end_offset:
            stop = True
            rec.reason = rec.reason or f"{name}: starts at {base}, expected {log.end_offset}"
            os.unlink(path)
            rec.removed_segments.append(name)
            continue
        with open(path, "rb") as f:
            data = f.read()
        good, reason = _scan(log, data, on_record)
        fd = os.open(path, os.O_RDWR)
        seg = Segment(base, path, fd, good)
        log.add_segment(seg)
        rec.segments += 1
        if good < len(data):
            os.ftruncate(fd, good)
            os.fsync(fd)
            rec.truncated_bytes += len(data) - good
            rec.truncated_at = (name, good)
            rec.reason = reason
            stop = True
    if stop and rec.removed_segments:
        fsync_dir(directory)
    if not log.segment_count:
        log.roll(log.start_offset)
    log.flushed_end = log.end_offset


def _scan(log: RecoveringLog, data: bytes, on_record: Callable[[Any, int], None] | None) -> tuple[int, str]:
    """Index the good batches of one segment; return (good bytes, reason of the cut)."""
    pos = 0
    seg_index = log.segment_count
    view = memoryview(data)
    while pos < len(data):
        try:
            header = read_header(data, pos)
            if pos + header.size_bytes > len(data):
                return pos, f"torn batch at byte {pos}: needs {header.size_bytes}, file has {len(data) - pos}"
            if not crc_ok(data, pos, header):
                return pos, f"CRC mismatch in batch at byte {pos}"
            if header.base_offset != log.end_offset:
                return pos, f"batch at byte {pos} has offset {header.base_offset}, expected {log.end_offset}"
            if on_record is not None:
                [(_, records)] = decode_batches(view[pos:pos + header.size_bytes])
                count = len(records)
            else:
                records, count = (), header.record_count
        except (CorruptBatch, RecordDecodeError, ValueError) as exc:
            return pos, f"bad batch at byte {pos}: {exc}"
        if count != header.last_offset_delta + 1:
            return pos, f"batch at byte {pos}: {count} records for {header.last_offset_delta + 1} offsets"
        if on_record is not None:
            for i, record in enumerate(records):
                on_record(record, header.base_offset + i)
        log.index_batch(header.base_offset, header.last_offset, header.partition_leader_epoch,
                        seg_index, pos, header.size_bytes)
        log.recovery.batches += 1
        log.recovery.records += count
        pos += header.size_bytes
    return pos, ""


def scan_batches(metadata_log_dir: str) -> list[tuple[int, int, int, int]]:
    """Read-only: (base offset, last offset, leader epoch, CRC) of every good batch of a
    metadata log, in order, stopping at the first bad one (what :meth:`MetadataLog.open`
    would keep) — for checkers that compare controllers' logs after a run."""
    directory = os.path.join(metadata_log_dir, DIR_NAME)
    out: list[tuple[int, int, int, int]] = []
    names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX) and n[:-len(SUFFIX)].isdigit())
    expected = None
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            try:
                header = read_header(data, pos)
            except CorruptBatch:
                return out
            if pos + header.size_bytes > len(data) or not crc_ok(data, pos, header) \
                    or (expected is not None and header.base_offset != expected):
                return out
            out.append((header.base_offset, header.last_offset, header.partition_leader_epoch, header.crc))
            expected = header.last_offset + 1
            pos += header.size_bytes
    return out
