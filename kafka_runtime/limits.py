"""A listener's resource limits and its rate-limited log of bad input.

:class:`ListenerLimits` holds the Kafka keys (``socket.request.max.bytes``,
``sasl.server.max.receive.size``, ``max.connections``, ``max.connections.per.ip``,
``connections.max.idle.ms``) plus ``bad.request.log.interval.ms``; the server enforces them;
``metrics.sample.window.ms`` is the window of its request metrics.

:class:`RateLimitedLog`: a peer can send bad frames as fast as the network carries them, so
a line per frame would let anyone fill the disk (about 390 bytes each, 39 MB per 100k
frames). Per kind of event, the first one of an interval is written in full; the others
are counted, and when the interval ends one summary line gives the count (event
``<kind>_suppressed`` with ``count`` and ``interval_ms``). At most two lines per kind per
interval, whatever the peer does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from kafka_common import framing

INT_MAX = 2**31 - 1
DEFAULT_PRE_AUTH_MAX_FRAME_BYTES = 524_288  # Kafka's sasl.server.max.receive.size
DEFAULT_IDLE_MS = 600_000
DEFAULT_BAD_LOG_INTERVAL_MS = 10_000
DEFAULT_METRICS_WINDOW_MS = 30_000  # Kafka's metrics.sample.window.ms


@dataclass(frozen=True)
class ListenerLimits:
    max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES
    pre_auth_max_frame_bytes: int = DEFAULT_PRE_AUTH_MAX_FRAME_BYTES
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    idle_ms: int = DEFAULT_IDLE_MS  # -1: never close an idle connection
    bad_log_interval_ms: int = DEFAULT_BAD_LOG_INTERVAL_MS
    metrics_window_ms: int = DEFAULT_METRICS_WINDOW_MS

    @classmethod
    def from_config(cls, cfg: Any) -> "ListenerLimits":
        return cls(max_frame_bytes=cfg.socket_request_max_bytes,
                   pre_auth_max_frame_bytes=cfg.sasl_server_max_receive_size,
                   max_connections=cfg.max_connections,
                   max_connections_per_ip=cfg.max_connections_per_ip,
                   idle_ms=cfg.connections_max_idle_ms,
                   bad_log_interval_ms=cfg.bad_request_log_interval_ms,
                   metrics_window_ms=cfg.metrics_sample_window_ms)


class RateLimitedLog:
    """``report(kind, **fields)``: ``emit(kind, fields)`` for the first of ``kind`` in an
    interval, a count for the rest, one ``emit(kind + "_suppressed", {count, interval_ms})``
    when the interval ends (on the running event loop's timer, or at the next report /
    :meth:`flush`)."""

    def __init__(self, emit: Callable[[str, dict[str, Any]], None], interval_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit = emit
        self.interval_s = interval_ms / 1000
        self._clock = clock
        self._windows: dict[str, list] = {}  # kind -> [window start, suppressed, timer]
        self.totals: dict[str, int] = {}

    def report(self, kind: str, **fields: Any) -> None:
        self.totals[kind] = self.totals.get(kind, 0) + 1
        now = self._clock()
        window = self._windows.get(kind)
        if window is not None and now - window[0] >= self.interval_s:
            self._close(kind)
            window = None
        if window is None:
            self._windows[kind] = [now, 0, None]
            self._emit(kind, fields)
            return
        window[1] += 1
        if window[2] is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            window[2] = loop.call_later(max(0.0, window[0] + self.interval_s - now), self._close, kind)

    def _close(self, kind: str) -> None:
        window = self._windows.pop(kind, None)
        if window is None:
            return
        if window[2] is not None:
            window[2].cancel()
        if window[1]:
            self._emit(f"{kind}_suppressed", {"count": window[1],
                                              "interval_ms": int(self.interval_s * 1000)})

    def flush(self) -> None:
        for kind in list(self._windows):
            self._close(kind)
