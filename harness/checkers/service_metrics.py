"""The ``service`` check's rows of the ``metrics`` table, from its analysis
(:class:`~harness.checkers.service.ServiceAnalysis`): produce latency and throughput per window,
the brokers' Produce time, the latency degradation ratio and the service recovery per fault.
Pure."""

from __future__ import annotations

import math
from typing import Any

from harness.checkers.service import ServiceAnalysis

__all__ = ["service_metric_rows"]


def service_metric_rows(a: ServiceAnalysis, row) -> list[dict]:
    """Rows of the ``metrics`` table; ``row(metric, value, unit=…, fault=…, **kw)`` builds one."""
    rows: list[dict] = []

    def windows_of(stats: dict[str, dict[str, Any]], **kw) -> None:
        for w, s in stats.items():
            for q in ("p50", "p99"):
                if s[f"{q}_ms"] is not None:
                    rows.append(row(f"produce_{w}_{q}_ms", s[f"{q}_ms"], **kw))
            rows.append(row(f"produce_{w}_per_s", s["per_s"], unit="per_s", **kw))

    windows_of(a.pooled)
    for w, b in a.brokers.items():
        rows.append(row(f"broker_produce_{w}_mean_ms", b["mean_ms"]))
        rows.append(row(f"broker_produce_{w}_p99_ms", b["p99_ms"]))
    by_id = {f.fault_id: f for f in a.faults}
    unrecovered = 0
    worst_outside = None
    for p in a.partitions:
        kw = {"topic": p.topic, "partition": p.partition}
        windows_of(p.stats, **kw)
        if p.degradation_ratio is not None and math.isfinite(p.degradation_ratio):
            rows.append(row("latency_degradation_ratio", p.degradation_ratio, unit="ratio", **kw))
        if p.outside and p.degradation_ratio is not None:
            worst_outside = p.degradation_ratio if worst_outside is None else max(worst_outside, p.degradation_ratio)
        for fid, ms in p.recovery_ms.items():
            if ms is None:
                unrecovered += 1
            else:
                rows.append(row("service_recovery_ms", ms, fault=by_id[fid], **kw))
    if worst_outside is not None and math.isfinite(worst_outside):
        rows.append(row("latency_degradation_ratio", worst_outside, unit="ratio"))
    judged = [p for p in a.partitions if p.name not in a.not_judged and p.window_ms is not None]
    for f in a.faults:
        vals = [p.recovery_ms.get(f.fault_id) for p in judged if f.fault_id in p.recovery_ms]
        if vals and all(v is not None for v in vals):
            rows.append(row("service_recovery_ms", max(vals), fault=f))
    if a.faults and judged:
        rows.append(row("service_unrecovered", unrecovered, unit="count"))
    return rows
