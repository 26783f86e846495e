"""The one module that talks to ``kio.serial``: encode and decode Kafka entities.

Schema look-ups are cached (kio's go through pkgutil each time). Readers want read-only
buffers; this module hands them ``bytes``. kio reads zero uuids as ``None`` — callers use
``kafka_common.ids.from_wire``.

Nothing reaches kio's native reader before :mod:`kafka_common.wire_guard` has walked it:
every length bounded by the bytes left and a budget of array elements (kio would otherwise
reserve memory for any claimed array length and abort the process), unknown tagged fields
cut out (kio raises on them; the protocol says they are ignored).

(The request/response helpers for servers and clients are built on these by
``kafka_runtime``; extend here, do not import kio.serial elsewhere.)
"""

from __future__ import annotations

import io
from functools import lru_cache
from typing import Any, TypeVar

import kio.index
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from kafka_common import wire_guard
from kafka_common.errors import KafkaCommonError
from kafka_common.wire_guard import DEFAULT_MAX_ITEMS

E = TypeVar("E")


class DecodeError(KafkaCommonError, ValueError):
    """Bytes that do not decode as the expected entity."""


@lru_cache(maxsize=None)
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@lru_cache(maxsize=None)
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def encode(obj: Any) -> bytes:
    buf = io.BytesIO()
    _writer(type(obj))(buf, obj)
    return buf.getvalue()


def encode_into(buf: io.BytesIO, obj: Any) -> None:
    _writer(type(obj))(buf, obj)


def decode(cls: type[E], data: bytes | memoryview, offset: int = 0, *,
           max_items: int = DEFAULT_MAX_ITEMS) -> tuple[E, int]:
    """(value, bytes of ``data`` consumed). Raises DecodeError for anything the guard or kio
    rejects."""
    if isinstance(data, memoryview) and not data.readonly:
        data = data.toreadonly()
    elif isinstance(data, bytearray):
        data = bytes(data)
    try:
        checked, end, consumed = _guard(data, (cls,), offset, max_items)
        value, _ = _reader(cls)(checked, offset)
    except DecodeError:
        raise
    except Exception as exc:  # kio raises ValueError, KeyError, struct/native errors
        raise DecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from None
    return value, consumed - offset


def _guard(data: Any, classes: tuple[type, ...], offset: int, max_items: int) -> tuple[Any, int, int]:
    """(bytes kio may read, end of the entities in them, end in ``data``) — DecodeError if
    kio must not see ``data``."""
    try:
        return wire_guard.check(data, classes, offset, max_items)
    except wire_guard.FrameError as exc:
        raise DecodeError(str(exc)) from None


# kio's index first, then the old versions kio lacks (``kafka_common.legacy_schemas``,
# Kafka 3.9's floor); the kio error is raised when neither has the schema.
def _legacy_or_raise(exc: Exception, api_key: int, version: int, kind: EntityType, top: bool) -> Any:
    from kafka_common import legacy_schemas
    if (api_key, version) not in legacy_schemas.VERSIONS:
        raise exc
    if not top:
        return legacy_schemas.module(api_key, version, kind)
    if kind == EntityType.request:
        return legacy_schemas.request_class(api_key, version)
    return legacy_schemas.response_class(api_key, version)


@lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    try:
        return kio.index.load_request_schema(api_key, version)
    except kio.index.KioIndexError as exc:
        return _legacy_or_raise(exc, api_key, version, EntityType.request, True)


@lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    try:
        return kio.index.load_response_schema(api_key, version)
    except kio.index.KioIndexError as exc:
        return _legacy_or_raise(exc, api_key, version, EntityType.response, True)


@lru_cache(maxsize=None)
def response_module(api_key: int, version: int) -> Any:
    try:
        return kio.index.load_payload_module(api_key, version, EntityType.response)
    except kio.index.KioIndexError as exc:
        return _legacy_or_raise(exc, api_key, version, EntityType.response, False)


@lru_cache(maxsize=None)
def request_module(api_key: int, version: int) -> Any:
    try:
        return kio.index.load_payload_module(api_key, version, EntityType.request)
    except kio.index.KioIndexError as exc:
        return _legacy_or_raise(exc, api_key, version, EntityType.request, False)


# --------------------------------------------------------------------------------------
# Request/response framing helpers for kafka_runtime.server / kafka_runtime.client.
# Frames here are the bytes after the 4-byte size prefix (kafka_common.framing adds it).

import dataclasses as _dc
import datetime as _dt
import struct as _struct

import enum as _enum

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map as _api_key_map

ApiKey = _enum.IntEnum("ApiKey", {name.upper(): key for key, name in _api_key_map.items()})
ApiKey.__doc__ = "Kafka's API keys by name, as kio's index has them (``ApiKey.BROKER_HEARTBEAT == 63``)."

_PEEK = _struct.Struct(">hhi")
API_VERSIONS_KEY = ApiKey.API_VERSIONS


class UnknownApi(DecodeError):
    """An api key / version that kio has no schema for (cannot even build an error reply)."""

    def __init__(self, api_key: int, version: int) -> None:
        super().__init__(f"no schema for api_key={api_key} version={version}")
        self.api_key = api_key
        self.version = version


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame; DecodeError if too short."""
    if len(frame) < _PEEK.size:
        raise DecodeError(f"request frame of {len(frame)} bytes is shorter than a header")
    return _PEEK.unpack_from(frame, 0)


def schema_exists(api_key: int, version: int) -> bool:
    try:
        request_class(api_key, version)
        response_class(api_key, version)
    except Exception:  # kio.index.KioIndexError and friends
        return False
    return True


def decode_request(frame: bytes, *, request_cls: type | None = None, strict: bool = False,
                   max_items: int = DEFAULT_MAX_ITEMS) -> tuple[Any, Any]:
    """(header, request) of one request frame, read as ``request_cls`` (default: kio's class
    of the frame's key/version). UnknownApi when there is no class; DecodeError for bytes
    that do not decode — after the guard (``wire_guard``) has bounded every length, so no
    frame can make kio allocate beyond it. Unknown tagged fields are skipped. Trailing
    bytes after the body are ignored, as Kafka's request parser does (librdkafka 2.16 sends
    3 extra bytes in Metadata v12); ``strict=True`` rejects them."""
    api_key, version, _ = peek_header(frame)
    cls = request_cls
    if cls is None:
        if not schema_exists(api_key, version):
            raise UnknownApi(api_key, version)
        cls = request_class(api_key, version)
    hdr_cls = cls.__header_schema__
    checked, _end, consumed = _guard(frame, (hdr_cls, cls), 0, max_items)
    try:
        header, n = _reader(hdr_cls)(checked, 0)
        request, _m = _reader(cls)(checked, n)
    except Exception as exc:  # kio raises ValueError, KeyError, struct/native errors
        raise DecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from None
    if strict and consumed != len(frame):
        raise DecodeError(f"{cls.__name__} v{version}: {len(frame) - consumed} trailing bytes")
    return header, request


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Response header (the version kio chose for this response, v0 for ApiVersions) + body."""
    buf = io.BytesIO()
    hdr_cls = type(response).__header_schema__
    encode_into(buf, hdr_cls(correlation_id=correlation_id))
    encode_into(buf, response)
    return buf.getvalue()


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    cls = type(request)
    buf = io.BytesIO()
    encode_into(buf, cls.__header_schema__(request_api_key=cls.__api_key__,
                                           request_api_version=cls.__version__,
                                           correlation_id=correlation_id, client_id=client_id))
    encode_into(buf, request)
    return buf.getvalue()


def decode_response(frame: bytes, api_key: int, version: int, *,
                    max_items: int = 4 * DEFAULT_MAX_ITEMS) -> tuple[int, Any]:
    """(correlation_id, response) of one response frame (guarded like requests)."""
    cls = response_class(api_key, version)
    hdr_cls = cls.__header_schema__
    checked, _end, consumed = _guard(frame, (hdr_cls, cls), 0, max_items)
    if consumed != len(frame):
        raise DecodeError(f"{cls.__name__} v{version}: {len(frame) - consumed} trailing bytes")
    try:
        header, n = _reader(hdr_cls)(checked, 0)
        response, _m = _reader(cls)(checked, n)
    except Exception as exc:
        raise DecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from None
    return header.correlation_id, response


def make(cls: type[E], **values: Any) -> E:
    """Build a kio value from the keyword arguments its version has (others are dropped),
    so callers can be version-generic."""
    names = {f.name for f in _dc.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _default_for(f: _dc.Field) -> Any:
    kafka_type = f.metadata.get("kafka_type")
    annotation = str(f.type)
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _dt.timedelta(0)
    if annotation.startswith("tuple"):
        return ()
    if "None" in annotation:
        return None
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return None
    return 0  # int8/16/32/64 and friends


def error_response(api_key: int, version: int, code: ErrorCode, message: str | None = None) -> Any:
    """A response of this api/version whose top-level ``error_code`` (if it has one) is
    ``code`` and every other required field is empty/zero — Kafka's generic error reply."""
    cls = response_class(api_key, version)
    values: dict[str, Any] = {}
    for f in _dc.fields(cls):
        if f.name == "error_code":
            values[f.name] = code
        elif f.name == "error_message" and message is not None:
            values[f.name] = message
        elif f.default is _dc.MISSING and f.default_factory is _dc.MISSING:  # type: ignore[misc]
            values[f.name] = _default_for(f)
    return cls(**values)


def api_versions_response(version: int, table: dict[int, tuple[int, int]],
                          code: ErrorCode = ErrorCode.none) -> Any:
    cls = response_class(API_VERSIONS_KEY, version)
    mod = response_module(API_VERSIONS_KEY, version)
    keys = tuple(mod.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in sorted(table.items()))
    return make(cls, error_code=code, api_keys=keys, throttle_time=_dt.timedelta(0))


def api_versions_fallback(correlation_id: int, table: dict[int, tuple[int, int]]) -> bytes:
    """Reply to an ApiVersions version we do not support: a v0 body with response header v0,
    error UNSUPPORTED_VERSION and the full api list (clients then retry with a version
    they find in it) — see wire-notes "ApiVersions fallback"."""
    return encode_response(api_versions_response(0, table, ErrorCode.unsupported_version),
                           correlation_id)
