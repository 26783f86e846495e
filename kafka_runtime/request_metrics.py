"""Where a listener's requests spend their time — Kafka's ``RequestMetrics``, per API, per window.

A request's life on a connection (:mod:`kafka_runtime.connection`), as Kafka splits it:

- ``queue`` — from its frame's arrival to the start of its handling (behind the
  connection's earlier requests: requests of one connection are handled in order);
- ``local`` — decoding and the handler, until the handler returns;
- ``remote`` — a deferred answer (Produce acks=all) waiting for the followers;
- ``send`` — the ready answer waiting behind earlier answers of the connection (answers leave
  in request order) until it is handed to the socket;
- ``total`` — arrival to hand-off: what the broker adds to a client's round trip.

Times are in microseconds, kept in log-scale buckets (2^(1/4) apart, so a percentile is
within 19 % of the true value) per API and phase; :meth:`RequestMetrics.take` returns the
window's figures and starts a new window. Pure: the caller passes the timestamps
(``time.perf_counter_ns``); recording costs a few dict operations per request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PHASES = ("queue", "local", "remote", "send", "total")
_STEPS_PER_OCTAVE = 4


def _bucket(us: float) -> int:
    return 0 if us < 1.0 else int(math.log2(us) * _STEPS_PER_OCTAVE) + 1


def _bucket_upper_us(index: int) -> float:
    return 1.0 if index == 0 else 2.0 ** (index / _STEPS_PER_OCTAVE)


@dataclass(slots=True)
class Histogram:
    """Counts per log-scale bucket, plus the exact count, sum and maximum."""
    buckets: dict[int, int] = field(default_factory=dict)
    count: int = 0
    sum_us: float = 0.0
    max_us: float = 0.0

    def add(self, us: float) -> None:
        b = _bucket(us)
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.count += 1
        self.sum_us += us
        if us > self.max_us:
            self.max_us = us

    def percentile_us(self, q: float) -> float:
        """The upper bound of the bucket holding the q-quantile (0 < q ≤ 1), capped at the max."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                return min(_bucket_upper_us(b), self.max_us)
        return self.max_us

    def summary_ms(self) -> dict[str, float]:
        return {"mean": round(self.sum_us / self.count / 1000, 3) if self.count else 0.0,
                "p50": round(self.percentile_us(0.50) / 1000, 3),
                "p99": round(self.percentile_us(0.99) / 1000, 3),
                "max": round(self.max_us / 1000, 3)}


@dataclass(slots=True)
class RequestTiming:
    """One request's timestamps (ns, one monotonic clock); 0 = that step did not happen."""
    api_key: int
    arrived_ns: int
    started_ns: int = 0
    handled_ns: int = 0
    ready_ns: int = 0


class RequestMetrics:
    """Per API key: one :class:`Histogram` per phase of :data:`PHASES`, for the current window."""

    def __init__(self, now_ns: int = 0) -> None:
        self._window_start_ns = now_ns
        self._by_api: dict[int, dict[str, Histogram]] = {}

    def record(self, t: RequestTiming, sent_ns: int) -> None:
        """A request whose answer was handed to the socket at ``sent_ns`` (or dropped then:
        acks=0). Steps that did not happen collapse onto the next one."""
        started = t.started_ns or sent_ns
        handled = t.handled_ns or started
        ready = t.ready_ns or handled
        hists = self._by_api.get(t.api_key)
        if hists is None:
            hists = self._by_api[t.api_key] = {p: Histogram() for p in PHASES}
        hists["queue"].add((started - t.arrived_ns) / 1000)
        hists["local"].add((handled - started) / 1000)
        hists["remote"].add((ready - handled) / 1000)
        hists["send"].add((sent_ns - ready) / 1000)
        hists["total"].add((sent_ns - t.arrived_ns) / 1000)

    def empty(self) -> bool:
        return not self._by_api

    def take(self, now_ns: int) -> dict[str, Any]:
        """The window's figures and a new window: ``{"window_ms", "apis": {api key (str):
        {"count", phase: {"mean", "p50", "p99", "max"} (ms)}}}``."""
        out = {"window_ms": round((now_ns - self._window_start_ns) / 1e6, 1),
               "apis": {str(api): {"count": h["total"].count, **{p: h[p].summary_ms() for p in PHASES}}
                        for api, h in sorted(self._by_api.items())}}
        self._by_api = {}
        self._window_start_ns = now_ns
        return out
