"""The Spark job: same numbers as pandas (bit for bit), Spark's percentile = our definition,
the CLI with --engine spark, and the standalone (spark-submit-able) script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from harness.cli import jbodlab
from harness.results import tables as rio
from harness.analysis import model as m
from harness.analysis import spark_engine, synth
from harness.analysis.synth import ScenarioSpec

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mixed_runs(grid_runs, tmp_path_factory, write_hand_run, service_runs):
    root = tmp_path_factory.mktemp("mixed")
    synth.generate(root / "bg", [ScenarioSpec("S10-flaky", backends=("fuse", "dm"), runs=3, background_events=2000)],
                   seed=5)
    write_hand_run(root)
    recorded = [d for d, _ in service_runs.values()]   # service rows, instant and never-healed faults
    return rio.find_run_dirs([grid_runs[0], root / "bg", root / "hand", root / "soak", *recorded])


def test_spark_equals_pandas_exactly(spark, mixed_runs):
    from harness.analysis import pandas_engine

    p = pandas_engine.analyze(mixed_runs)
    s = spark_engine.analyze(mixed_runs, spark=spark)
    assert s.engine == "spark" and s.runs == p.runs == len(mixed_runs)
    for name in m.SUMMARY_TABLES:
        assert not p[name].empty, name
        pd.testing.assert_frame_equal(p[name], s[name], check_exact=True, obj=name)
    pd.testing.assert_frame_equal(
        p.metric_values.sort_values(["scenario", "metric", "backend", "config", "value"]).reset_index(drop=True),
        s.metric_values.sort_values(["scenario", "metric", "backend", "config", "value"]).reset_index(drop=True),
        check_dtype=False)


def test_spark_grid_percentiles(spark, grid_runs):
    s = spark_engine.analyze(grid_runs[2], spark=spark)
    lat = s["latency"]
    r = lat[(lat["metric"] == "detect_ms") & (lat["scenario"] == "S1-leader") & (lat["backend"] == "dm")].iloc[0]
    assert (r["count"], r["p50"], r["p90"], r["p99"]) == (21, pytest.approx(60.0), pytest.approx(100.0),
                                                            pytest.approx(109.0))
    ta = s["timeout_accuracy"]
    assert ta["p50"].tolist() == pytest.approx([100.0, 100.0], abs=1e-6)


def test_spark_percentile_is_our_definition(spark):
    rng = np.random.default_rng(9)
    rows, groups = [], {}
    for g in range(200):
        vals = rng.lognormal(3, 1.2, int(rng.integers(1, 60)))
        groups[g] = np.sort(vals)
        rows += [(g, float(v)) for v in vals]
    df = spark.createDataFrame(rows, "g int, v double")
    got = {r.g: r.q for r in df.groupBy("g").agg(F.expr("percentile(v, array(0.5, 0.9, 0.99))").alias("q")).collect()}
    for g, x in groups.items():
        assert got[g] == [m.percentile_sorted(x, p) for p in m.PERCENTILES]  # bit-exact


def test_cli_spark_engine(spark, grid_runs, tmp_path, capsys):
    rc = jbodlab.main(["analyze", str(grid_runs[0]), "--engine", "spark", "--out", str(tmp_path), "--no-plots"])
    assert rc == 0 and "engine spark" in capsys.readouterr().out
    lat = pd.read_parquet(tmp_path / "summary" / "latency.parquet")
    assert len(lat) > 0


def test_spark_submit_style_script(grid_runs, tmp_path):
    """`spark-submit harness/analysis/spark_submit.py …` runs the job as a plain script (own JVM)."""
    run = grid_runs[2][0]
    out = tmp_path / "o"
    proc = subprocess.run([sys.executable, str(REPO / "harness/analysis/spark_submit.py"), str(run),
                           "--master", "local[1]", "--out", str(out), "--no-plots"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "engine spark" in proc.stdout
    assert (out / "summary" / "latency.parquet").is_file()
