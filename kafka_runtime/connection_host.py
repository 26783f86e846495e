"""The listener as one of its connections sees it: the :class:`ConnectionHost` protocol.

:class:`kafka_runtime.server.KafkaServer` is the one implementation;
:class:`kafka_runtime.connection.Connection` uses only what it declares here: the listener's
settings, counters and logs, its tables (api key -> versions, api key -> rule), and the
registry behind the connection limits (``max.connections``, ``max.connections.per.ip``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol

if TYPE_CHECKING:
    from kafka_common import authz
    from kafka_runtime.limits import ListenerLimits, RateLimitedLog
    from kafka_runtime.request_context import RequestHandler, SecurityConfig
    from kafka_runtime.request_metrics import RequestMetrics


class Peer(Protocol):
    """A connection as the registry counts it: by its source address."""

    ip: str


class ConnectionHost(Protocol):
    handler: RequestHandler
    listener_name: str
    security: SecurityConfig
    limits: ListenerLimits
    max_frame_bytes: int
    stats: dict[str, int]
    bad_log: RateLimitedLog
    request_metrics: RequestMetrics

    def api_table(self) -> Mapping[int, tuple[int, int]]:
        """What the listener serves: api key -> (min, max) version."""
        ...

    def api_rules(self) -> Mapping[int, authz.ApiRule]:
        """Each API's authorization rule."""
        ...

    def admit(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` must be refused, or None."""
        ...

    def register(self, conn: Peer) -> int:
        """An admitted connection counted in; returns its connection id."""
        ...

    def unregister(self, conn: Peer) -> None:
        """A registered connection counted out (once, when it is lost)."""
        ...
