"""The guard in front of kio's native reader: walk the bytes against kio's schema metadata
before kio reads them.

Why: kio 0.6.5's native reader reserves memory for an array's claimed length before it
reads one element, so a 30-byte request claiming 2^32-2 array entries aborts the whole
process (SIGABRT from the Rust allocator; no ``except`` can catch it). kio stays the codec;
this module only decides whether kio may look at a frame.

:func:`check` walks an entity (and, for requests, the header first) with the metadata kio
itself reads — ``kafka_type`` and ``tag`` of each dataclass field, ``__flexible__``, the field
classes of ``kio.serial._introspect`` — and bounds every length by the bytes still left
BEFORE kio allocates anything:

* array counts, classic (int32) and compact (unsigned varint, N+1): a count larger than the
  bytes left (every element takes at least one byte; fixed-size elements their size) is
  refused, and so is a frame whose arrays hold more than ``max_items`` elements in all (kio
  builds one Python object per element: about 60 bytes each, so 1M elements ≈ 60 MB;
  tagged fields count too, as each is a step of the walk);
* strings (int16 / compact), bytes and records (int32 / compact), nullable-struct markers,
  tagged-field counts and sizes, varints (at most 5 bytes, below 2^32).

It is strict wherever kio could read the bytes differently from the walk — a null where the
field is not nullable, a nullable-struct marker other than -1/1, a known tagged field whose
value does not fill its declared size exactly — so that a frame it lets through is read by
kio with exactly the structure it checked.

Unknown tagged fields must be ignored (KIP-482) but kio raises on them. The walk cuts them
out: :func:`check` returns the bytes unchanged (no copy) when there were none, else a copy
without them (the tagged-field counts and, for known tagged fields that contained some, the
sizes rewritten).
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import lru_cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag,
                                    is_optional)

from kafka_common.errors import KafkaCommonError
from kafka_common.varint import encode_uvarint

DEFAULT_MAX_ITEMS = 1_000_000

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
# ops of a field plan
_OP_FIXED, _OP_VAR, _OP_ENTITY, _OP_ARRAY_FIXED, _OP_ARRAY_VAR, _OP_ARRAY_ENTITY = range(6)
# length encodings of variable-size values
_LEN16, _LEN32, _COMPACT = 0, 1, 2

_ENC_NAMES = {_LEN16: "i16", _LEN32: "i32", _COMPACT: "uvarint"}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class FrameError(KafkaCommonError, ValueError):
    """Bytes that kio must not be given (the message says which field and why)."""


class _Plan:
    """What to walk for one entity class: untagged fields in order, tagged fields by tag."""

    __slots__ = ("name", "flexible", "fields", "tagged", "fixed_size")

    def __init__(self, name: str, flexible: bool) -> None:
        self.name = name
        self.flexible = flexible
        # consecutive fixed-size fields are merged into one op (the walk only needs their sum)
        self.fields: tuple[tuple[int, Any, bool, str], ...] = ()
        self.tagged: dict[int, tuple[int, Any, bool, str]] = {}
        # the encoded size when it never varies (non-flexible, fixed-size fields only)
        self.fixed_size: int | None = None


def _array_nullable(field: Any) -> bool:
    """Whether the array itself may be null (``tuple[...] | None``; kio's ``is_optional``
    looks at the element type for a plain tuple annotation)."""
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


@lru_cache(maxsize=None)
def plan_for(cls: type) -> _Plan:
    plan = _Plan(cls.__name__, bool(cls.__flexible__))
    header = cls.__name__ == "RequestHeader"
    flexible = plan.flexible
    untagged = []
    for f in fields(cls):
        tag = get_field_tag(f)
        kind = classify_field(f)
        if header and f.name == "client_id":  # always a classic nullable string (kio does the same)
            op: tuple[int, Any, bool, str] = (_OP_VAR, _LEN16, True, f.name)
        elif isinstance(kind, PrimitiveField):
            ktype = f.metadata["kafka_type"]
            # kio reads tagged fields as non-nullable (their absence is their null)
            nullable = tag is None and is_optional(f)
            if ktype in _FIXED:
                op = (_OP_FIXED, _FIXED[ktype], nullable, f.name)
            else:
                op = (_OP_VAR, _var_encoding(ktype, flexible, f.name), nullable, f.name)
        elif isinstance(kind, PrimitiveTupleField):
            ktype = f.metadata["kafka_type"]
            nullable = _array_nullable(f)
            if ktype in _FIXED:
                op = (_OP_ARRAY_FIXED, _FIXED[ktype], nullable, f.name)
            else:
                op = (_OP_ARRAY_VAR, _var_encoding(ktype, flexible, f.name), nullable, f.name)
        elif isinstance(kind, EntityField):
            op = (_OP_ENTITY, plan_for(kind.type_), tag is None and is_optional(f), f.name)
        elif isinstance(kind, EntityTupleField):
            op = (_OP_ARRAY_ENTITY, plan_for(kind.type_), _array_nullable(f), f.name)
        else:  # pragma: no cover - kio has no other field class
            raise TypeError(f"{cls.__name__}.{f.name}: unknown field class {kind!r}")
        if tag is None:
            untagged.append(op)
        else:
            plan.tagged[int(tag)] = op
    merged: list[tuple[int, Any, bool, str]] = []
    for op in untagged:
        if op[0] == _OP_FIXED and merged and merged[-1][0] == _OP_FIXED:
            last = merged[-1]
            merged[-1] = (_OP_FIXED, last[1] + op[1], False, f"{last[3]}+{op[3]}")
        else:
            merged.append(op)
    plan.fields = tuple(merged)
    if not flexible and all(op[0] == _OP_FIXED for op in merged):
        plan.fixed_size = sum(op[1] for op in merged)
    return plan


def _var_encoding(ktype: str, flexible: bool, name: str) -> int:
    if flexible:
        return _COMPACT
    if ktype == "string":
        return _LEN16
    if ktype in ("bytes", "records"):
        return _LEN32
    raise TypeError(f"field {name}: unknown kafka_type {ktype!r}")


# -- the walk ---------------------------------------------------------------------------------
# Every function takes the buffer, the position and the end of the region it may read and
# returns the new position. ``edits`` collects (start, end, replacement) for tagged-field
# sections that lose unknown fields, in increasing position order; ``budget`` is
# [array elements still allowed, trace list or None] (see :func:`length_fields`).

def _uvarint(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise FrameError(f"{what}: varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise FrameError(f"{what}: varint longer than 5 bytes")
    if value > 0xFFFFFFFF:
        raise FrameError(f"{what}: varint {value} above 2^32-1")
    return value, pos


def _var(enc: int, nullable: bool, buf: bytes, pos: int, end: int, what: str,
         budget: list) -> int:
    if budget[1] is not None:
        budget[1].append((pos, _ENC_NAMES[enc], "length"))
    if enc == _COMPACT:
        n, pos = _uvarint(buf, pos, end, what)
        length = n - 1
    elif enc == _LEN16:
        if pos + 2 > end:
            raise FrameError(f"{what}: length runs past the end of the frame")
        length = _I16.unpack_from(buf, pos)[0]
        pos += 2
    else:
        if pos + 4 > end:
            raise FrameError(f"{what}: length runs past the end of the frame")
        length = _I32.unpack_from(buf, pos)[0]
        pos += 4
    if length < 0:
        if length == -1 and nullable:
            return pos
        raise FrameError(f"{what}: length {length} (null for a non-nullable field)" if length == -1
                         else f"{what}: negative length {length}")
    if length > end - pos:
        raise FrameError(f"{what}: length {length} but {end - pos} bytes left")
    return pos + length


def _array_count(flexible: bool, nullable: bool, buf: bytes, pos: int, end: int,
                 what: str, budget: list) -> tuple[int, int]:
    """(count or -1 for null, position after the count)."""
    if budget[1] is not None:
        budget[1].append((pos, "uvarint" if flexible else "i32", "array"))
    if flexible:
        n, pos = _uvarint(buf, pos, end, what)
        count = n - 1
    else:
        if pos + 4 > end:
            raise FrameError(f"{what}: array length runs past the end of the frame")
        count = _I32.unpack_from(buf, pos)[0]
        pos += 4
    if count < 0:
        if count == -1 and nullable:
            return -1, pos
        raise FrameError(f"{what}: array length {count} (null for a non-nullable array)" if count == -1
                         else f"{what}: negative array length {count}")
    return count, pos


def _field(op: tuple[int, Any, bool, str], flexible: bool, buf: bytes, pos: int, end: int,
           edits: list, budget: list[int], owner: str) -> int:
    kind, arg, nullable, name = op
    if kind == _OP_FIXED:
        pos += arg
        if pos > end:
            raise FrameError(f"{owner}.{name}: runs past the end of the frame")
        return pos
    if kind == _OP_VAR:
        return _var(arg, nullable, buf, pos, end, f"{owner}.{name}", budget)
    if kind == _OP_ENTITY:
        if nullable:
            if pos >= end:
                raise FrameError(f"{owner}.{name}: runs past the end of the frame")
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:
                return pos
            if marker != 1:
                raise FrameError(f"{owner}.{name}: nullable struct marker {marker} (not -1/1)")
        return _entity(arg, buf, pos, end, edits, budget)
    what = f"{owner}.{name}"
    count, pos = _array_count(flexible, nullable, buf, pos, end, what, budget)
    if count <= 0:
        return pos
    if kind == _OP_ARRAY_FIXED:
        if count > (end - pos) // arg:
            raise FrameError(f"{what}: {count} elements of {arg} bytes but {end - pos} bytes left")
    elif count > end - pos:
        raise FrameError(f"{what}: {count} elements but {end - pos} bytes left")
    budget[0] -= count
    if budget[0] < 0:
        raise FrameError(f"{what}: more array elements in the frame than the limit allows")
    if kind == _OP_ARRAY_FIXED:
        return pos + count * arg
    if kind == _OP_ARRAY_VAR:
        for _ in range(count):
            pos = _var(arg, False, buf, pos, end, what, budget)
        return pos
    size = arg.fixed_size
    if size is not None:
        if size and count > (end - pos) // size:
            raise FrameError(f"{what}: {count} elements of {size} bytes but {end - pos} bytes left")
        return pos + count * size
    for _ in range(count):
        pos = _entity(arg, buf, pos, end, edits, budget)
    return pos


def _entity(plan: _Plan, buf: bytes, pos: int, end: int, edits: list, budget: list[int]) -> int:
    flexible = plan.flexible
    fast = budget[1] is None  # the inline paths record no trace
    for op in plan.fields:
        kind = op[0]
        if kind == _OP_FIXED:  # inline: the common cases
            pos += op[1]
            if pos > end:
                raise FrameError(f"{plan.name}.{op[3]}: runs past the end of the frame")
        elif kind == _OP_VAR and fast and op[1] == _COMPACT and pos < end and 0 < buf[pos] < 0x80:
            n = buf[pos]  # a one-byte compact length N: N-1 bytes of value follow
            pos += n
            if pos > end:
                raise FrameError(f"{plan.name}.{op[3]}: length {n - 1} runs past the end of the frame")
        else:
            pos = _field(op, flexible, buf, pos, end, edits, budget, plan.name)
    if flexible:
        if fast and pos < end and buf[pos] == 0:  # no tagged fields: the common case
            return pos + 1
        pos = _tags(plan, buf, pos, end, edits, budget)
    return pos


def _tags(plan: _Plan, buf: bytes, pos: int, end: int, edits: list, budget: list[int]) -> int:
    start = pos
    what = f"{plan.name} tagged fields"
    if budget[1] is not None:
        budget[1].append((pos, "uvarint", "tags"))
    count, pos = _uvarint(buf, pos, end, what)
    if count == 0:
        return pos
    if count > (end - pos) // 2:  # a tag and a size: at least 2 bytes each
        raise FrameError(f"{what}: {count} fields but {end - pos} bytes left")
    budget[0] -= count  # each costs a step of the walk: they count like array elements
    if budget[0] < 0:
        raise FrameError(f"{what}: more array elements and tagged fields in the frame than the limit allows")
    rewrite = False
    kept: list[tuple[int, bytes | None, int, int]] = []  # (tag, new value or None, start, end)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end, what)
        if budget[1] is not None:
            budget[1].append((pos, "uvarint", "tag_size"))
        size, pos = _uvarint(buf, pos, end, what)
        if size > end - pos:
            raise FrameError(f"{what}: tag {tag} of {size} bytes but {end - pos} bytes left")
        value_end = pos + size
        op = plan.tagged.get(tag)
        if op is None:
            rewrite = True
        else:
            inner: list = []
            got = _field(op, True, buf, pos, value_end, inner, budget, plan.name)
            if got != value_end:
                raise FrameError(f"{what}: tag {tag} ({op[3]}) declares {size} bytes, its value "
                                 f"takes {got - pos}")
            if inner:
                rewrite = True
                kept.append((tag, splice(buf, pos, value_end, inner), pos, value_end))
            else:
                kept.append((tag, None, pos, value_end))
        pos = value_end
    if rewrite:
        out = bytearray(encode_uvarint(len(kept)))
        for tag, value, vstart, vend in kept:
            data = value if value is not None else buf[vstart:vend]
            out += encode_uvarint(tag)
            out += encode_uvarint(len(data))
            out += data
        edits.append((start, pos, bytes(out)))
    return pos


def splice(buf: bytes, start: int, end: int, edits: list) -> bytes:
    """``buf[start:end]`` with each (s, e, replacement) of ``edits`` applied."""
    parts = []
    pos = start
    for s, e, replacement in edits:
        parts.append(buf[pos:s])
        parts.append(replacement)
        pos = e
    parts.append(buf[pos:end])
    return b"".join(parts)


def check(buf: bytes, classes: tuple[type, ...], offset: int = 0,
          max_items: int = DEFAULT_MAX_ITEMS) -> tuple[bytes, int, int]:
    """Walk ``classes`` (e.g. (RequestHeader, MetadataRequest)) one after the other from
    ``offset``. Returns (the bytes kio may read — ``buf`` itself when nothing had to be cut
    —, the end of the entities in them, the end of the entities in ``buf``). Raises
    :class:`FrameError`."""
    edits: list = []
    budget: list = [max_items, None]
    pos = offset
    end = len(buf)
    for cls in classes:
        pos = _entity(plan_for(cls), buf, pos, end, edits, budget)
    if not edits:
        return buf, pos, pos
    cut = sum((e - s) - len(replacement) for s, e, replacement in edits)
    return bytes(buf[:offset]) + splice(buf, offset, end, edits), pos - cut, pos


def length_fields(buf: bytes, classes: tuple[type, ...], offset: int = 0) -> list[tuple[int, str, str]]:
    """Where the lengths are in a valid encoding: (position, "i16" | "i32" | "uvarint",
    "length" | "array" | "tags" | "tag_size") for every string/bytes/records length, array
    count, tagged-field count and tagged-field size — what a fuzzer mutates."""
    trace: list[tuple[int, str, str]] = []
    budget: list = [DEFAULT_MAX_ITEMS, trace]
    pos = offset
    for cls in classes:
        pos = _entity(plan_for(cls), buf, pos, len(buf), [], budget)
    return trace
