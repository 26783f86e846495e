"""What an analysis produces: summary tables, their keys and columns, and the percentile rule.

Both engines (``pandas_engine`` and ``spark_engine``) return a :class:`Summary` whose tables
have exactly these columns, dtypes and row order, so they can be compared with
``pandas.testing.assert_frame_equal``.

Percentile definition (both engines, identical to Spark SQL's exact ``percentile``): for the
``n`` values of a group sorted ascending ``x[0] ≤ … ≤ x[n−1]`` and a fraction ``p``,
``pos = p·(n−1)``, ``lo = floor(pos)``, ``hi = ceil(pos)``;
``q(p) = x[lo]`` if ``lo == hi`` else ``x[lo] + (pos − lo)·(x[hi] − x[lo])``
(linear interpolation between closest ranks, Hyndman–Fan type 7, numpy's default ``linear``;
evaluated in float64 in exactly this order, so the two engines agree bit for bit — verified
against Spark 4.3's ``percentile`` on random data in the tests).
Nulls are ignored; ``count`` counts the non-null values.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results import schema as rs
from harness.checkers.service_windows import (ADMIN_PROCESS_PREFIX, INSTANT_FAULT_KINDS,  # noqa: F401 - shared
                                             WARMUP_MS)

PERCENTILES = (0.5, 0.9, 0.99)
STATS = ("count", "min", "p50", "p90", "p99", "max")

# table -> (key columns, value column the stats are computed over)
LATENCY_KEYS = ("scenario", "metric", "backend", "config")
PER_PARTITION_KEYS = ("scenario", "metric", "backend", "config", "topic", "partition")
TIMEOUT_KEYS = ("scenario", "backend", "config", "log_dir_failure_timeout_ms")
UNAVAIL_SUMMARY_KEYS = ("scenario", "op_kind", "metric", "backend")
EVENT_LATENCY_KEYS = ("scenario", "backend", "event")
CHECKS_KEYS = ("scenario", "checker", "valid")
RESOURCE_KEYS = ("scenario", "backend", "resource")
RESOURCE_COLUMNS = {"cpu_percent": 1.0, "rss_bytes": 1.0 / (1024 * 1024)}  # column -> scale (rss in MiB)
RESOURCE_NAMES = {"cpu_percent": "cpu_percent", "rss_bytes": "rss_mib"}

SERVICE_WINDOW_COLUMNS = ("run_id", "scenario", "backend", "window", "start_ns", "end_ns", "ops", "ok", "failed",
                          "per_s")
SERVICE_LATENCY_KEYS = ("scenario", "backend", "window")
FAULT_WINDOW_COLUMNS = ("run_id", "scenario", "backend", "fault_id", "fault_kind", "start_ns", "end_ns",
                        "duration_ms", "healed")
UNAVAIL_COLUMNS = ("run_id", "scenario", "backend", "fault_id", "op_kind", "topic", "partition", "last_ok_ns",
                   "first_ok_ns", "unavailable_ms", "longest_gap_ms", "failed_ops", "recovered")

SUMMARY_TABLES: dict[str, tuple[str, ...]] = {
    "latency": LATENCY_KEYS + STATS,
    "per_partition": PER_PARTITION_KEYS + STATS,
    "timeout_accuracy": TIMEOUT_KEYS + STATS,
    "fault_windows": FAULT_WINDOW_COLUMNS,
    "unavailability": UNAVAIL_COLUMNS,
    "unavailability_summary": UNAVAIL_SUMMARY_KEYS + STATS,
    "event_latency": EVENT_LATENCY_KEYS + STATS,
    "checks_summary": CHECKS_KEYS + ("runs",),
    "service_windows": SERVICE_WINDOW_COLUMNS,
    "service_latency": SERVICE_LATENCY_KEYS + STATS,
    "resources_summary": RESOURCE_KEYS + STATS,
}
SORT_KEYS: dict[str, tuple[str, ...]] = {
    "latency": LATENCY_KEYS,
    "per_partition": PER_PARTITION_KEYS,
    "timeout_accuracy": TIMEOUT_KEYS,
    "fault_windows": ("run_id", "fault_id"),
    "unavailability": ("run_id", "fault_id", "op_kind", "topic", "partition"),
    "unavailability_summary": UNAVAIL_SUMMARY_KEYS,
    "event_latency": EVENT_LATENCY_KEYS,
    "checks_summary": CHECKS_KEYS,
    "resources_summary": RESOURCE_KEYS,
    "service_windows": ("run_id", "window"),
    "service_latency": SERVICE_LATENCY_KEYS,
}
_INT_COLUMNS = {"count", "runs", "partition", "log_dir_failure_timeout_ms", "start_ns", "end_ns", "last_ok_ns",
                "first_ok_ns", "failed_ops", "ops", "ok", "failed"}
_BOOL_COLUMNS = {"healed", "recovered"}
_FLOAT_COLUMNS = {"min", "p50", "p90", "p99", "max", "duration_ms", "unavailable_ms", "longest_gap_ms", "per_s"}

# what a client op is, for unavailability: a produce, a consume of a group member
# (client_id group-m<i>), any other consume (a reader by assignment); the drain's consumes
# (client_id "drain") are not service — the drain reads everything back after the workload,
# and pooled with the produces its first record looked like a multi-second gap of service
OP_KINDS = ("produce", "consume", "group-consume")
DRAIN_CLIENT = "drain"
GROUP_CLIENT_PREFIX = "group-m"    # = harness.checkers.group_consumption.GROUP_PROCESS_PREFIX


def op_kind(op: str, client_id: str | None) -> str | None:
    """The op kind of a client op, None for the drain's (not service)."""
    if op == "produce":
        return "produce"
    if client_id == DRAIN_CLIENT:
        return None
    return "group-consume" if (client_id or "").startswith(GROUP_CLIENT_PREFIX) else "consume"


# fault-window events written by the harness
FAULT_START = "fault_injected"
FAULT_END = "fault_healed"

# service windows of a run (the definitions of harness.checkers.service, computed from Parquet):
# before = [first produce invoke + WARMUP, first fault), during = [first fault, end of the
# disturbance), after = [end of the disturbance, last produce invoke + 1 ns). The disturbance
# ends at the latest heal; an instantaneous fault (INSTANT_FAULT_KINDS) ends where it starts; a
# fault never healed makes it last to the end. An op belongs to the window of its invoke time;
# per_s counts ok completions inside the window.
WINDOW_ORDER = ("before", "during", "after")
# metrics that have one run-level row (topic/partition null) besides per-partition rows: the
# latency table and the CDFs take the run-level rows, per_partition the others
RUN_LEVEL_METRICS = tuple(x for x in rs.METRICS if x.startswith("produce_")) + (
    "service_recovery_ms", "latency_degradation_ratio")


@dataclasses.dataclass
class Summary:
    """The result of one analysis run (small: every table fits in memory on the driver)."""

    tables: dict[str, pd.DataFrame]
    metric_values: pd.DataFrame  # scenario, metric, backend, config, value (for CDF plots)
    engine: str
    runs: int
    run_dirs: list[Path] = dataclasses.field(default_factory=list)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]


def percentile_sorted(x: np.ndarray, p: float) -> float:
    """The percentile rule of this module on an ascending-sorted float array (n ≥ 1)."""
    pos = (len(x) - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or x[lo] == x[hi]:
        return float(x[lo])
    return float(x[lo] + (pos - lo) * (x[hi] - x[lo]))


def stats_of(values) -> dict[str, float | int]:
    x = np.sort(np.asarray([v for v in values if v is not None and not _isnan(v)], dtype=np.float64))
    if len(x) == 0:
        return {"count": 0, "min": np.nan, "p50": np.nan, "p90": np.nan, "p99": np.nan, "max": np.nan}
    out: dict[str, float | int] = {"count": int(len(x)), "min": float(x[0]), "max": float(x[-1])}
    for p in PERCENTILES:
        out[f"p{int(round(p * 100))}"] = percentile_sorted(x, p)
    return out


def _isnan(v) -> bool:
    try:
        return math.isnan(v)
    except TypeError:
        return False


def normalize(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Column order, dtypes (nullable Int64 / float64 / boolean / object) and row order of a table."""
    columns = SUMMARY_TABLES[name]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"summary table {name!r} lacks columns {missing}")
    df = df.loc[:, list(columns)].copy()
    for c in columns:
        if c in _INT_COLUMNS:
            df[c] = df[c].astype("Int64")
        elif c in _BOOL_COLUMNS:
            df[c] = df[c].astype("boolean")
        elif c in _FLOAT_COLUMNS:
            df[c] = df[c].astype("float64")
        else:
            df[c] = df[c].astype(object).where(df[c].notna(), None)
    df = df.sort_values(list(SORT_KEYS[name]), na_position="first", kind="mergesort").reset_index(drop=True)
    return df
