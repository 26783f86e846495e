"""The valid half of the fuzz corpus: for every advertised (api key, version) of a listener, a
few requests built from kio's schema with random field values (small arrays, short timeouts so
that valid requests do not park connections), each with the positions of its length fields
(``wire_guard.length_fields``), for :func:`testkit.fuzz.make_case` to break; and
:func:`random_value`, an instance of any kio entity with random field values."""

from __future__ import annotations

import dataclasses
import datetime
import random
import uuid
from dataclasses import dataclass
from typing import Any

from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag, is_optional)
from kio.schema.errors import ErrorCode

from kafka_common import framing, wire, wire_guard

__all__ = ["Corpus", "Entry", "random_value"]

_INTS = {"int8": (-128, 127), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
         "int64": (-2**63, 2**63 - 1), "uint8": (0, 255), "uint16": (0, 2**16 - 1),
         "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}


def _records(rng: random.Random) -> bytes:
    from kafka_common.metadata.batches import encode_batch
    from kafka_common.metadata.records import NoOpRecord
    if rng.random() < 0.5:  # a real CRC'd v2 batch, so the produce path goes deep
        return encode_batch(rng.randint(0, 9), [NoOpRecord()], timestamp_ms=rng.randint(0, 2**40))
    return rng.randbytes(rng.randint(0, 80))


def _primitive(ktype: str, rng: random.Random) -> Any:
    if ktype in _INTS:
        lo, hi = _INTS[ktype]
        return rng.choice([0, 1, -1, rng.randint(0, 5), rng.randint(lo, hi)]) if lo < 0 else \
            rng.choice([0, 1, rng.randint(0, 5), rng.randint(lo, hi)])
    if ktype == "bool":
        return rng.random() < 0.5
    if ktype == "float64":
        return rng.uniform(-1e6, 1e6)
    if ktype == "uuid":
        return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.8 else None
    if ktype == "string":
        return rng.choice(["", "t", "fuzz", "__cluster_metadata", "PLAIN", "x" * rng.randint(0, 40)])
    if ktype == "bytes":
        return rng.randbytes(rng.randint(0, 24))
    if ktype == "records":
        return _records(rng)
    if ktype == "error_code":
        return ErrorCode.none
    if ktype in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=rng.randint(0, 50))  # short: valid requests must not park
    if ktype == "datetime_i64":
        return datetime.datetime.fromtimestamp(rng.randint(0, 2**31), datetime.timezone.utc)
    raise TypeError(ktype)


def random_value(cls: type, rng: random.Random, depth: int = 0) -> Any:
    """An instance of the kio entity ``cls`` with random field values."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        tagged = get_field_tag(f) is not None
        if tagged and rng.random() < 0.5 and (f.default is not dataclasses.MISSING
                                              or f.default_factory is not dataclasses.MISSING):  # type: ignore[misc]
            continue  # leave a tagged field at its default (not written)
        nullable = not tagged and is_optional(f)
        if nullable and not isinstance(kind, PrimitiveTupleField) and rng.random() < 0.15:
            values[f.name] = None
            continue
        n = rng.randint(0, 3 if depth < 2 else 1)
        if isinstance(kind, PrimitiveField):
            values[f.name] = _primitive(f.metadata["kafka_type"], rng)
        elif isinstance(kind, PrimitiveTupleField):
            ktype = f.metadata["kafka_type"]
            values[f.name] = tuple(_primitive(ktype, rng) for _ in range(n))
            if ktype == "uuid":
                values[f.name] = tuple(v or uuid.UUID(int=1) for v in values[f.name])
        elif isinstance(kind, EntityField):
            values[f.name] = random_value(kind.type_, rng, depth + 1)
        elif isinstance(kind, EntityTupleField):
            values[f.name] = tuple(random_value(kind.type_, rng, depth + 1) for _ in range(n))
    return cls(**values)


@dataclass
class Entry:
    api_key: int
    version: int
    cls: type
    payload: bytes  # one frame without its size prefix
    lengths: list[tuple[int, str, str]]  # (position, encoding, role) from wire_guard


@dataclass
class Corpus:
    entries: list[Entry]
    table: dict[int, tuple[int, int]]
    max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES

    @classmethod
    def build(cls, table: dict[int, tuple[int, int]], *, seed: int = 11, per_version: int = 3,
              extra_classes: dict[tuple[int, int], type] | None = None,
              max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES) -> "Corpus":
        rng = random.Random(seed)
        entries = []
        for api_key, (lo, hi) in sorted(table.items()):
            for version in range(lo, hi + 1):
                req_cls = (extra_classes or {}).get((api_key, version))
                if req_cls is None:
                    try:
                        req_cls = wire.request_class(api_key, version)
                    except Exception:
                        continue
                made = 0
                for _attempt in range(per_version * 20):
                    if made == per_version:
                        break
                    try:
                        payload = wire.encode_request(random_value(req_cls, rng), rng.randint(1, 2**31 - 1),
                                                      rng.choice([None, "fuzz"]))
                    except Exception:  # a random value kio cannot encode: draw again
                        continue
                    lengths = wire_guard.length_fields(payload, (req_cls.__header_schema__, req_cls))
                    entries.append(Entry(api_key, version, req_cls, payload, lengths))
                    made += 1
        return cls(entries, dict(table), max_frame_bytes)
