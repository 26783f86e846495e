"""Kafka's variable-length integers: unsigned (``uvarint``: tagged fields, compact lengths,
metadata record frames) and signed zigzag (``varint``: v2 record lengths and deltas). The one
encoder of each; readers that must bound what they read (``wire_guard``, record decoding)
keep their own checks and use :func:`read_uvarint` only where any bytes are acceptable."""

from __future__ import annotations

__all__ = ["encode_uvarint", "encode_varint", "read_uvarint", "read_varint"]


def encode_uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Signed, zigzag-encoded (64-bit)."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it); a varint cut short by the end of ``buf`` reads as what is
    there (for tools that take any bytes, not for decoding input)."""
    value = shift = 0
    while pos < len(buf):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    return value, pos


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A signed zigzag varint and the position after it; ``ValueError`` when ``buf`` ends
    inside it or it is longer than 64 bits (for decoding input)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint truncated")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
