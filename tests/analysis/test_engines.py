"""The analysis on runs with known distributions: percentiles, joins, timeout accuracy (pandas)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.results import tables as rio
from harness.results import schema as rs
from harness.analysis import model as m
from harness.analysis import pandas_engine

pytestmark = pytest.mark.unit


def _row(df, **keys):
    sel = df
    for k, v in keys.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"expected one row for {keys}, got {len(sel)}"
    return sel.iloc[0]


def test_percentile_rule_matches_numpy_linear():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 10, 101, 997):
        x = np.sort(rng.lognormal(3, 1, n))
        for p in m.PERCENTILES:
            assert m.percentile_sorted(x, p) == pytest.approx(float(np.percentile(x, p * 100)), rel=1e-12)
    assert m.percentile_sorted(np.array([1.0, 2.0, 3.0, 4.0]), 0.5) == 2.5
    assert m.stats_of([None, float("nan")])["count"] == 0


@pytest.mark.parametrize("backend", ["fuse", "dm"])
def test_grid_detect_percentiles_are_exact(pandas_summary, backend):
    r = _row(pandas_summary["latency"], scenario="S1-leader", metric="detect_ms", backend=backend)
    assert r["count"] == 21
    for stat, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert r[stat] == pytest.approx(10 + 100 * p, abs=1e-9)
    assert (r["min"], r["max"]) == (10.0, 110.0)


def test_every_metric_matches_the_generated_truth(grid_runs, pandas_summary):
    truth = grid_runs[1].metrics
    lat = pandas_summary["latency"]
    assert len(lat) == truth.groupby(list(m.LATENCY_KEYS)).ngroups
    for keys, g in truth.groupby(list(m.LATENCY_KEYS)):
        r = _row(lat, **dict(zip(m.LATENCY_KEYS, keys)))
        x = g["value"].to_numpy(dtype=float)
        assert r["count"] == len(x)
        assert r["p99"] == pytest.approx(np.percentile(x, 99), rel=1e-12)
        assert r["p50"] == pytest.approx(np.median(x), rel=1e-12)
        assert r["max"] == x.max()


def test_timeout_accuracy_per_configured_timeout(pandas_summary):
    ta = pandas_summary["timeout_accuracy"]
    assert sorted(ta["log_dir_failure_timeout_ms"].tolist()) == [3000, 6000]
    for ldft in (3000, 6000):
        r = _row(ta, log_dir_failure_timeout_ms=ldft)
        # error grid −100..300 over 11 runs: q(p) = −100 + 400·p
        assert r["count"] == 11
        assert r["p50"] == pytest.approx(100.0, abs=1e-6)
        assert r["p90"] == pytest.approx(260.0, abs=1e-6)
        assert (r["min"], r["max"]) == (pytest.approx(-100.0, abs=1e-6), pytest.approx(300.0, abs=1e-6))


def test_per_partition_breakdown(pandas_summary):
    pp = pandas_summary["per_partition"]
    isr = pp[(pp["metric"] == "isr_shrink_ms") & (pp["scenario"] == "S1-leader") & (pp["backend"] == "fuse")]
    assert isr["partition"].tolist() == [0, 1, 2] and set(isr["count"]) == {21}
    leader = pp[(pp["metric"] == "leader_failover_ms") & (pp["scenario"] == "S1-leader") & (pp["backend"] == "fuse")]
    assert leader["partition"].tolist() == [0, 1]  # only the partitions led by the failed broker


def test_fault_windows_and_unavailability_join_match_truth(grid_runs, pandas_summary):
    truth = grid_runs[1]
    fw = pandas_summary["fault_windows"]
    t = truth.windows.sort_values("run_id").reset_index(drop=True)
    assert fw["start_ns"].tolist() == t["start_ns"].tolist() and fw["end_ns"].tolist() == t["end_ns"].tolist()
    assert fw["healed"].all()
    un = pandas_summary["unavailability"]
    tu = truth.unavailability.sort_values(["run_id", "partition"]).reset_index(drop=True)
    assert len(un) == len(tu)
    assert un["last_ok_ns"].tolist() == tu["last_ok_ns"].tolist()
    assert un["first_ok_ns"].tolist() == tu["first_ok_ns"].tolist()
    expected = ((tu["first_ok_ns"] - tu["last_ok_ns"]) / 1e6).tolist()
    assert un["unavailable_ms"].tolist() == pytest.approx(expected, rel=1e-12)
    assert un["longest_gap_ms"].tolist() == pytest.approx(expected, rel=1e-12)  # the outage is the longest gap
    assert un["recovered"].all() and (un["failed_ops"] > 0).all()
    # the recorder's metric and the join agree
    cu = truth.metrics[truth.metrics["metric"] == "client_unavailable_ms"].sort_values(["run_id", "partition"])
    assert cu["value"].tolist() == pytest.approx(un["unavailable_ms"].tolist(), rel=1e-12)


def test_event_latency_of_dir_offline_equals_detect(pandas_summary):
    ev = pandas_summary["event_latency"]
    lat = pandas_summary["latency"]
    for backend in ("fuse", "dm"):
        e = _row(ev, scenario="S1-leader", backend=backend, event="dir_offline")
        d = _row(lat, scenario="S1-leader", backend=backend, metric="detect_ms")
        assert [e[s] for s in m.STATS] == [d[s] for s in m.STATS]


def test_unhealed_fault_and_unrecovered_partition(tmp_path, write_hand_run):
    run = write_hand_run(tmp_path)
    s = pandas_engine.analyze([run])
    w = s["fault_windows"].iloc[0]
    assert (w["fault_id"], bool(w["healed"]), w["end_ns"], w["duration_ms"]) == ("", False, 3000 * 10**6, 2000.0)
    un = s["unavailability"].set_index("partition")
    assert (un.loc[0, "last_ok_ns"], un.loc[0, "first_ok_ns"]) == (990 * 10**6, 1500 * 10**6)
    assert un.loc[0, "unavailable_ms"] == 510.0 and un.loc[0, "longest_gap_ms"] == 510.0
    assert un.loc[0, "failed_ops"] == 2 and bool(un.loc[0, "recovered"])
    assert not bool(un.loc[1, "recovered"]) and math.isnan(un.loc[1, "unavailable_ms"])
    assert un.loc[1, "failed_ops"] == 1 and math.isnan(un.loc[1, "longest_gap_ms"])
    assert pd.isna(un.loc[2, "last_ok_ns"]) and math.isnan(un.loc[2, "unavailable_ms"])
    assert un.loc[2, "longest_gap_ms"] == 200.0  # gap 1100→1300 overlaps the window
    el = s["event_latency"].set_index("event")
    assert el.loc["dir_offline", "count"] == 1 and el.loc["dir_offline", "p50"] == 40.0
    assert "registered" not in el.index and "halt" not in el.index  # at the window end: excluded


def test_runs_without_faults_or_ops_give_empty_tables(tmp_path):
    rio.write_run_json(tmp_path / "r", rs.RunInfo(run_id="r", scenario="S0", seed=0))
    rio.write_table(tmp_path / "r", "metrics", [dict(run_id="r", scenario="S0", backend="fuse", metric="fencing_ms",
                                                    value=5.0, unit="ms", config="default")])
    s = pandas_engine.analyze([tmp_path / "r"])
    assert s["latency"]["count"].tolist() == [1]
    for name in ("fault_windows", "unavailability", "event_latency", "timeout_accuracy", "per_partition"):
        assert s[name].empty and list(s[name].columns) == list(m.SUMMARY_TABLES[name])


def test_checks_and_resources_summaries(tmp_path, grid_runs, pandas_summary):
    cs = pandas_summary["checks_summary"]
    assert _row(cs, scenario="S1-leader", checker="durability", valid="true")["runs"] == 42
    for i, valid in enumerate(("true", "false", "unknown", "false")):
        run = tmp_path / f"r{i}"
        rio.write_run_json(run, rs.RunInfo(run_id=f"r{i}", scenario="S3", seed=i, fault_backend="dm"))
        rio.write_table(run, "checks", [dict(run_id=f"r{i}", scenario="S3", checker="durability", valid=valid)])
        rio.write_table(run, "resources", [dict(run_id=f"r{i}", scenario="S3", node_id=1, ts_ns=k, cpu_percent=10.0 * k,
                                               rss_bytes=(i + 1) * 1024 * 1024) for k in range(3)])
    s = pandas_engine.analyze(sorted(tmp_path.iterdir()))
    assert s["checks_summary"][["valid", "runs"]].values.tolist() == [["false", 2], ["true", 1], ["unknown", 1]]
    res = s["resources_summary"].set_index("resource")
    assert res.loc["cpu_percent", "count"] == 12 and res.loc["cpu_percent", "p50"] == 10.0
    assert (res.loc["rss_mib", "min"], res.loc["rss_mib", "max"]) == (1.0, 4.0)
    assert set(s["resources_summary"]["backend"]) == {"dm"}


def test_two_faults_in_one_run_are_separate_windows(tmp_path, write_hand_run):
    write_hand_run(tmp_path)
    s = pandas_engine.analyze([tmp_path / "soak"])
    fw = s["fault_windows"]
    assert fw["fault_id"].tolist() == ["a", "b"] and fw["duration_ms"].tolist() == [1000.0, 1000.0]
    assert fw["fault_kind"].tolist() == ["error", "delay(50)"]
    un = s["unavailability"].set_index("fault_id")
    assert un.loc["a", "unavailable_ms"] == 300.0 and un.loc["b", "unavailable_ms"] == 450.0
    # gaps overlapping a [1000, 2000]: 900→1200, 1200→1250, 1250→4950 (3700); b [5000, 6000]: 4950→5400 only
    assert un.loc["a", "longest_gap_ms"] == 3700.0 and un.loc["b", "longest_gap_ms"] == 450.0
    el = s["event_latency"].set_index("event")
    assert el.loc["dir_offline", "count"] == 2
    assert (el.loc["dir_offline", "min"], el.loc["dir_offline", "max"]) == (30.0, 70.0)


def test_metric_without_topic_gets_its_own_partition_row(tmp_path, write_hand_run):
    run = write_hand_run(tmp_path)
    pp = pandas_engine.analyze([run])["per_partition"]
    assert len(pp) == 1 and pp.iloc[0]["topic"] is None and pp.iloc[0]["partition"] == 0
    assert pp.iloc[0]["config"] == "default" and pp.iloc[0]["p50"] == 12.0
