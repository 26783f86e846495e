"""Benchmark: the Spark analysis job over 1M … 10M generated event rows, local mode.

    .venv/bin/python bench/analysis_bench.py [--sizes 1000000,2000000,5000000,10000000]
                                             [--master local[*]] [--data DIR] [--pandas-max 2000000]

Generates the largest size once (synthetic runs of ``--events-per-run`` event rows each, known
distributions, ``harness.analysis.synth``), then times ``spark_engine.analyze`` on the first
N/events-per-run runs for each size N (an untimed warm-up on the smallest size first, then
``--repeat`` timed runs, minimum reported), and the pandas engine up to
``--pandas-max`` rows as a reference (also checking both give identical summaries). Prints a
table and writes results/bench/analysis.json. Wall time only; no assertion on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from harness.results import tables as rio# noqa: E402
from harness.analysis import synth  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,2000000,5000000,10000000")
    ap.add_argument("--events-per-run", type=int, default=50_000)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--data", default="/tmp/jbodlab-analysis-bench")
    ap.add_argument("--pandas-max", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="timed repetitions per size (the minimum is reported)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "analysis.json"))
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    per_run = args.events_per_run
    data = Path(args.data)
    if data.exists():
        shutil.rmtree(data)
    n_runs = -(-sizes[-1] // per_run)
    spec = synth.ScenarioSpec("S1-leader-dir-fails", backends=("fuse", "dm"), runs=-(-n_runs // 2),
                              background_events=per_run - 40)
    t = time.monotonic()
    truth = synth.generate(data, [spec], seed=42)
    gen_s = time.monotonic() - t
    dirs = sorted(rio.find_run_dirs([data]), key=lambda d: (int(d.name.split("-")[-2]), d.name))
    print(f"generated {len(dirs)} runs, {truth.event_rows} event rows, {truth.client_op_rows} client ops "
          f"in {gen_s:.1f} s", flush=True)

    from harness.analysis import pandas_engine, spark_engine

    spark = spark_engine.session(args.master, {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "8"})
    k0 = -(-sizes[0] // per_run)
    spark_engine.analyze(dirs[:k0], spark=spark)  # warm-up (JVM JIT, code generation), untimed
    rows = []
    for size in sizes:
        k = -(-size // per_run)
        subset = dirs[:k]
        events = sum(pq.ParquetFile(f).metadata.num_rows for d in subset for f in (d / "events").rglob("*.parquet"))
        times = []
        for _ in range(max(1, args.repeat)):
            t = time.monotonic()
            s_summary = spark_engine.analyze(subset, spark=spark)
            times.append(round(time.monotonic() - t, 2))
        row = {"event_rows_target": size, "event_rows": events, "runs": k, "spark_wall_s": min(times),
               "spark_wall_s_all": times, "loadavg_1m": round(os.getloadavg()[0], 2)}
        if size <= args.pandas_max:
            t = time.monotonic()
            p_summary = pandas_engine.analyze(subset)
            row["pandas_wall_s"] = round(time.monotonic() - t, 2)
            import pandas as pd

            for name in p_summary.tables:
                pd.testing.assert_frame_equal(p_summary[name], s_summary[name], check_exact=True)
            row["pandas_equals_spark"] = True
        rows.append(row)
        print(json.dumps(row), flush=True)
    spark.stop()
    base = rows[0]
    for r in rows:
        r["size_ratio"] = round(r["event_rows_target"] / base["event_rows_target"], 2)
        r["time_ratio"] = round(r["spark_wall_s"] / base["spark_wall_s"], 2)
        r["rows_per_s"] = int(r["event_rows"] / r["spark_wall_s"])
    result = {
        "benchmark": "analysis", "master": args.master, "events_per_run": per_run,
        "generated_event_rows": truth.event_rows, "generated_client_ops": truth.client_op_rows,
        "generate_s": round(gen_s, 1), "rows": rows,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()},
        "note": "wall time of spark_engine.analyze (read Parquet, all summaries, collect); shared 2-core host "
                "(loadavg_1m: the host's 1-minute load average after each size; other work runs concurrently)",
    }
    print(f"\n{'event rows':>11} {'runs':>5} {'spark s':>8} {'pandas s':>9} {'size×':>6} {'time×':>6} {'rows/s':>9}")
    for r in rows:
        print(f"{r['event_rows']:>11} {r['runs']:>5} {r['spark_wall_s']:>8.2f} "
              f"{r.get('pandas_wall_s', float('nan')):>9.2f} {r['size_ratio']:>6} {r['time_ratio']:>6} {r['rows_per_s']:>9}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    if not args.keep:
        shutil.rmtree(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
