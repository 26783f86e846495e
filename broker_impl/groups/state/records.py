"""``__consumer_offsets``: Kafka's record formats, batches and the group → partition hash.

Each record of the topic is a key/value pair in an uncompressed v2 batch (producer id -1),
exactly as Kafka's group coordinator writes them (its ``OffsetCommitKey`` /
``OffsetCommitValue`` / ``GroupMetadataKey`` / ``GroupMetadataValue`` schemas; kio has none,
so they are written here by hand, classic non-flexible encoding, big-endian):

- key version 0/1 — an offset commit: ``int16 version, string group, string topic, int32 partition``;
  value ``int16 version=3, int64 offset, int32 leader_epoch, string metadata, int64 commit_timestamp``
  (versions 0–2 are read too: v1 adds an ``expire_timestamp`` after the commit time, v0/v1
  have no leader epoch);
- key version 2 — the group: ``int16 version, string group``; value ``int16 version=3, string
  protocol_type, int32 generation, nullable string protocol, nullable string leader,
  int64 current_state_timestamp, int32 count`` then per member ``string member_id,
  nullable string group_instance_id, string client_id, string client_host, int32
  rebalance_timeout, int32 session_timeout, bytes subscription, bytes assignment`` (v0–2
  read: v0 without rebalance timeout and timestamp, v1 adds the rebalance timeout, v2 the
  timestamp, v3 the instance id);
- a null value is a tombstone (an offset deleted, a group deleted).

Errors: :class:`RecordFormatError` for anything that does not parse (the loader stops
there: a log it cannot read is not guessed at).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import crc32c

from broker_impl.errors import BrokerError
from broker_impl.groups.state.group import Member, OffsetEntry
from kafka_common.varint import encode_varint, read_varint

OFFSETS_TOPIC = "__consumer_offsets"


class RecordFormatError(BrokerError, ValueError):
    """A ``__consumer_offsets`` batch or record that does not parse."""


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (Java's String.hashCode over
    UTF-16 code units; ``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = 0
    units = group_id.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    if h & 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# ---------------------------------------------------------------------- keys and values
@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[Member, ...]


Key = Union[OffsetKey, GroupKey]
Value = Union[OffsetEntry, GroupValue, None]


def _s(text: str | None) -> bytes:
    if text is None:
        return b"\xff\xff"
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return struct.pack(">h", 1) + _s(key.group_id) + _s(key.topic) + struct.pack(">i", key.partition)
    return struct.pack(">h", 2) + _s(key.group_id)


def encode_offset(entry: OffsetEntry) -> bytes:
    return (struct.pack(">hqi", 3, entry.offset, entry.leader_epoch) + _s(entry.metadata)
            + struct.pack(">q", entry.commit_timestamp_ms))


def encode_group(value: GroupValue) -> bytes:
    out = [struct.pack(">h", 3), _s(value.protocol_type), struct.pack(">i", value.generation),
           _s(value.protocol), _s(value.leader), struct.pack(">qi", value.current_state_timestamp_ms,
                                                               len(value.members))]
    for m in value.members:
        out += [_s(m.member_id), _s(m.instance_id), _s(m.client_id), _s(m.client_host),
                struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                _b(m.protocols[0][1] if m.protocols else b""), _b(m.assignment)]   # the chosen protocol's
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise RecordFormatError("record truncated")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def string(self, nullable: bool = False) -> str | None:
        n = self.take(">h")
        if n < 0:
            if nullable:
                return None
            raise RecordFormatError("null string in a non-nullable field")
        raw = self.data[self.pos:self.pos + n]
        if len(raw) != n:
            raise RecordFormatError("string truncated")
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"bad string: {exc}") from None

    def blob(self) -> bytes:
        n = self.take(">i")
        if n < 0:
            return b""
        raw = self.data[self.pos:self.pos + n]
        if len(raw) != n:
            raise RecordFormatError("bytes truncated")
        self.pos += n
        return bytes(raw)


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.take(">h")
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.take(">i"))
    if version == 2:
        return GroupKey(r.string() or "")
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset(data: bytes) -> OffsetEntry:
    r = _Reader(data)
    version = r.take(">h")
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown offset value version {version}")
    offset = r.take(">q")
    epoch = r.take(">i") if version >= 3 else -1
    metadata = r.string() or ""
    ts = r.take(">q")
    return OffsetEntry(offset, epoch, metadata, ts)


def decode_group(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.take(">h")
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown group value version {version}")
    protocol_type = r.string() or ""
    generation = r.take(">i")
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    ts = r.take(">q") if version >= 2 else -1
    members = []
    for _ in range(max(r.take(">i"), 0)):
        member_id = r.string() or ""
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance = r.take(">i") if version >= 1 else -1
        session = r.take(">i")
        subscription, assignment = r.blob(), r.blob()
        if rebalance < 0:
            rebalance = session
        members.append(Member(member_id, instance_id, client_id, client_host, rebalance, session, protocol_type,
                              ((protocol or "", subscription),), assignment=assignment))
    return GroupValue(protocol_type, generation, protocol, leader, ts, tuple(members))


def group_value(g: object) -> GroupValue:
    """The record value of a live group (``broker_impl.groups.state.group.Group``): each
    member keeps only the chosen protocol's metadata, as Kafka stores it."""
    members = tuple(
        Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
               m.session_timeout_ms, m.protocol_type, ((g.protocol or "", m.metadata(g.protocol)),),  # type: ignore[attr-defined]
               assignment=m.assignment)
        for m in g.members.values())  # type: ignore[attr-defined]
    return GroupValue(g.protocol_type or "", g.generation, g.protocol, g.leader,  # type: ignore[attr-defined]
                      g.state_timestamp_ms, members)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- batches
def _read_zz(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos)
    except ValueError as exc:
        raise RecordFormatError(str(exc)) from None


_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")


def encode_batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch of key/value records (base offset 0: the log assigns it)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    parts = []
    for i, (key, value) in enumerate(records):
        body = (b"\x00\x00" + encode_varint(i) + encode_varint(len(key)) + key
                + (encode_varint(-1) if value is None else encode_varint(len(value)) + value) + b"\x00")
        parts.append(encode_varint(len(body)) + body)
    tail = _TAIL.pack(0, len(records) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(records)) + b"".join(parts)
    return _HEAD.pack(0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def decode_batches(data: bytes) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record of the v2 batches in ``data`` (uncompressed;
    control batches skipped; CRC-32C checked)."""
    pos, total = 0, len(data)
    while pos + 61 <= total:
        base, length, _epoch, magic, crc = _HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if end > total:
            return  # a partial batch at the end of a read
        if magic != 2:
            raise RecordFormatError(f"batch at offset {base}: magic {magic}")
        if crc32c.crc32c(data[pos + 21:end]) != crc:
            raise RecordFormatError(f"batch at offset {base}: CRC mismatch")
        attributes, _lod, _t0, _t1, _pid, _pe, _bs, count = _TAIL.unpack_from(data, pos + 21)
        if attributes & 0x20:   # control batch (transaction markers)
            pos = end
            continue
        if attributes & 0x07:
            raise RecordFormatError(f"batch at offset {base}: compressed (codec {attributes & 7})")
        p = pos + 61
        for _ in range(count):
            _size, p = _read_zz(data, p)
            p += 1                                  # attributes
            _ts, p = _read_zz(data, p)
            delta, p = _read_zz(data, p)
            klen, p = _read_zz(data, p)
            key = data[p:p + klen] if klen >= 0 else b""
            p += max(klen, 0)
            vlen, p = _read_zz(data, p)
            value = data[p:p + vlen] if vlen >= 0 else None
            p += max(vlen, 0)
            headers, p = _read_zz(data, p)
            for _h in range(headers):
                hk, p = _read_zz(data, p)
                p += max(hk, 0)
                hv, p = _read_zz(data, p)
                p += max(hv, 0)
            yield base + delta, bytes(key), (bytes(value) if value is not None else None)
        pos = end


def decode_value(key: Key, value: bytes | None) -> Value:
    if value is None:
        return None
    return decode_offset(value) if isinstance(key, OffsetKey) else decode_group(value)
