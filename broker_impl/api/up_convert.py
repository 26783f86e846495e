"""Produce v0–2 carrying message format v0/v1 (kafka-python pinned to ``api_version=(0, 10, 0)``,
Sarama with an old ``Version``, librdkafka's ``broker.version.fallback``): the message set
up-converted to one magic-2 record batch, as Kafka 3.9's ``LogValidator`` does (a 3.x log
is always format v2).

Each message's CRC (CRC-32 over magic..end) is checked (CORRUPT_MESSAGE otherwise); a
compressed wrapper message is opened (gzip; snappy and lz4 with ``python-snappy`` / ``lz4``
— :mod:`broker_impl.api.down_convert`'s codecs, magic-0 lz4's Kafka-0.8 framing with its
wrong header checksum included) and its inner messages taken in order.
Records keep key, value and timestamp (magic 0 has none: -1, Kafka's NO_TIMESTAMP; a v1
wrapper with the log-append-time flag gives its own timestamp to every inner message); the
offsets are assigned by the log as for any batch. The batch is written uncompressed (Kafka
re-compresses with the source codec; the records are the same). No producer id: messages
v0/v1 are never idempotent.

Pure: bytes in, bytes out (:func:`up_convert` raises :class:`Invalid`).
"""

from __future__ import annotations

import struct
import zlib

import crc32c

from broker_impl.api.down_convert import LOG_APPEND_TIME_FLAG, NONE, Unconvertible, _decompress
from broker_impl.errors import BrokerError
from kafka_common.varint import encode_varint

_ENTRY = struct.Struct(">qi")          # offset, size
_MSG = struct.Struct(">Ibb")           # crc, magic, attributes
_V2_HEAD = struct.Struct(">qiibIhiqqqhii")
NO_TIMESTAMP = -1


class Invalid(BrokerError):
    """A message set that is not valid (``error``: the Kafka error code name)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


def is_legacy(records: bytes | None) -> bool:
    """Whether ``records`` starts with a message of format v0/v1 (magic at byte 16)."""
    return records is not None and len(records) >= 17 and records[16] in (0, 1)


def _bytes_at(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise Invalid("corrupt_message", "message cut short")
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise Invalid("corrupt_message", "message field longer than the message")
    return buf[pos:pos + n], pos + n


def _messages(buf: bytes, outer_ts: int | None = None):
    """(timestamp, key, value) of each message of a v0/v1 message set, wrappers opened."""
    pos = 0
    while pos < len(buf):
        if len(buf) - pos < _ENTRY.size + _MSG.size:
            raise Invalid("corrupt_message", f"truncated message at byte {pos}")
        _offset, size = _ENTRY.unpack_from(buf, pos)
        start, end = pos + _ENTRY.size, pos + _ENTRY.size + size
        if size < _MSG.size or end > len(buf):
            raise Invalid("corrupt_message", f"message size {size} at byte {pos} outside the set")
        msg = buf[start:end]                         # every read below stays inside it
        crc, magic, attributes = _MSG.unpack_from(msg, 0)
        if magic not in (0, 1):
            raise Invalid("corrupt_message", f"magic {magic} inside a v0/v1 message set")
        if zlib.crc32(msg[4:]) != crc:
            raise Invalid("corrupt_message", f"message CRC mismatch at byte {pos}")
        p = _MSG.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if len(msg) < p + 8:
                raise Invalid("corrupt_message", "message cut short")
            (timestamp,) = struct.unpack_from(">q", msg, p)
            p += 8
        key, p = _bytes_at(msg, p)
        value, p = _bytes_at(msg, p)
        codec = attributes & 0x07
        if codec != NONE:
            try:
                inner = _decompress(codec, value or b"")
            except Unconvertible as exc:
                raise Invalid("unsupported_compression_type", str(exc)) from None
            except Exception as exc:
                raise Invalid("corrupt_message", f"compressed message: {type(exc).__name__}: {exc}") from None
            wrapper_ts = timestamp if magic == 1 and attributes & LOG_APPEND_TIME_FLAG else None
            yield from _messages(inner, wrapper_ts)
        else:
            yield (outer_ts if outer_ts is not None else timestamp), key, value
        pos = end


def _record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    def field(x: bytes | None) -> bytes:
        return encode_varint(-1) if x is None else encode_varint(len(x)) + x
    body = b"\x00" + encode_varint(ts_delta) + encode_varint(offset_delta) + field(key) + field(value) \
        + encode_varint(0)
    return encode_varint(len(body)) + body


def up_convert(records: bytes) -> bytes:
    """One magic-2 batch (base offset 0, no producer) of the messages of ``records``."""
    msgs = list(_messages(bytes(records)))
    if not msgs:
        raise Invalid("corrupt_message", "no messages")
    base_ts = msgs[0][0]
    max_ts = max(ts for ts, _k, _v in msgs)
    body = b"".join(_record(i, ts - base_ts if ts >= 0 and base_ts >= 0 else 0, k, v)
                    for i, (ts, k, v) in enumerate(msgs))
    after_crc = struct.pack(">hiqqqhii", 0, len(msgs) - 1, base_ts, max_ts, -1, -1, -1, len(msgs)) + body
    crc = crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)      # partition leader epoch, magic, crc, the rest
    return struct.pack(">qiibI", 0, length, -1, 2, crc) + after_crc
