"""Building kio entities version-generically.

kio has one dataclass per version and the required fields change between versions, so
responses are built with :func:`build`, which drops keyword arguments the version does not
have. Nested classes are looked up by name in the response module of the request's version
(:func:`response_type`). Rich types: durations are ``timedelta``, errors ``ErrorCode``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from functools import lru_cache
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_common import wire
from kafka_common.wire import ApiKey
from kafka_common.clock import timedelta_to_ms as ms  # noqa: F401  (the handlers' name for it)

NO_THROTTLE = timedelta(0)


@lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **kwargs: Any) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in kwargs.items() if k in names})


@lru_cache(maxsize=None)
def response_type(api_key: int, version: int, name: str) -> type:
    if api_key == ApiKey.PRODUCE and version < 3:  # kio has no Produce v0-2: our own schemas
        from broker_impl.api import legacy_produce
        return getattr(legacy_produce.response_module(version), name)
    return getattr(wire.response_module(api_key, version), name)


@lru_cache(maxsize=None)
def error(code: int) -> ErrorCode:
    return ErrorCode(code)


def replica_error(view: Any, topic_id: Any, partition: int, op: str, exc: BaseException) -> tuple[ErrorCode, str] | None:
    """Map an exception raised by a replica operation to a Kafka error (see ``view.py``):
    a storage failure → KAFKA_STORAGE_ERROR (the storage layer's failure channel has already
    reported the dir: storage errors have that one inlet); an exception with an integer
    ``error_code`` → that code; anything else → ``None`` (a bug: re-raise)."""
    if isinstance(exc, view.storage_exceptions) or isinstance(exc, OSError):
        return ErrorCode.kafka_storage_error, f"{op} failed: {exc}"
    code = getattr(exc, "error_code", None)
    if isinstance(code, int):
        try:
            return ErrorCode(code), str(exc)
        except ValueError:
            return None
    return None
