"""Kafka Uuids and the reserved directory ids of KIP-858 (decision D1).

Uuids are plain :class:`uuid.UUID` values (what kio reads and writes), typed with
``NewType`` where the role matters. The text form is Kafka's: url-safe base64 of the
16 big-endian bytes, without padding (22 characters).

kio reads an all-zero uuid as ``None`` and writes ``None`` as zero; UNASSIGNED *is* the
zero uuid here (D1), so values crossing kio go through :func:`from_wire`.
"""

from __future__ import annotations

import base64
import binascii
import random
import uuid
from typing import NewType

from kafka_common.errors import KafkaCommonError

DirectoryId = NewType("DirectoryId", uuid.UUID)
TopicId = NewType("TopicId", uuid.UUID)
BrokerId = NewType("BrokerId", int)

_SIGN = 1 << 63


def uuid_of(msb: int, lsb: int) -> uuid.UUID:
    """The uuid with these most/least significant 64-bit halves (either may be signed)."""
    return uuid.UUID(int=((msb & 0xFFFFFFFFFFFFFFFF) << 64) | (lsb & 0xFFFFFFFFFFFFFFFF))


def halves(value: uuid.UUID) -> tuple[int, int]:
    """(msb, lsb) as signed int64 values, Kafka's view of a Uuid."""
    msb, lsb = value.int >> 64, value.int & 0xFFFFFFFFFFFFFFFF
    return (msb - (1 << 64) if msb & _SIGN else msb, lsb - (1 << 64) if lsb & _SIGN else lsb)


# Decision D1: the KIP's values, not Kafka's.
UNASSIGNED = DirectoryId(uuid_of(0, 0))
LOST = DirectoryId(uuid_of(0, 1))
MIGRATING = DirectoryId(uuid_of(0, 2))
ZERO_UUID = uuid_of(0, 0)
# Kafka's fixed topic id of __cluster_metadata (a topic id, unrelated to D1).
METADATA_TOPIC_ID = TopicId(uuid_of(0, 1))
METADATA_TOPIC = "__cluster_metadata"


def is_reserved(value: uuid.UUID) -> bool:
    """Reserved directory ids: msb 0 and lsb (read as signed int64) below 100."""
    msb, lsb = halves(value)
    return msb == 0 and lsb < 100


def is_online_dir(dir_id: uuid.UUID, online_dirs: frozenset[uuid.UUID] | set[uuid.UUID]) -> bool:
    """Whether a replica assigned to ``dir_id`` counts as online on a broker whose online
    dirs are ``online_dirs``: UNASSIGNED and MIGRATING are online, LOST is not."""
    if dir_id == UNASSIGNED or dir_id == MIGRATING:
        return True
    if dir_id == LOST:
        return False
    return dir_id in online_dirs


def to_base64(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


class InvalidUuid(KafkaCommonError, ValueError):
    """Text that is not a Kafka Uuid."""


def from_base64(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise InvalidUuid(f"not a Kafka uuid (want 22 base64 characters, got {len(text)}): {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise InvalidUuid(f"not a Kafka uuid: {text!r}: {exc}") from None
    if len(raw) != 16 or to_base64(uuid.UUID(bytes=raw)) != text:
        raise InvalidUuid(f"not a Kafka uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def random_uuid(rng: random.Random) -> uuid.UUID:
    """A random Kafka Uuid that is neither reserved nor starts with '-' in text form
    (Kafka avoids those so that ids never look like command-line flags)."""
    while True:
        value = uuid.UUID(int=rng.getrandbits(128))
        if not is_reserved(value) and not to_base64(value).startswith("-"):
            return value


def random_directory_id(rng: random.Random) -> DirectoryId:
    return DirectoryId(random_uuid(rng))


def from_wire(value: uuid.UUID | None) -> uuid.UUID:
    """Normalise a uuid read by kio (zero reads as None)."""
    return ZERO_UUID if value is None else value
