"""Kafka record batches (magic 2) kept opaque: header fields, CRC-32C, offset rewrite.

The broker never decodes records on the hot path; it reads the 61-byte header, checks the
CRC (over bytes 21..end), and rewrites ``baseOffset`` / ``partitionLeaderEpoch`` in place
(both outside the CRC). For decoding whole batches (the metadata log) use
``kafka_common.metadata.batches`` which goes through kio's records module.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import crc32c

from kafka_common.errors import KafkaCommonError

HEADER_BYTES = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
NO_PRODUCER_ID = -1
COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class CorruptBatch(KafkaCommonError, ValueError):
    """Bytes that are not a valid v2 record batch (bad magic, length or CRC)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole batch on the wire / on disk."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset_delta


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; raises :class:`CorruptBatch` if it cannot be one."""
    if len(buf) - pos < HEADER_BYTES:
        raise CorruptBatch(f"truncated batch header: {len(buf) - pos} bytes at {pos}")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptBatch(f"unsupported magic {header.magic} at {pos}")
    if header.batch_length < HEADER_BYTES - LOG_OVERHEAD:
        raise CorruptBatch(f"batch length {header.batch_length} too small at {pos}")
    return header


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    end = pos + header.size_bytes
    if end > len(buf):
        return False
    return crc32c.crc32c(memoryview(buf)[pos + 21 : end]) == header.crc


def iter_batches(buf: bytes | bytearray | memoryview, *, check_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch; raise CorruptBatch on the first bad one.

    A trailing partial batch also raises: callers that recover a log catch it and truncate
    at that position."""
    pos = 0
    total = len(buf)
    while pos < total:
        header = read_header(buf, pos)
        if pos + header.size_bytes > total:
            raise CorruptBatch(f"truncated batch at {pos}: need {header.size_bytes} bytes, have {total - pos}")
        if check_crc and not crc_ok(buf, pos, header):
            raise CorruptBatch(f"CRC mismatch in batch at {pos}")
        yield pos, header
        pos += header.size_bytes


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)
