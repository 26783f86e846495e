"""Fetch v0–3: the log's v2 record batches down-converted to the message formats those
versions carry (magic 0 for Fetch v0–1, magic 1 for v2–3), as Kafka 3.9's
``RecordsUtil.downConvert`` does for old consumers (Sarama/Burrow with an old
``kafka-version``, kafka-python pinned to ``api_version=(0, 10, 0)``).

Per batch: control batches are dropped; records below the fetch offset are dropped (the
first batch may start before it); each record becomes one message with its absolute
offset, key and value — headers dropped (v0/v1 have none, as Kafka's conversion ignores
them); magic 1 keeps the timestamp (the record's create time, or the batch's max timestamp
with the log-append-time flag when the batch says so). Compressed batches are decompressed
and the messages written uncompressed (Kafka writes them in a compressed wrapper of the same
codec; a consumer reads the same records either way). gzip is the standard library;
snappy (xerial framing), lz4 (frame) need ``python-snappy`` / ``lz4`` where the broker runs —
without them, and always for zstd (no old client can read it; Kafka's rule for Fetch < 10),
the partition is answered UNSUPPORTED_COMPRESSION_TYPE.

Pure: bytes in, bytes out (:func:`down_convert` raises :class:`Unconvertible`).
"""

from __future__ import annotations

import gzip
import struct
import zlib

from broker_impl.errors import BrokerError
from kafka_common import batch_header as bh
from kafka_common.varint import read_varint

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
LOG_APPEND_TIME_FLAG = 0x08      # v2 batch attributes, and magic-1 message attributes
_MSG_HEAD = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class Unconvertible(BrokerError):
    """A batch the broker cannot down-convert (its codec): UNSUPPORTED_COMPRESSION_TYPE."""


def magic_for(fetch_version: int) -> int:
    return 0 if fetch_version <= 1 else 1


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return gzip.decompress(data)
    if codec == SNAPPY:
        try:
            import snappy  # python-snappy
        except ImportError:
            raise Unconvertible("snappy batch: python-snappy is not installed on this broker") from None
        if not data.startswith(_XERIAL_MAGIC):
            return snappy.decompress(data)
        out, pos = [], 16                           # magic + version + compatible version
        while pos < len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            out.append(snappy.decompress(data[pos + 4:pos + 4 + n]))
            pos += 4 + n
        return b"".join(out)
    if codec == LZ4:
        try:
            import lz4.frame
        except ImportError:
            raise Unconvertible("lz4 batch: lz4 is not installed on this broker") from None
        try:
            return lz4.frame.decompress(data)
        except RuntimeError:   # Kafka 0.8's framing (magic-0 messages): a wrong header checksum
            return _lz4_frame_unchecked(data)
    raise Unconvertible(f"compression codec {codec} cannot be read by a Fetch v0-3 client")


def _lz4_frame_unchecked(data: bytes) -> bytes:
    """An LZ4 frame read without its header checksum — Kafka 0.8's producers (and librdkafka
    writing magic-0 messages) computed it over the magic number too, and Kafka's reader
    ignores it for those messages; the blocks are read as lz4 frames define them."""
    import lz4.block
    if data[:4] != b"\x04\x22\x4d\x18" or len(data) < 7:
        raise ValueError("not an lz4 frame")
    flg, bd = data[4], data[5]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1   # content size, dict id, HC
    block_max = 1 << (8 + 2 * ((bd >> 4) & 0x07))                       # 4: 64 KiB … 7: 4 MiB
    out = []
    while True:
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            return b"".join(out)
        n = size & 0x7FFFFFFF
        block = data[pos:pos + n]
        if len(block) != n:
            raise ValueError("lz4 block cut short")
        if size & 0x80000000:
            out.append(block)
        else:   # linked blocks (the default) may refer to the 64 KiB before them
            history = b"".join(out)[-65536:] if out and not flg & 0x20 else b""
            out.append(lz4.block.decompress(block, uncompressed_size=block_max, dict=history))
        pos += n + (4 if flg & 0x10 else 0)                                 # block checksum


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos:pos + n], pos + n


def _records(batch: bytes, h: bh.BatchHeader):
    """(offset, timestamp, key, value) of each record of one v2 batch."""
    body = batch[bh.HEADER_BYTES:]
    codec = h.attributes & bh.COMPRESSION_MASK
    if codec != NONE:
        body = _decompress(codec, body)
    pos = 0
    for _ in range(h.record_count):
        length, pos = read_varint(body, pos)
        end = pos + length
        pos += 1                                     # record attributes (unused)
        ts_delta, pos = read_varint(body, pos)
        offset_delta, pos = read_varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        yield h.base_offset + offset_delta, h.base_timestamp + ts_delta, key, value
        pos = end                                    # headers skipped


def _message(magic: int, offset: int, timestamp: int, log_append: bool, key: bytes | None,
             value: bytes | None) -> bytes:
    def b(x: bytes | None) -> bytes:
        return struct.pack(">i", -1) if x is None else struct.pack(">i", len(x)) + x
    attributes = LOG_APPEND_TIME_FLAG if magic == 1 and log_append else 0
    rest = (struct.pack(">q", timestamp) if magic == 1 else b"") + b(key) + b(value)
    crc = zlib.crc32(struct.pack(">bb", magic, attributes) + rest)
    size = 4 + 2 + len(rest)
    return _MSG_HEAD.pack(offset, size, crc, magic, attributes) + rest


def down_convert(records: bytes, magic: int, fetch_offset: int) -> bytes:
    """A message set of ``magic`` holding the records of ``records`` (whole v2 batches) at
    or after ``fetch_offset``."""
    out = []
    for pos, h in bh.iter_batches(records, check_crc=False):
        if h.is_control:
            continue
        log_append = bool(h.attributes & LOG_APPEND_TIME_FLAG)
        batch = bytes(records[pos:pos + h.size_bytes])
        for offset, ts, key, value in _records(batch, h):
            if offset >= fetch_offset:
                out.append(_message(magic, offset, h.max_timestamp if log_append else ts, log_append, key, value))
    return b"".join(out)
