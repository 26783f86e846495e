"""The one module that talks to ``kio.serial``: encode and decode Kafka entities.

Schema look-ups are cached (kio's go through pkgutil each time). Readers want read-only
buffers; this module hands them ``bytes``. kio reads zero uuids as ``None`` — callers use
``kafka_common.ids.from_wire``.

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

E = TypeVar("E")


class DecodeError(ValueError):
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


def decode(cls: type[E], data: bytes | memoryview, offset: int = 0) -> tuple[E, int]:
    """(value, bytes consumed). Raises DecodeError for anything kio rejects."""
    if isinstance(data, memoryview) and not data.readonly:
        data = data.toreadonly()
    elif isinstance(data, bytearray):
        data = bytes(data)
    try:
        return _reader(cls)(data, offset)
    except Exception as exc:  # kio raises ValueError, KeyError, struct/native errors
        raise DecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from None


@lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    return kio.index.load_request_schema(api_key, version)


@lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    return kio.index.load_response_schema(api_key, version)


@lru_cache(maxsize=None)
def response_module(api_key: int, version: int) -> Any:
    return kio.index.load_payload_module(api_key, version, EntityType.response)


@lru_cache(maxsize=None)
def request_module(api_key: int, version: int) -> Any:
    return kio.index.load_payload_module(api_key, version, EntityType.request)
