"""The pandas implementation of the analysis: for small local result sets (same numbers as Spark).

Definitions shared with ``spark_engine`` (keep the two in step; tests compare them):

* fault window: per (run, fault_id): ``start`` = first ``fault_injected``, ``end`` = first
  ``fault_healed`` at or after start, else the run's last event (``healed`` = false).
  A null fault_id is treated as the empty string (one unnamed fault per run).
* unavailability per window × op kind × (topic, partition) with client ops of that kind in
  that run (``model.op_kind``: produce, consume, group-consume; the drain's ops are not
  service and take no part):
  ``last_ok_ns`` = latest ok completion ≤ start, ``first_ok_ns`` = earliest ok completion > start,
  ``unavailable_ms`` = (first − last)/1e6 (null if either is missing; ``recovered`` = first exists);
  ``longest_gap_ms`` = the longest gap between consecutive ok completions of that kind on that
  partition that overlaps [start, end] (prev < end and next > start); ``failed_ops`` = ops of
  that kind with outcome ``fail`` invoked in [start, end).
* event latency: node events (source ``node``) with start ≤ ts < end: first occurrence per
  (run, fault, node, event), delay = (ts − start)/1e6 ms.
* timeout accuracy: ``failure_timeout_shutdown_ms − log_dir_failure_timeout_ms`` per row.
* latency / CDF inputs: every metric row, except the per-partition rows of the metrics that also
  have a run-level row (``model.RUN_LEVEL_METRICS``: the service metrics).
* service windows per run (``model`` comment): before / during / after, with the produce ops
  invoked in each, the acked completions per second, and ``service_latency`` = the stats of the
  per-op latency (ok produces, ``(complete − invoke)/1e6`` ms) pooled per scenario × backend ×
  window over every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.results import tables as rio
from harness.analysis import model as m


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype()}.get)


def load(run_dirs: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    runs = rio.read_runs(run_dirs, tables=("events", "client_ops", "metrics", "checks", "resources"))
    frames = {name: _to_pandas(t) for name, t in runs.tables.items()}
    info = pd.DataFrame({"run_id": [i.run_id for i in runs.infos],
                         "backend": [i.fault_backend for i in runs.infos]})
    return frames, info


def _grouped_stats(df: pd.DataFrame, keys: Sequence[str], value: str) -> pd.DataFrame:
    cols = list(keys) + list(m.STATS)
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, group in df.groupby(list(keys), dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        stats = m.stats_of(group[value].to_numpy(dtype=np.float64, na_value=np.nan))
        if stats["count"]:   # a group without one value has nothing to summarise (Spark drops it too)
            rows.append(dict(zip(keys, key), **stats))
    return pd.DataFrame(rows, columns=cols)


def analyze(run_dirs: Sequence[Path]) -> m.Summary:
    frames, info = load(run_dirs)
    metrics, events, ops = frames["metrics"], frames["events"], frames["client_ops"]
    tables: dict[str, pd.DataFrame] = {}
    run_level = run_metrics(metrics)
    tables["latency"] = _grouped_stats(run_level, m.LATENCY_KEYS, "value")
    tables["per_partition"] = _grouped_stats(metrics[metrics["partition"].notna()], m.PER_PARTITION_KEYS, "value")
    to = metrics[(metrics["metric"] == "failure_timeout_shutdown_ms") & metrics["log_dir_failure_timeout_ms"].notna()].copy()
    to["error_ms"] = to["value"].astype("float64") - to["log_dir_failure_timeout_ms"].astype("float64")
    tables["timeout_accuracy"] = _grouped_stats(to, m.TIMEOUT_KEYS, "error_ms")
    windows = fault_windows(events, info)
    tables["fault_windows"] = windows
    unavail = unavailability(ops, windows)
    tables["unavailability"] = unavail
    long = pd.concat([unavail.assign(metric="unavailable_ms", value=unavail["unavailable_ms"]),
                      unavail.assign(metric="longest_gap_ms", value=unavail["longest_gap_ms"]),
                      unavail.assign(metric="failed_ops", value=unavail["failed_ops"].astype("float64"))])
    tables["unavailability_summary"] = _grouped_stats(long, m.UNAVAIL_SUMMARY_KEYS, "value")
    tables["event_latency"] = _grouped_stats(event_delays(events, windows), m.EVENT_LATENCY_KEYS, "delay_ms")
    checks = frames["checks"]
    tables["checks_summary"] = (checks.groupby(list(m.CHECKS_KEYS), as_index=False)["run_id"].nunique()
                                .rename(columns={"run_id": "runs"}))
    res = frames["resources"].merge(info, on="run_id", how="left")
    long_res = pd.concat([pd.DataFrame({"scenario": res["scenario"], "backend": res["backend"],
                                        "resource": m.RESOURCE_NAMES[c],
                                        "value": res[c].astype("float64") * scale})
                          for c, scale in m.RESOURCE_COLUMNS.items()]) if not res.empty else pd.DataFrame(
        columns=["scenario", "backend", "resource", "value"])
    tables["resources_summary"] = _grouped_stats(long_res, m.RESOURCE_KEYS, "value")
    sw = service_windows(ops, events, info)
    tables["service_windows"] = sw
    tables["service_latency"] = _grouped_stats(service_op_latency(ops, sw), m.SERVICE_LATENCY_KEYS, "latency_ms")
    tables = {name: m.normalize(name, df) for name, df in tables.items()}
    values = run_level.loc[:, ["scenario", "metric", "backend", "config", "value"]].reset_index(drop=True)
    return m.Summary(tables=tables, metric_values=values, engine="pandas", runs=len(info), run_dirs=list(run_dirs))


def fault_windows(events: pd.DataFrame, info: pd.DataFrame) -> pd.DataFrame:
    cols = list(m.FAULT_WINDOW_COLUMNS)
    ev = events.assign(fid=events["fault_id"].fillna(""))
    starts = ev[ev["event"] == m.FAULT_START]
    if starts.empty:
        return pd.DataFrame(columns=cols)
    w = starts.groupby(["run_id", "scenario", "fid"], as_index=False).agg(
        start_ns=("ts_ns", "min"), fault_kind=("fault_kind", "min"))
    heals = ev[ev["event"] == m.FAULT_END][["run_id", "fid", "ts_ns"]].merge(w[["run_id", "fid", "start_ns"]])
    heals = heals[heals["ts_ns"] >= heals["start_ns"]].groupby(["run_id", "fid"], as_index=False)["ts_ns"].min()
    w = w.merge(heals.rename(columns={"ts_ns": "heal_ns"}), how="left", on=["run_id", "fid"])
    last = events.groupby("run_id", as_index=False)["ts_ns"].max().rename(columns={"ts_ns": "last_ns"})
    w = w.merge(last, on="run_id", how="left").merge(info, on="run_id", how="left")
    w["healed"] = w["heal_ns"].notna()
    w["end_ns"] = w["heal_ns"].fillna(w["last_ns"]).astype("Int64")
    w["duration_ms"] = (w["end_ns"] - w["start_ns"]).astype("float64") / 1e6
    w["fault_id"] = w["fid"]
    return w[cols]


def unavailability(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    cols = list(m.UNAVAIL_COLUMNS)
    if windows.empty or ops.empty:
        return pd.DataFrame(columns=cols)
    client = ops["client_id"] if "client_id" in ops.columns else pd.Series([None] * len(ops), index=ops.index)
    kinds = [m.op_kind(o, c if isinstance(c, str) else None) for o, c in zip(ops["op"], client)]
    ops = ops.assign(topic=ops["topic"].fillna(""), op_kind=kinds)
    ops = ops[ops["op_kind"].notna()]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    pkey = ["run_id", "op_kind", "topic", "partition"]
    parts = ops[pkey].drop_duplicates()
    w = windows[["run_id", "scenario", "backend", "fault_id", "start_ns", "end_ns"]].merge(parts, on="run_id")
    ok = ops[(ops["outcome"] == "ok") & ops["ts_complete_ns"].notna()][[*pkey, "ts_complete_ns"]]
    ok = ok.sort_values([*pkey, "ts_complete_ns"], kind="mergesort")
    ok["prev_ns"] = ok.groupby(pkey, dropna=False)["ts_complete_ns"].shift(1)
    j = w.merge(ok, on=pkey, how="left")
    key = ["run_id", "fault_id", "op_kind", "topic", "partition"]
    before = j[j["ts_complete_ns"] <= j["start_ns"]].groupby(key, dropna=False)["ts_complete_ns"].max().rename("last_ok_ns")
    after = j[j["ts_complete_ns"] > j["start_ns"]].groupby(key, dropna=False)["ts_complete_ns"].min().rename("first_ok_ns")
    ov = j[j["prev_ns"].notna() & (j["prev_ns"] < j["end_ns"]) & (j["ts_complete_ns"] > j["start_ns"])]
    gap = ((ov["ts_complete_ns"] - ov["prev_ns"]).astype("float64") / 1e6).groupby(
        [ov[k] for k in key], dropna=False).max().rename("longest_gap_ms")
    fails = ops[ops["outcome"] == "fail"][[*pkey, "ts_invoke_ns"]].merge(
        w[["run_id", "fault_id", "op_kind", "topic", "partition", "start_ns", "end_ns"]], on=pkey)
    fails = fails[(fails["ts_invoke_ns"] >= fails["start_ns"]) & (fails["ts_invoke_ns"] < fails["end_ns"])]
    nfail = fails.groupby(key, dropna=False).size().rename("failed_ops")
    out = w.set_index(key).join([before, after, gap, nfail]).reset_index()
    out["failed_ops"] = out["failed_ops"].fillna(0).astype("Int64")
    out["unavailable_ms"] = (out["first_ok_ns"] - out["last_ok_ns"]).astype("float64") / 1e6
    out["recovered"] = out["first_ok_ns"].notna()
    return out[cols]


def event_delays(events: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    cols = ["scenario", "backend", "event", "delay_ms"]
    if windows.empty:
        return pd.DataFrame(columns=cols)
    node = events[events["source"] == "node"][["run_id", "node_id", "event", "ts_ns"]]
    j = node.merge(windows[["run_id", "scenario", "backend", "fault_id", "start_ns", "end_ns"]], on="run_id")
    j = j[(j["ts_ns"] >= j["start_ns"]) & (j["ts_ns"] < j["end_ns"])]
    first = j.groupby(["run_id", "scenario", "backend", "fault_id", "node_id", "event", "start_ns"],
                      as_index=False, dropna=False)["ts_ns"].min()
    first["delay_ms"] = (first["ts_ns"] - first["start_ns"]).astype("float64") / 1e6
    return first[cols]


def run_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics[~(metrics["metric"].isin(m.RUN_LEVEL_METRICS) & metrics["partition"].notna())]


def service_windows(ops: pd.DataFrame, events: pd.DataFrame, info: pd.DataFrame) -> pd.DataFrame:
    cols = list(m.SERVICE_WINDOW_COLUMNS)
    # the workload's produces (an admin action's own records are not a service: the checker's rule)
    prod = ops[(ops["op"] == "produce") & ~ops["client_id"].fillna("").str.startswith(m.ADMIN_PROCESS_PREFIX)]
    if prod.empty:
        return pd.DataFrame(columns=cols)
    runs = prod.groupby("run_id", as_index=False).agg(first_ns=("ts_invoke_ns", "min"),
                                                      last_ns=("ts_invoke_ns", "max"))
    runs["end_ns"] = runs["last_ns"] + 1
    ev = events.assign(fid=events["fault_id"].fillna(""))
    starts = ev[ev["event"] == m.FAULT_START].groupby(["run_id", "fid"], as_index=False).agg(
        start_ns=("ts_ns", "min"), fault_kind=("fault_kind", "min"))
    heals = ev[ev["event"] == m.FAULT_END][["run_id", "fid", "ts_ns"]].merge(starts[["run_id", "fid", "start_ns"]])
    heals = heals[heals["ts_ns"] >= heals["start_ns"]].groupby(["run_id", "fid"], as_index=False)["ts_ns"].min()
    f = starts.merge(heals.rename(columns={"ts_ns": "heal_ns"}), how="left", on=["run_id", "fid"])
    f["fend"] = f["heal_ns"].astype("Int64").where(f["heal_ns"].notna(),
                                                   f["start_ns"].where(f["fault_kind"].isin(m.INSTANT_FAULT_KINDS)))
    per_run = f.groupby("run_id", as_index=False).agg(fault_ns=("start_ns", "min"), dist_ns=("fend", "max"),
                                                      open_=("fend", lambda x: bool(x.isna().any())))
    r = runs.merge(per_run, on="run_id", how="left").merge(info, on="run_id", how="left")
    r = r.merge(prod[["run_id", "scenario"]].drop_duplicates("run_id"), on="run_id", how="left")
    has_fault = r["fault_ns"].notna()
    dist = r["dist_ns"].astype("Int64").where(has_fault & ~r["open_"].fillna(True).astype(bool))
    end = r["end_ns"].astype("Int64")
    fault = r["fault_ns"].astype("Int64")
    parts = [r.assign(window="before", a=r["first_ns"].astype("Int64") + m.WARMUP_MS * 1_000_000,
                      b=fault.where(has_fault, end)),
             r[has_fault].assign(window="during", a=fault[has_fault],
                                 b=np.minimum(dist[has_fault].fillna(end[has_fault]), end[has_fault])),
             r[dist.notna()].assign(window="after", a=np.maximum(dist[dist.notna()], fault[dist.notna()]),
                                    b=end[dist.notna()])]
    w = pd.concat(parts, ignore_index=True)
    w = w[w["a"] < w["b"]][["run_id", "scenario", "backend", "window", "a", "b"]]
    j = prod[["run_id", "outcome", "ts_invoke_ns", "ts_complete_ns"]].merge(w, on="run_id")
    inside = j[(j["ts_invoke_ns"] >= j["a"]) & (j["ts_invoke_ns"] < j["b"])]
    key = ["run_id", "window"]
    n = inside.groupby(key).size().rename("ops")
    ok = inside[inside["outcome"] == "ok"].groupby(key).size().rename("ok")
    acked = j[(j["outcome"] == "ok") & j["ts_complete_ns"].notna() & (j["ts_complete_ns"] >= j["a"])
              & (j["ts_complete_ns"] < j["b"])].groupby(key).size().rename("acked")
    out = w.set_index(key).join([n, ok, acked]).reset_index()
    for c in ("ops", "ok", "acked"):
        out[c] = out[c].fillna(0).astype("Int64")
    out["failed"] = out["ops"] - out["ok"]
    out["per_s"] = out["acked"].astype("float64") / ((out["b"] - out["a"]).astype("float64") / 1e9)
    out = out.rename(columns={"a": "start_ns", "b": "end_ns"})
    return out[cols]


def service_op_latency(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    cols = ["scenario", "backend", "window", "latency_ms"]
    if windows.empty:
        return pd.DataFrame(columns=cols)
    ok = ops[(ops["op"] == "produce") & (ops["outcome"] == "ok") & ops["ts_complete_ns"].notna()]
    j = ok[["run_id", "ts_invoke_ns", "ts_complete_ns"]].merge(
        windows[["run_id", "scenario", "backend", "window", "start_ns", "end_ns"]], on="run_id")
    j = j[(j["ts_invoke_ns"] >= j["start_ns"]) & (j["ts_invoke_ns"] < j["end_ns"])]
    j = j.assign(latency_ms=(j["ts_complete_ns"] - j["ts_invoke_ns"]).astype("float64") / 1e6)
    return j[cols]
