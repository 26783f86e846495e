"""The service analysis from Parquet (engines) agrees with the service check on the same run;
the latency and throughput pictures of one run."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.analysis import pandas_engine, report, service_plots
from harness.checkers.service import analyse_service
from harness.scenario.model import Scenario

pytestmark = pytest.mark.unit
SC = Scenario(id="X", name="x", checks=("service",))


@pytest.mark.parametrize("which", ["healed", "open", "wide"])
def test_engine_windows_match_the_check(service_runs, which):
    run_dir, history = service_runs[which]
    a = analyse_service(SC, history)
    s = pandas_engine.analyze([run_dir])
    sw = s["service_windows"].set_index("window")
    assert list(sw.index) == [w for w in ("after", "before", "during") if w in a.pooled]
    for w, st in a.pooled.items():
        r = sw.loc[w]
        assert (r["ops"], r["ok"], r["failed"]) == (st["n"], st["ok"], st["failed"])
        assert r["per_s"] == pytest.approx(st["per_s"], rel=1e-12)
        assert (r["end_ns"] - r["start_ns"]) / 1e6 == pytest.approx(st["span_ms"])
    lat = s["service_latency"].set_index("window")
    for w, st in a.pooled.items():
        assert lat.loc[w, "p50"] == st["p50_ms"] and lat.loc[w, "p99"] == st["p99_ms"]
    # the latency table holds the run-level rows of the service metrics, per_partition the rest
    table = s["latency"].set_index("metric")
    assert table.loc["produce_before_p50_ms", "count"] == 1
    assert table.loc["produce_before_p50_ms", "p50"] == a.pooled["before"]["p50_ms"]
    pp = s["per_partition"]
    assert len(pp[pp["metric"] == "produce_before_p50_ms"]) == len(a.partitions)


def test_healed_run_has_an_after_window_that_starts_at_the_heal(service_runs):
    run_dir, history = service_runs["healed"]
    sw = pandas_engine.analyze([run_dir])["service_windows"].set_index("window")
    fault_ns = history.faults()[0].ts_ns
    assert sw.loc["during", "start_ns"] == fault_ns
    assert sw.loc["after", "start_ns"] == fault_ns + 4000 * 1_000_000   # the heal at 9 s; the restart ended at 7 s


def test_latency_and_throughput_pictures(service_runs, tmp_path):
    run_dir, _ = service_runs["healed"]
    lat = service_plots.plot_latency(run_dir, tmp_path)
    thr = service_plots.plot_throughput(run_dir, tmp_path)
    assert lat.name == "latency_svc-healed.png" and thr.name == "throughput_svc-healed.png"
    assert lat.stat().st_size > 20000 and thr.stat().st_size > 10000
    d = service_plots.run_data(run_dir)
    assert [f["id"] for f in d["faults"]] == ["f0", "f1"] and d["faults"][1]["instant"]
    assert d["faults"][0]["start"] == 0.0 and d["faults"][0]["end"] == 4.0
    assert service_plots._panels(d) == [("t1-0", ["t1-0"]), ("t1-1", ["t1-1"])]
    title = service_plots._panel_title("t1-0", ["t1-0"], d)
    assert title.startswith("t1-0 · in f0,f1's domain · recovered") and title.endswith("true")
    info = d["ops"][d["ops"]["outcome"] == "info"]
    assert len(info) == 20 and (info["name"] == "t1-0").all()


def test_many_partitions_are_drawn_by_fault_domain(service_runs, tmp_path):
    run_dir, _ = service_runs["wide"]
    d = service_plots.run_data(run_dir)
    panels = service_plots._panels(d)
    # t1-1 has its broker-1 replica on d2; t1-2… are not placed by the metadata: counted as inside
    assert panels == [("13 partitions in a fault's domain", ["t1-0"] + [f"t1-{i}" for i in range(2, 14)]),
                      ("1 partition outside every fault", ["t1-1"])]
    assert service_plots.plot_latency(run_dir, tmp_path).stat().st_size > 20000


def test_report_puts_service_first(service_runs, tmp_path):
    run_dir, _ = service_runs["healed"]
    s = pandas_engine.analyze([run_dir])
    written = report.write_report(s, tmp_path)
    md = written["report.md"].read_text()
    order = [md.index(x) for x in ("## Service per scenario", "## Produce latency of every acked op",
                                   "## Latency and throughput over time", "![latency_svc-healed]",
                                   "## Latency per scenario", "## Plots", "![timeline_svc-healed]")]
    assert order == sorted(order)
    svc = report.service_table(s)
    assert svc["metric"].tolist()[:2] == ["produce_before_p50_ms", "produce_before_p99_ms"]
    assert isinstance(pd.read_parquet(tmp_path / "summary" / "service_latency.parquet"), pd.DataFrame)
