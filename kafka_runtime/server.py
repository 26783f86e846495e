"""A generic asyncio Kafka-protocol listener (used by the controller and the broker).

A handler object declares the APIs it implements and serves them::

    class Handler:
        supported_apis: Mapping[int, tuple[int, int]]        # api_key -> (min, max)
        api_rules: Mapping[int, authz.ApiRule]                # optional (kafka_common.authz)
        request_classes: Mapping[tuple[int, int], type]       # optional: schemas kio lacks
        async def handle(self, ctx, header, request) -> response | None   # None: no reply

The server does the rest, the same way for every listener: framing, the header, refusal,
decoding, authorization, the handler, and SASL PLAIN, per frame in the order
:mod:`kafka_runtime.connection` describes. The handler types (:class:`RequestContext`,
:class:`SecurityConfig`, :class:`DeferredResponse`) live in :mod:`kafka_runtime.request_context`.

Resource limits (:class:`ListenerLimits`, from the server.properties keys of the same
names): ``max.connections`` and ``max.connections.per.ip`` (a connection over either is
closed at once), ``connections.max.idle.ms`` (a connection with no request in progress and
no bytes either way for that long is closed). Bad input — undecodable or refused frames,
failed logins, refused connections, handler errors — is logged rate-limited
(:class:`RateLimitedLog`): the first of each kind per ``bad.request.log.interval.ms`` in
full, then one line with the count.

Request metrics (:mod:`kafka_runtime.request_metrics`, Kafka's ``RequestMetrics``): every
``metrics.sample.window.ms`` in which requests were answered, one ``request_metrics`` event
gives per API the count and the mean/p50/p99/max of each phase (queue, local, remote, send,
total) of that window; the last window's at :meth:`KafkaServer.stop`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sys
import time
from typing import Any

from kafka_common import authz
from kafka_common.wire import ApiKey
from kafka_runtime.connection import API_VERSIONS_RANGE, Connection
from kafka_runtime.limits import ListenerLimits, RateLimitedLog
from kafka_runtime.request_context import RequestHandler, SecurityConfig
from kafka_runtime.request_metrics import RequestMetrics

# SaslHandshake v0 means raw (unframed) SASL tokens follow: not offered, so a v0 handshake
# gets the generic UNSUPPORTED_VERSION reply and the client retries with v1.
SASL_APIS = {ApiKey.SASL_HANDSHAKE: (1, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}


class KafkaServer:
    def __init__(self, handler: RequestHandler, *, host: str, port: int, listener_name: str,
                 security: SecurityConfig | None = None,
                 max_frame_bytes: int | None = None, limits: ListenerLimits | None = None,
                 events: Any = None, log=None) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.security = security or SecurityConfig()
        limits = limits or ListenerLimits()
        if max_frame_bytes is not None:
            limits = dataclasses.replace(limits, max_frame_bytes=max_frame_bytes)
        self.limits = limits
        self.max_frame_bytes = limits.max_frame_bytes
        self.events = events
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.bad_log = RateLimitedLog(self._emit, limits.bad_log_interval_ms)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[Connection] = set()
        self._per_ip: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._reaper: asyncio.Task | None = None
        self.request_metrics = RequestMetrics(time.perf_counter_ns())
        self._metrics_task: asyncio.Task | None = None
        self.stats = {"requests": 0, "closed_bad": 0, "handler_errors": 0, "refused_connections": 0,
                      "closed_idle": 0, "denied": 0}
        self._table_cache: tuple[dict, dict[int, tuple[int, int]]] | None = None
        self._rules_cache: tuple[Any, dict[int, authz.ApiRule]] | None = None

    def api_table(self) -> dict[int, tuple[int, int]]:
        """What ApiVersions advertises: the handler's table (read at each call, so a handler
        may change it) + ApiVersions + the SASL APIs where SASL is offered."""
        apis = self.handler.supported_apis
        cached = self._table_cache
        if cached is not None and cached[0] == apis:
            return cached[1]
        table = {k: (lo, hi) for k, (lo, hi) in apis.items()}
        table[ApiKey.API_VERSIONS] = API_VERSIONS_RANGE
        if self.security.sasl_required or self.security.sasl_offered:
            table.update(SASL_APIS)
        self._table_cache = (dict(apis), table)
        return table

    def api_rules(self) -> dict[int, authz.ApiRule]:
        """The handler's ``api_rules`` (if any) merged over the server's own."""
        declared = getattr(self.handler, "api_rules", None) or {}
        cached = self._rules_cache
        if cached is not None and cached[0] == declared:  # read each time: a handler may add rules
            return cached[1]
        rules = authz.merged_rules(declared)
        self._rules_cache = (dict(declared), rules)
        return rules

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port,
                                                reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.limits.idle_ms >= 0:
            self._reaper = loop.create_task(self._reap_idle())
        if self.events is not None:
            self._metrics_task = loop.create_task(self._emit_metrics())

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections keep being served."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            self._metrics_task = None
            self._take_metrics()
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self.bad_log.flush()

    async def _reap_idle(self) -> None:
        idle_s = self.limits.idle_ms / 1000
        step = min(max(idle_s / 4, 0.01), 1.0)
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            for conn in list(self._connections):
                if not conn.busy and now - conn.last_active >= idle_s:
                    self.stats["closed_idle"] += 1
                    self.bad_log.report("connection_idle_closed", peer=conn.peer,
                                        idle_ms=self.limits.idle_ms)
                    conn.close()

    async def _emit_metrics(self) -> None:
        window_s = self.limits.metrics_window_ms / 1000
        while True:
            await asyncio.sleep(window_s)
            self._take_metrics()

    def _take_metrics(self) -> None:
        """One ``request_metrics`` event for the window now ending (none when it was idle)."""
        if self.events is not None and not self.request_metrics.empty():
            self.events.emit("request_metrics", listener=self.listener_name,
                             **self.request_metrics.take(time.perf_counter_ns()))

    # -- the ConnectionHost side (kafka_runtime.connection) ------------------------------
    def admit(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` must be refused, or None."""
        if len(self._connections) >= self.limits.max_connections:
            return f"max.connections={self.limits.max_connections} reached"
        if self._per_ip.get(ip, 0) >= self.limits.max_connections_per_ip:
            return f"max.connections.per.ip={self.limits.max_connections_per_ip} reached for {ip}"
        return None

    def register(self, conn: Connection) -> int:
        self._connections.add(conn)
        self._per_ip[conn.ip] = self._per_ip.get(conn.ip, 0) + 1
        return next(self._ids)

    def unregister(self, conn: Connection) -> None:
        self._connections.discard(conn)
        left = self._per_ip.get(conn.ip, 1) - 1
        if left > 0:
            self._per_ip[conn.ip] = left
        else:
            self._per_ip.pop(conn.ip, None)

    def _emit(self, event: str, fields: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.emit(event, listener=self.listener_name, **fields)
        self._log(f"{self.listener_name}: {event} " + " ".join(f"{k}={v}" for k, v in fields.items()))

