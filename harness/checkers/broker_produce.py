"""The brokers' own share of a produce's latency (a diagnostic of the ``service`` check, never
judged): the brokers' ``request_metrics`` windows of Produce requests, and their time over a
service window. Pure."""

from __future__ import annotations

from typing import Any

from harness.checkers.service_windows import MS
from harness.history.model import Event, History

__all__ = ["PRODUCE_API", "broker_seconds", "broker_produce_stats"]

PRODUCE_API = "0"


def broker_seconds(history: History) -> list[tuple[int, int, int, float, float]]:
    """The brokers' ``request_metrics`` windows with Produce requests: (start ns, end ns,
    requests, mean total ms, p99 total ms). A malformed event is not a figure."""
    out = []
    for e in history.entries:
        if not isinstance(e, Event) or e.event != "request_metrics" or e.role != "broker":
            continue
        api = (e.attrs.get("apis") or {}).get(PRODUCE_API)
        window_ms = e.attrs.get("window_ms")
        if not isinstance(api, dict) or not isinstance(window_ms, (int, float)):
            continue
        try:
            out.append((int(e.ts_ns - window_ms * MS), e.ts_ns, int(api["count"]), float(api["total"]["mean"]),
                        float(api["total"]["p99"])))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def broker_produce_stats(seconds: list[tuple[int, int, int, float, float]],
                         span: tuple[int, int] | None) -> dict[str, Any] | None:
    """The brokers' Produce time over ``span`` from their windows (:func:`broker_seconds`)
    that lie inside it: requests, count-weighted mean of the total, the highest window p99 (ms)."""
    if span is None:
        return None
    wins = [(c, m, q) for a, b, c, m, q in seconds if span[0] <= a and b <= span[1]]
    n = sum(c for c, _m, _q in wins)
    if not n:
        return None
    return {"requests": n, "windows": len(wins), "mean_ms": sum(c * m for c, m, _q in wins) / n,
            "p99_ms": max(q for _c, _m, q in wins)}
