"""Regression gate verdicts, the `jbodlab analyze` command (exit codes, files) and the report."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.cli import jbodlab
from harness.results import tables as rio
from harness.analysis import compare, pandas_engine, report, synth
from harness.analysis.synth import Dist, ScenarioSpec

pytestmark = pytest.mark.unit


def _lat(rows):
    base = dict(scenario="S1", backend="fuse", config="default", count=10, min=1.0, p90=0.0)
    return pd.DataFrame([dict(base, **r) for r in rows])


def test_gate_verdicts():
    before = _lat([
        dict(metric="detect_ms", p50=100.0, p99=200.0, max=210.0),
        dict(metric="report_ms", p50=100.0, p99=200.0, max=210.0),
        dict(metric="isr_shrink_ms", p50=100.0, p99=200.0, max=210.0),
        dict(metric="fencing_ms", p50=0.5, p99=0.6, max=0.6),
        dict(metric="acked_lost", p50=0.0, p99=0.0, max=0.0),
        dict(metric="leader_failover_ms", p50=10.0, p99=10.0, max=10.0),
    ])
    after = _lat([
        dict(metric="detect_ms", p50=109.0, p99=219.0, max=230.0),  # +9 %: within 10 %
        dict(metric="report_ms", p50=100.0, p99=260.0, max=270.0),  # p99 +30 %: regression
        dict(metric="isr_shrink_ms", p50=50.0, p99=100.0, max=110.0),  # improvement
        dict(metric="fencing_ms", p50=0.9, p99=1.2, max=1.2),  # ×2 but < 1 ms floor: ok
        dict(metric="acked_lost", p50=0.0, p99=0.0, max=1.0),  # one lost record: regression
        dict(metric="client_unavailable_ms", p50=1.0, p99=1.0, max=1.0),  # new group
    ])
    c = compare.compare(before, after, threshold=0.10, min_delta_ms=1.0).set_index("metric")
    assert c.loc["detect_ms", "verdict"] == "ok"
    assert c.loc["report_ms", "verdict"] == "regression" and "p99" in c.loc["report_ms", "reason"]
    assert c.loc["report_ms", "p99_ratio"] == pytest.approx(1.3)
    assert c.loc["isr_shrink_ms", "verdict"] == "improvement"
    assert c.loc["fencing_ms", "verdict"] == "ok"
    assert c.loc["acked_lost", "verdict"] == "regression"
    assert c.loc["client_unavailable_ms", "verdict"] == "new"
    assert c.loc["leader_failover_ms", "verdict"] == "missing"
    assert compare.has_regression(c.reset_index())
    strict = compare.compare(before, after, threshold=0.05).set_index("metric")
    assert strict.loc["detect_ms", "verdict"] == "regression"  # +9 % > 5 %
    missing = compare.compare(before, after, fail_on_missing=True).set_index("metric")
    assert missing.loc["leader_failover_ms", "verdict"] == "regression"
    rates = compare.compare(_lat([dict(metric="produce_during_per_s", p50=200.0, p99=210.0, max=220.0),
                                  dict(metric="latency_degradation_ratio", p50=1.2, p99=1.5, max=1.5)]),
                            _lat([dict(metric="produce_during_per_s", p50=150.0, p99=210.0, max=220.0),
                                  dict(metric="latency_degradation_ratio", p50=1.2, p99=1.9, max=1.9)])
                            ).set_index("metric")
    assert rates.loc["produce_during_per_s", "verdict"] == "regression"      # fewer acks per second
    assert "p50 200.0 → 150.0/s" in rates.loc["produce_during_per_s", "reason"]
    assert rates.loc["latency_degradation_ratio", "verdict"] == "regression"  # no ms floor for a ratio
    busier = compare.compare(_lat([dict(metric="host_cpu_busy_ratio", p50=0.5, p99=0.6, max=0.6)]),
                             _lat([dict(metric="host_cpu_busy_ratio", p50=1.0, p99=1.0, max=1.0)])).iloc[0]
    assert busier["verdict"] == "ok" and "host load" in busier["reason"]   # the machine, not the build
    faster = compare.compare(_lat([dict(metric="produce_during_per_s", p50=100.0, p99=100.0, max=100.0)]),
                             _lat([dict(metric="produce_during_per_s", p50=150.0, p99=150.0, max=150.0)]))
    assert faster["verdict"].tolist() == ["improvement"]
    same = compare.compare(before, before)
    assert set(same["verdict"]) == {"ok"} and not compare.has_regression(same)
    with pytest.raises(ValueError, match="threshold"):
        compare.compare(before, after, threshold=-1)


@pytest.fixture(scope="module")
def before_after(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    spec = ScenarioSpec("S2", runs=15, partitions=2, dists={"detect_ms": Dist("grid", 20, 40)})
    synth.generate(root / "before", [spec], seed=1)
    synth.generate(root / "same", [spec], seed=1)
    slower = ScenarioSpec("S2", runs=15, partitions=2, dists={"detect_ms": Dist("grid", 30, 60)})  # ×1.5
    synth.generate(root / "after", [slower], seed=1)
    return root


def test_cli_gate_exit_codes(before_after, tmp_path, capsys):
    root = before_after
    rc = jbodlab.main(["analyze", str(root / "after"), "--engine", "pandas", "--out", str(tmp_path / "a"),
                       "--baseline", str(root / "before"), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 1 and "regression" in out and "detect_ms" in out
    comp = pd.read_parquet(tmp_path / "a" / "summary" / "comparison.parquet").set_index("metric")
    assert comp.loc["detect_ms", "verdict"] == "regression"
    assert comp.loc["detect_ms", "p50_ratio"] == pytest.approx(45 / 30)
    # same distribution and seed: passes; baseline given as an earlier analysis' --out dir
    assert jbodlab.main(["analyze", str(root / "before"), "--engine", "pandas", "--out", str(tmp_path / "b"),
                         "--no-plots"]) == 0
    rc = jbodlab.main(["analyze", str(root / "same"), "--engine", "pandas", "--out", str(tmp_path / "c"),
                       "--baseline", str(tmp_path / "b"), "--no-plots"])
    assert rc == 0
    meta = json.loads((tmp_path / "c" / "analysis.json").read_text())
    assert meta["verdict"] == "pass" and meta["baseline_kind"] == "summary"


def test_cli_bad_input_exit_2(tmp_path, capsys):
    assert jbodlab.main(["analyze", str(tmp_path / "nope"), "--engine", "pandas", "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert jbodlab.main(["analyze", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no run.json" in capsys.readouterr().err


def test_report_numbers_match_printed_table(before_after, tmp_path, capsys):
    out = tmp_path / "rep"
    run_id = "S2-fuse-3000-0003-s1"
    rc = jbodlab.main(["analyze", str(before_after / "before"), "--engine", "pandas", "--out", str(out),
                       "--timeline-run", run_id])
    printed = capsys.readouterr().out
    assert rc == 0
    lat = pd.read_parquet(out / "summary" / "latency.parquet")
    det = lat[lat["metric"] == "detect_ms"].iloc[0]
    assert det["p50"] == pytest.approx(30.0) and det["p99"] == pytest.approx(39.8)
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (printed, md, page):
        assert "30.000" in text and "39.800" in text  # same formatted numbers everywhere
    assert "| S2 | detect_ms | fuse |" in md
    plots = sorted(p.name for p in (out / "plots").iterdir())
    assert f"timeline_{run_id}.png" in plots and "cdf_detect_ms.png" in plots
    assert f"latency_{run_id}.png" in plots and f"throughput_{run_id}.png" in plots
    assert all((out / "plots" / p).stat().st_size > 5000 for p in plots)
    assert page.count("data:image/png;base64,") == len(plots)
    data = report.timeline_data(before_after / "before" / run_id)
    detect = pandas_engine.analyze([before_after / "before" / run_id])["latency"]
    assert data["milestones"]["detected (dir_offline)"] == detect[detect["metric"] == "detect_ms"]["p50"].iloc[0]
    assert data["milestones"]["fault injected"] == 0.0
    assert 0 < data["milestones"]["clients recovered (last partition)"] < data["heal_ms"]
    # the nodes' periodic request_metrics are in the run's events but not on the timeline
    events = rio.read_runs([before_after / "before" / run_id], tables=("events",))["events"]
    assert "request_metrics" in set(events.column("event").to_pylist())
    assert "request_metrics" not in set(data["node_events"]["event"]) and "dir_offline" in set(data["node_events"]["event"])


def test_timeline_run_must_exist(before_after, tmp_path, capsys):
    rc = jbodlab.main(["analyze", str(before_after / "before"), "--engine", "pandas", "--out", str(tmp_path),
                       "--timeline-run", "nope"])
    assert rc == 2 and "--timeline-run" in capsys.readouterr().err


def test_auto_engine_by_input_rows(before_after, monkeypatch):
    from harness.analysis import cli as analyze_cli

    dirs = rio.find_run_dirs([before_after / "before"])
    assert analyze_cli.choose_engine("auto", dirs) == "pandas"
    monkeypatch.setattr(analyze_cli, "AUTO_SPARK_ROWS", 100)
    assert analyze_cli.choose_engine("auto", dirs) == "spark"
    assert analyze_cli.choose_engine("pandas", dirs) == "pandas"


def test_master_with_pandas_is_refused(before_after, tmp_path, capsys):
    rc = jbodlab.main(["analyze", str(before_after / "before"), "--engine", "pandas", "--master", "local[1]",
                       "--out", str(tmp_path)])
    assert rc == 2 and "--master needs --engine spark" in capsys.readouterr().err
