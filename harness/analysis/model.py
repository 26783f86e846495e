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

PERCENTILES = (0.5, 0.9, 0.99)
STATS = ("count", "min", "p50", "p90", "p99", "max")

# table -> (key columns, value column the stats are computed over)
LATENCY_KEYS = ("scenario", "metric", "backend", "config")
PER_PARTITION_KEYS = ("scenario", "metric", "backend", "config", "topic", "partition")
TIMEOUT_KEYS = ("scenario", "backend", "config", "log_dir_failure_timeout_ms")
UNAVAIL_SUMMARY_KEYS = ("scenario", "metric", "backend")
EVENT_LATENCY_KEYS = ("scenario", "backend", "event")

FAULT_WINDOW_COLUMNS = ("run_id", "scenario", "backend", "fault_id", "fault_kind", "start_ns", "end_ns",
                        "duration_ms", "healed")
UNAVAIL_COLUMNS = ("run_id", "scenario", "backend", "fault_id", "topic", "partition", "last_ok_ns",
                   "first_ok_ns", "unavailable_ms", "longest_gap_ms", "failed_ops", "recovered")

SUMMARY_TABLES: dict[str, tuple[str, ...]] = {
    "latency": LATENCY_KEYS + STATS,
    "per_partition": PER_PARTITION_KEYS + STATS,
    "timeout_accuracy": TIMEOUT_KEYS + STATS,
    "fault_windows": FAULT_WINDOW_COLUMNS,
    "unavailability": UNAVAIL_COLUMNS,
    "unavailability_summary": UNAVAIL_SUMMARY_KEYS + STATS,
    "event_latency": EVENT_LATENCY_KEYS + STATS,
}
SORT_KEYS: dict[str, tuple[str, ...]] = {
    "latency": LATENCY_KEYS,
    "per_partition": PER_PARTITION_KEYS,
    "timeout_accuracy": TIMEOUT_KEYS,
    "fault_windows": ("run_id", "fault_id"),
    "unavailability": ("run_id", "fault_id", "topic", "partition"),
    "unavailability_summary": UNAVAIL_SUMMARY_KEYS,
    "event_latency": EVENT_LATENCY_KEYS,
}
_INT_COLUMNS = {"count", "partition", "log_dir_failure_timeout_ms", "start_ns", "end_ns", "last_ok_ns",
                "first_ok_ns", "failed_ops"}
_BOOL_COLUMNS = {"healed", "recovered"}
_FLOAT_COLUMNS = {"min", "p50", "p90", "p99", "max", "duration_ms", "unavailable_ms", "longest_gap_ms"}

# fault-window events written by the harness
FAULT_START = "fault_injected"
FAULT_END = "fault_healed"


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
