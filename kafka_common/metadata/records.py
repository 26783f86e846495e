"""KRaft metadata records (Kafka's ``metadata/*.json`` schemas) as kio-style dataclasses.

One frozen, slotted, kw-only dataclass per record, at the version we write
(RegisterBrokerRecord 3, PartitionRecord 1, PartitionChangeRecord 1,
BrokerRegistrationChangeRecord 2, every other record 0 — ConfigRecord included). Field metadata follows kio's
generated schema classes (``kafka_type``, ``tag``) so ``kafka_common.wire`` encodes and
decodes them with kio's serializers.

A framed record is::

    uvarint frame_version (=1) | uvarint record_type | uvarint version | message

:func:`decode_record` accepts exactly the versions we write and raises
:class:`RecordDecodeError` — never anything else — for an unknown frame version, record
type or version, garbage, or trailing bytes. Uuids are normalised on the way in: kio reads
the zero uuid (UNASSIGNED, D1) as ``None``; records hold ``uuid.UUID`` values only.

No ``from __future__ import annotations`` here: kio introspects the real field types.
"""

import dataclasses
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from kio.static.constants import EntityType

from kafka_common import wire
from kafka_common.errors import KafkaCommonError
from kafka_common.ids import from_wire
from kafka_common.metadata import fast_records
from kafka_common.varint import encode_uvarint

FRAME_VERSION = 1

_I8 = {"kafka_type": "int8"}
_I16 = {"kafka_type": "int16"}
_I32 = {"kafka_type": "int32"}
_I64 = {"kafka_type": "int64"}
_U16 = {"kafka_type": "uint16"}
_BOOL = {"kafka_type": "bool"}
_STR = {"kafka_type": "string"}
_UUID = {"kafka_type": "uuid"}


def _tag(kafka_type: str, tag: int) -> dict[str, Any]:
    return {"kafka_type": kafka_type, "tag": tag}


class RecordDecodeError(KafkaCommonError, ValueError):
    """Bytes that are not a framed metadata record we understand."""


class RecordEncodeError(KafkaCommonError, ValueError):
    """A record value that cannot be written (wrong field type or out of range)."""


# --- nested entities of RegisterBrokerRecord -------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[int] = 3
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 0
    name: str = field(metadata=_STR)
    host: str = field(metadata=_STR)
    port: int = field(metadata=_U16)
    security_protocol: int = field(metadata=_I16)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFeature:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[int] = 3
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 0
    name: str = field(metadata=_STR)
    min_supported_version: int = field(metadata=_I16)
    max_supported_version: int = field(metadata=_I16)


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 3
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 0
    broker_id: int = field(metadata=_I32)
    is_migrating_zk_broker: bool = field(metadata=_BOOL, default=False)
    incarnation_id: uuid.UUID = field(metadata=_UUID)
    broker_epoch: int = field(metadata=_I64)
    end_points: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = field(metadata=_STR, default=None)
    fenced: bool = field(metadata=_BOOL, default=True)
    in_controlled_shutdown: bool = field(metadata=_BOOL, default=False)
    log_dirs: tuple[uuid.UUID, ...] = field(metadata=_tag("uuid", 0), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 1
    broker_id: int = field(metadata=_I32)
    broker_epoch: int = field(metadata=_I64)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 2
    name: str = field(metadata=_STR)
    topic_id: uuid.UUID = field(metadata=_UUID)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 1
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 3
    partition_id: int = field(metadata=_I32, default=-1)
    topic_id: uuid.UUID = field(metadata=_UUID)
    replicas: tuple[int, ...] = field(metadata=_I32)
    isr: tuple[int, ...] = field(metadata=_I32)
    removing_replicas: tuple[int, ...] = field(metadata=_I32, default=())
    adding_replicas: tuple[int, ...] = field(metadata=_I32, default=())
    leader: int = field(metadata=_I32, default=-1)
    leader_recovery_state: int = field(metadata=_tag("int8", 0), default=0)
    leader_epoch: int = field(metadata=_I32, default=-1)
    partition_epoch: int = field(metadata=_I32, default=-1)
    directories: tuple[uuid.UUID, ...] = field(metadata=_UUID, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """A dynamic config of a resource (topic 2, broker 4); ``value`` None deletes it."""

    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 4
    resource_type: int = field(metadata=_I8)
    resource_name: str = field(metadata=_STR)
    name: str = field(metadata=_STR)
    value: str | None = field(metadata=_STR, default=None)


# PartitionChangeRecord.leader: -2 = no change (Kafka's NO_LEADER_CHANGE).
NO_LEADER_CHANGE = -2
# PartitionChangeRecord.leader_recovery_state: -1 = no change.
NO_LRS_CHANGE = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """``None`` in a nullable field means "unchanged"."""

    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 1
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 5
    partition_id: int = field(metadata=_I32, default=-1)
    topic_id: uuid.UUID = field(metadata=_UUID)
    isr: tuple[int, ...] | None = field(metadata=_tag("int32", 0), default=None)
    leader: int = field(metadata=_tag("int32", 1), default=NO_LEADER_CHANGE)
    replicas: tuple[int, ...] | None = field(metadata=_tag("int32", 2), default=None)
    removing_replicas: tuple[int, ...] | None = field(metadata=_tag("int32", 3), default=None)
    adding_replicas: tuple[int, ...] | None = field(metadata=_tag("int32", 4), default=None)
    leader_recovery_state: int = field(metadata=_tag("int8", 5), default=NO_LRS_CHANGE)
    directories: tuple[uuid.UUID, ...] | None = field(metadata=_tag("uuid", 8), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 7
    id: int = field(metadata=_I32)
    epoch: int = field(metadata=_I64)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 8
    id: int = field(metadata=_I32)
    epoch: int = field(metadata=_I64)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 9
    topic_id: uuid.UUID = field(metadata=_UUID)


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 12
    name: str = field(metadata=_STR)
    feature_level: int = field(metadata=_I16)


# BrokerRegistrationChangeRecord.fenced (int8): -1 unfence, 0 no change, 1 fence.
FENCE_UNFENCE = -1
FENCE_NO_CHANGE = 0
FENCE_FENCE = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """``fenced``: -1 unfence / 0 no change / 1 fence. ``in_controlled_shutdown``: 0 no
    change / 1 entering. ``log_dirs`` empty = no change (Kafka's replay rule)."""

    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 2
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 17
    broker_id: int = field(metadata=_I32)
    broker_epoch: int = field(metadata=_I64)
    fenced: int = field(metadata=_tag("int8", 0), default=FENCE_NO_CHANGE)
    in_controlled_shutdown: int = field(metadata=_tag("int8", 1), default=0)
    log_dirs: tuple[uuid.UUID, ...] = field(metadata=_tag("uuid", 2), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[int] = 20


MetadataRecord = Union[
    RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
    PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
    FeatureLevelRecord, BrokerRegistrationChangeRecord, NoOpRecord,
]

RECORD_CLASSES: dict[int, type] = {
    cls.__api_key__: cls
    for cls in (RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
                PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
                FeatureLevelRecord, BrokerRegistrationChangeRecord, NoOpRecord)
}


# --- framing ---------------------------------------------------------------------------


def _read_uvarint(data: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise RecordDecodeError(f"truncated {what} varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise RecordDecodeError(f"{what} varint longer than 5 bytes")


_HEADS: dict[type, bytes] = {}  # record class -> frame version | type | version


def encode_record(record: Any) -> bytes:
    """The framed bytes of ``record`` (one of :data:`RECORD_CLASSES`)."""
    cls = type(record)
    head = _HEADS.get(cls)
    if head is None:
        if RECORD_CLASSES.get(getattr(cls, "__api_key__", -1)) is not cls:
            raise RecordEncodeError(f"not a metadata record: {cls.__name__}")
        head = _HEADS[cls] = encode_uvarint(FRAME_VERSION) + encode_uvarint(cls.__api_key__) + encode_uvarint(cls.__version__)
    if cls is PartitionChangeRecord:
        try:
            return head + fast_records.encode_partition_change(record)
        except (struct.error, AttributeError, TypeError):
            pass  # a malformed value: let kio say what is wrong
    try:
        return head + wire.encode(record)
    except Exception as exc:  # kio raises struct.error / TypeError / AttributeError
        raise RecordEncodeError(f"cannot encode {cls.__name__}: {type(exc).__name__}: {exc}") from None


def decode_record(data: bytes | bytearray | memoryview) -> Any:
    """Decode one framed record; anything unexpected raises :class:`RecordDecodeError`."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    frame_version, pos = _read_uvarint(data, 0, "frame version")
    if frame_version != FRAME_VERSION:
        raise RecordDecodeError(f"unknown metadata record frame version {frame_version}")
    record_type, pos = _read_uvarint(data, pos, "record type")
    cls = RECORD_CLASSES.get(record_type)
    if cls is None:
        raise RecordDecodeError(f"unknown metadata record type {record_type}")
    version, pos = _read_uvarint(data, pos, "record version")
    if version != cls.__version__:
        raise RecordDecodeError(
            f"unsupported {cls.__name__} version {version} (this reader knows {cls.__version__})")
    if cls is PartitionChangeRecord:
        try:
            return fast_records.decode_partition_change(cls, data, pos)
        except (fast_records.Unsupported, struct.error, ValueError):
            pass  # kio decides (and names the error)
    try:
        value, used = wire.decode(cls, data, pos)
    except wire.DecodeError as exc:
        raise RecordDecodeError(str(exc)) from None
    except Exception as exc:  # defensive: never let another type escape
        raise RecordDecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from None
    if pos + used != len(data):
        raise RecordDecodeError(
            f"{cls.__name__}: {len(data) - pos - used} trailing bytes after the message")
    return _normalise(value)


_UUID_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _uuid_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, is_array) of every uuid field of ``cls``."""
    found = _UUID_FIELDS.get(cls)
    if found is None:
        found = tuple((f.name, "tuple" in str(f.type)) for f in dataclasses.fields(cls)
                      if f.metadata.get("kafka_type") == "uuid")
        _UUID_FIELDS[cls] = found
    return found


def _normalise(value: Any) -> Any:
    """Replace kio's ``None`` for the zero uuid by the zero uuid itself."""
    changes: dict[str, Any] = {}
    for name, is_array in _uuid_fields(type(value)):
        current = getattr(value, name)
        if is_array:
            if current is not None and any(v is None for v in current):
                changes[name] = tuple(from_wire(v) for v in current)
        elif current is None:
            changes[name] = from_wire(None)
    return dataclasses.replace(value, **changes) if changes else value
