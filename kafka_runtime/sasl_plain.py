"""SASL PLAIN on a listener (SaslHandshake v1, SaslAuthenticate v0-v2): the answers, and the
principal a successful login gives the connection's :class:`RequestContext`. The connection
(:mod:`kafka_runtime.connection`) keeps whether its handshake was done and closes after a
failed login."""

from __future__ import annotations

import datetime
from typing import Any

from kafka_common import wire
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.request_context import RequestContext

MECHANISMS = ("PLAIN",)


def handshake(request: Any, version: int) -> Any:
    """The SaslHandshake answer: PLAIN is the one mechanism offered."""
    cls = wire.response_class(ApiKey.SASL_HANDSHAKE, version)
    if request.mechanism != "PLAIN":
        return cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=MECHANISMS)
    return cls(error_code=ErrorCode.none, mechanisms=MECHANISMS)


def authenticate(ctx: RequestContext, request: Any, version: int, handshake_done: bool) -> Any:
    """The SaslAuthenticate answer to a PLAIN token (``authzid NUL user NUL password``); on
    success ``ctx`` is authenticated as ``User:<user>``."""
    cls = wire.response_class(ApiKey.SASL_AUTHENTICATE, version)

    def reply(code: ErrorCode, message: str | None) -> Any:
        return wire.make(cls, error_code=code, error_message=message, auth_bytes=b"",
                         session_lifetime=datetime.timedelta(0))
    if not handshake_done or ctx.authenticated:
        return reply(ErrorCode.illegal_sasl_state, "SaslAuthenticate without a PLAIN handshake")
    parts = bytes(request.auth_bytes).split(b"\x00")
    if len(parts) != 3:
        return reply(ErrorCode.sasl_authentication_failed, "malformed PLAIN token")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        return reply(ErrorCode.sasl_authentication_failed, "PLAIN token is not UTF-8")
    expected = ctx.security.users.get(user)
    if expected is None or expected != password or (authzid and authzid != user):
        return reply(ErrorCode.sasl_authentication_failed,
                     "Authentication failed: Invalid username or password")
    ctx.authenticated = True
    ctx.principal = f"User:{user}"
    return reply(ErrorCode.none, None)
