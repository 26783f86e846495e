"""Kafka's small text files in a log dir / partition dir, parsed and rendered; atomic writes.

* ``replication-offset-checkpoint`` (high watermarks) and ``recovery-point-offset-checkpoint``
  in each log dir — Kafka's ``OffsetCheckpointFile`` format::

      0                 version
      2                 entry count
      orders 0 1234     topic partition offset
      orders 1 99

* ``leader-epoch-checkpoint`` in each partition dir — same framing, ``epoch start_offset``
  lines.
* ``partition.metadata`` in each partition dir::

      version: 0
      topic_id: <22-char base64 uuid>

Writes go through :func:`kafka_runtime.fsutil.atomic_write` (temp + fsync + rename + dir
fsync). Readers raise :class:`CheckpointFormatError` naming file and line; OSErrors pass
through untouched so the caller routes them to the failure channel.
"""

from __future__ import annotations

import uuid

from broker_impl.errors import BrokerError
from kafka_common import ids
from kafka_runtime import fsutil

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
VERSION = 0


class CheckpointFormatError(BrokerError, ValueError):
    """A checkpoint file whose content is not Kafka's format."""


def _parse_framed(path: str, text: str, fields: int) -> list[list[str]]:
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointFormatError(f"{path}: want version and count lines, got {len(lines)} lines")
    if lines[0].strip() != str(VERSION):
        raise CheckpointFormatError(f"{path}: line 1: unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointFormatError(f"{path}: line 2: count {lines[1]!r} is not an integer") from None
    body = [l for l in lines[2:] if l.strip()]
    if count != len(body):
        raise CheckpointFormatError(f"{path}: count {count} but {len(body)} entries")
    out = []
    for i, line in enumerate(body, 3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointFormatError(f"{path}: line {i}: want {fields} fields, got {line!r}")
        out.append(parts)
    return out


def _render_framed(rows: list[str]) -> bytes:
    return ("\n".join([str(VERSION), str(len(rows)), *rows]) + "\n").encode()


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """(topic, partition) → offset; a missing file is an empty map."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    out: dict[tuple[str, int], int] = {}
    for i, (topic, part, off) in enumerate(_parse_framed(path, text, 3), 3):
        try:
            out[(topic, int(part))] = int(off)
        except ValueError:
            raise CheckpointFormatError(f"{path}: entry {i}: partition/offset not integers") from None
    return out


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    rows = [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    fsutil.atomic_write(path, _render_framed(rows))


def read_epochs(path: str) -> list[tuple[int, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    try:
        return [(int(e), int(o)) for e, o in _parse_framed(path, text, 2)]
    except ValueError:
        raise CheckpointFormatError(f"{path}: epoch/offset not integers") from None


def write_epochs(path: str, entries: list[tuple[int, int]]) -> None:
    fsutil.atomic_write(path, _render_framed([f"{e} {o}" for e, o in entries]))


def read_partition_metadata(path: str) -> uuid.UUID | None:
    """The topic id in ``partition.metadata``; None if the file is missing."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0":
        raise CheckpointFormatError(f"{path}: unsupported version {fields.get('version')!r}")
    if "topic_id" not in fields:
        raise CheckpointFormatError(f"{path}: missing topic_id")
    try:
        return ids.from_base64(fields["topic_id"])
    except ids.InvalidUuid as exc:
        raise CheckpointFormatError(f"{path}: topic_id: {exc}") from None


def write_partition_metadata(path: str, topic_id: uuid.UUID) -> None:
    fsutil.atomic_write(path, f"version: 0\ntopic_id: {ids.to_base64(topic_id)}\n".encode())
