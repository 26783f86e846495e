"""What a listener's request handler sees: the per-connection :class:`RequestContext` (peer,
principal, the listener's :class:`SecurityConfig`), the :class:`RequestHandler` protocol, and
:class:`DeferredResponse` for an answer that must wait."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from kafka_common import authz
from kafka_common.config import ServerConfig

ANONYMOUS = "User:ANONYMOUS"


class DeferredResponse:
    """A handler's result when the request's work is under way but its response is not ready
    yet: ``awaitable`` yields the response (or ``None``: nothing to send). The server handles
    the connection's next requests meanwhile and sends the responses in request order."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


@dataclass(frozen=True)
class SecurityConfig:
    """How one listener authenticates and authorizes."""

    sasl_required: bool = False
    authorizer_enabled: bool = False
    # SASL offered but optional: a SASL_PLAINTEXT listener with the authorizer disabled, so a
    # client configured for SASL still logs in (and one that is not still works)
    sasl_offered: bool = False
    users: Mapping[str, str] = field(default_factory=dict)
    super_users: frozenset[str] = frozenset()

    @classmethod
    def for_listener(cls, cfg: ServerConfig, listener_name: str) -> "SecurityConfig":
        is_sasl = cfg.security_protocol(listener_name) == "SASL_PLAINTEXT"
        return cls(sasl_required=is_sasl and cfg.authorizer_enabled, sasl_offered=is_sasl,
                   authorizer_enabled=cfg.authorizer_enabled,
                   users=dict(cfg.sasl_plain_users), super_users=frozenset(cfg.super_users))

    def has_cluster_action(self, principal: str) -> bool:
        return not self.authorizer_enabled or principal in self.super_users

    def allows(self, permission: str, principal: str) -> bool:
        return permission == authz.ANY or self.has_cluster_action(principal)


@dataclass
class RequestContext:
    connection_id: int
    peer: str
    listener_name: str
    security: SecurityConfig
    principal: str = ANONYMOUS
    authenticated: bool = False
    api_key: int = -1
    api_version: int = -1
    correlation_id: int = 0
    client_id: str | None = None

    @property
    def cluster_action_allowed(self) -> bool:
        return self.security.has_cluster_action(self.principal)


class RequestHandler(Protocol):
    supported_apis: Mapping[int, tuple[int, int]]

    async def handle(self, ctx: RequestContext, header: Any, request: Any) -> Any | None: ...
