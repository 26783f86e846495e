"""Before/after comparison of two latency summaries: the regression gate (usable in CI).

Rows are matched on ``scenario × metric × backend × config`` (``model.LATENCY_KEYS``).

* Duration metrics (``*_ms``): for each of p50 and p99, ``ratio = after / before``. A stat
  regresses when ``after > before · (1 + threshold)`` AND ``after − before > min_delta_ms``
  (the absolute floor keeps sub-millisecond jitter from failing a build). It improves when
  ``after < before · (1 − threshold)`` and ``before − after > min_delta_ms``.
* Count metrics (``acked_lost``, ``duplicates``, ``service_unrecovered``): any increase of
  ``max`` regresses — there is no tolerance for more lost or duplicated records.
* Throughput metrics (``*_per_s``): higher is better, so a stat regresses when
  ``after < before · (1 − threshold)`` and improves when ``after > before · (1 + threshold)``.
* Ratio metrics (``latency_degradation_ratio``): as durations, without the ms floor.
* Host load (``host_cpu_busy_ratio``, ``host_cpu_other_ratio``): shown, always ``ok`` — the
  machine's load is the context of a figure, not the build's doing.
* A group only in ``before`` is ``missing`` (a regression only with ``fail_on_missing``);
  only in ``after`` is ``new``.

``verdict`` is one of ``regression``, ``improvement``, ``ok``, ``new``, ``missing``; the gate
fails (exit 1 in ``jbodlab analyze``) when any row is ``regression``.
"""

from __future__ import annotations

import math

import pandas as pd

from harness.results import schema as rs
from harness.analysis import model as m

COMPARED_STATS = ("p50", "p99")
HOST_METRICS = ("host_cpu_busy_ratio", "host_cpu_other_ratio")   # harness.run.host_load
COLUMNS = list(m.LATENCY_KEYS) + ["count_before", "count_after"] + [
    f"{s}_{w}" for s in COMPARED_STATS for w in ("before", "after", "ratio")] + [
    "max_before", "max_after", "verdict", "reason"]


def _ratio(before: float, after: float) -> float:
    if before == 0:
        return 1.0 if after == 0 else math.inf
    return after / before


def compare(before: pd.DataFrame, after: pd.DataFrame, *, threshold: float = 0.10,
            min_delta_ms: float = 1.0, fail_on_missing: bool = False) -> pd.DataFrame:
    if threshold < 0 or min_delta_ms < 0:
        raise ValueError(f"threshold ({threshold}) and min_delta_ms ({min_delta_ms}) must be ≥ 0")
    keys = list(m.LATENCY_KEYS)
    j = before.merge(after, on=keys, how="outer", suffixes=("_before", "_after"), indicator=True)
    rows = []
    for r in j.to_dict("records"):
        row = {k: r[k] for k in keys}
        row.update(count_before=r.get("count_before"), count_after=r.get("count_after"),
                   max_before=r.get("max_before"), max_after=r.get("max_after"))
        for s in COMPARED_STATS:
            b, a = r.get(f"{s}_before"), r.get(f"{s}_after")
            row[f"{s}_before"], row[f"{s}_after"] = b, a
            row[f"{s}_ratio"] = _ratio(b, a) if r["_merge"] == "both" else math.nan
        if r["_merge"] == "left_only":
            row["verdict"] = "regression" if fail_on_missing else "missing"
            row["reason"] = "group absent from the new results"
        elif r["_merge"] == "right_only":
            row["verdict"], row["reason"] = "new", "group absent from the baseline"
        elif r["metric"] in HOST_METRICS:   # the machine's load: context, not the build's doing
            row["verdict"], row["reason"] = "ok", "host load: context, not judged"
        elif r["metric"] in rs.COUNT_METRICS:
            if r["max_after"] > r["max_before"]:
                row["verdict"], row["reason"] = "regression", f"max {r['max_before']:g} → {r['max_after']:g}"
            elif r["max_after"] < r["max_before"]:
                row["verdict"], row["reason"] = "improvement", f"max {r['max_before']:g} → {r['max_after']:g}"
            else:
                row["verdict"], row["reason"] = "ok", ""
        else:
            worse, better = [], []
            rate, ratio = r["metric"] in rs.RATE_METRICS, r["metric"] in rs.RATIO_METRICS
            floor = 0.0 if rate or ratio else min_delta_ms
            unit = "/s" if rate else ("" if ratio else " ms")
            for s in COMPARED_STATS:
                b, a = row[f"{s}_before"], row[f"{s}_after"]
                up = a > b * (1 + threshold) and a - b > floor
                down = a < b * (1 - threshold) and b - a > floor
                text = f"{s} {b:.1f} → {a:.1f}{unit} (×{row[f'{s}_ratio']:.2f})"
                if (down if rate else up):
                    worse.append(text)
                elif (up if rate else down):
                    better.append(text)
            if worse:
                row["verdict"], row["reason"] = "regression", "; ".join(worse)
            elif better:
                row["verdict"], row["reason"] = "improvement", "; ".join(better)
            else:
                row["verdict"], row["reason"] = "ok", ""
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(keys, kind="mergesort").reset_index(drop=True)


def has_regression(comparison: pd.DataFrame) -> bool:
    return bool((comparison["verdict"] == "regression").any())
