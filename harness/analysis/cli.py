"""``jbodlab analyze RESULTS… [options]``: latency analysis of any number of runs.

RESULTS are run dirs (``results/<run_id>/`` with ``run.json``) or dirs of runs (``results/``).
Writes ``--out`` (summary Parquet, report.md, report.html, plots), prints the latency table.
With ``--baseline`` (runs, or the ``--out`` dir of an earlier analysis) compares p50/p99 per
group and exits 1 on a regression: a CI gate. Exit 2 on bad input (the message names it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

AUTO_SPARK_ROWS = 5_000_000  # auto: Spark when the inputs hold more rows than this (see docs/analysis.md)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="run dirs or dirs of runs (e.g. results/)")
    parser.add_argument("--engine", choices=("auto", "pandas", "spark"), default="auto",
                        help="auto: pandas up to %d input rows (events+client_ops+metrics), else Spark "
                        "(default auto)" % AUTO_SPARK_ROWS)
    parser.add_argument("--master", default=None, help="Spark master URL (default local[*]); implies Spark under auto")
    parser.add_argument("--out", default="results/analysis", help="output dir (default results/analysis)")
    parser.add_argument("--baseline", action="append", default=None, metavar="PATH",
                        help="baseline runs (repeatable), or the --out dir of an earlier analysis: compare and gate")
    parser.add_argument("--threshold", type=float, default=0.10,
                        help="relative p50/p99 increase that counts as a regression (default 0.10)")
    parser.add_argument("--min-delta-ms", type=float, default=1.0,
                        help="absolute increase (ms) below which nothing regresses (default 1.0)")
    parser.add_argument("--fail-on-missing", action="store_true",
                        help="a baseline group absent from the new results is a regression")
    parser.add_argument("--timeline-run", action="append", default=None, metavar="RUN_ID",
                        help="draw the timeline of this run (repeatable; default: first run of each scenario)")
    parser.add_argument("--no-plots", action="store_true", help="skip PNG plots")
    parser.add_argument("--all-tables", action="store_true", help="print every summary table, not only latency")


def choose_engine(engine: str, run_dirs) -> str:
    if engine != "auto":
        return engine
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for d in run_dirs
               for t in ("events", "client_ops", "metrics") for f in (Path(d) / t).glob("scenario=*/*.parquet"))
    return "spark" if rows > AUTO_SPARK_ROWS else "pandas"


def analyze(run_dirs, engine: str, master: str | None = None):
    if engine == "spark":
        from harness.analysis import spark_engine

        return spark_engine.analyze(run_dirs, master=master)
    from harness.analysis import pandas_engine

    return pandas_engine.analyze(run_dirs)


def _baseline_latency(paths, engine: str, master: str | None):
    import pandas as pd

    from harness.results import tables as rio

    if len(paths) == 1 and (Path(paths[0]) / "summary" / "latency.parquet").is_file():
        return pd.read_parquet(Path(paths[0]) / "summary" / "latency.parquet"), "summary"
    dirs = rio.find_run_dirs(paths)
    return analyze(dirs, choose_engine(engine, dirs), master)["latency"], f"{len(dirs)} runs"


def run(args: argparse.Namespace) -> int:
    from harness.results import tables as rio
    from harness.results import schema as rs
    from harness.analysis import compare, report

    t_start = time.monotonic()
    try:
        run_dirs = rio.find_run_dirs(args.results)
        infos = {rio.read_run_json(d).run_id: d for d in run_dirs}
        timeline = None
        if args.timeline_run:
            unknown = [r for r in args.timeline_run if r not in infos]
            if unknown:
                raise rs.ResultsError(f"--timeline-run: no such run(s) among the inputs: {unknown}")
            timeline = [infos[r] for r in args.timeline_run]
        if args.threshold < 0 or args.min_delta_ms < 0:
            raise rs.ResultsError("--threshold and --min-delta-ms must be ≥ 0")
        engine = "spark" if (args.engine == "auto" and args.master) else choose_engine(args.engine, run_dirs)
        if engine == "pandas" and args.master:
            raise rs.ResultsError("--master needs --engine spark (or auto)")
        summary = analyze(run_dirs, engine, args.master)
        comparison, meta = None, {}
        if args.baseline:
            base, what = _baseline_latency(args.baseline, args.engine, args.master)
            comparison = compare.compare(base, summary["latency"], threshold=args.threshold,
                                         min_delta_ms=args.min_delta_ms, fail_on_missing=args.fail_on_missing)
            meta = {"baseline": [str(b) for b in args.baseline], "baseline_kind": what,
                    "threshold": args.threshold, "min_delta_ms": args.min_delta_ms,
                    "verdict": "FAIL (regression)" if compare.has_regression(comparison) else "pass"}
        meta["wall_s"] = round(time.monotonic() - t_start, 3)
        written = report.write_report(summary, Path(args.out), comparison=comparison, timeline_runs=timeline,
                                      plots=not args.no_plots, inputs=args.results, extra_meta=meta)
    except rs.ResultsError as exc:
        print(f"jbodlab analyze: {exc}", file=sys.stderr)
        return 2
    print(f"{summary.runs} run(s), engine {summary.engine}, {meta['wall_s']:.1f} s\n")
    print(report.TITLES["latency"])
    print(report.terminal_table(summary["latency"]))
    if args.all_tables:
        for name in report.REPORT_TABLES[1:]:
            print(f"\n{report.TITLES[name]}")
            print(report.terminal_table(summary[name]))
    if comparison is not None:
        print(f"\n{report.TITLES['comparison']} (threshold {args.threshold:.0%}, floor {args.min_delta_ms} ms): "
              f"{meta['verdict']}")
        shown = comparison[comparison["verdict"] != "ok"]
        print(report.terminal_table(shown, list(compare.COLUMNS[:4]) + ["p50_ratio", "p99_ratio", "verdict", "reason"])
              if not shown.empty else "all groups within the threshold")
    print(f"\nreport: {written['report.html']}  ({written['report.md'].name}, summary/*.parquet, plots/)")
    if comparison is not None and compare.has_regression(comparison):
        return 1
    return 0


def main(argv: list[str] | None = None, default_engine: str = "auto") -> int:
    """Standalone entry (``spark-submit harness/analysis/spark_submit.py …``)."""
    parser = argparse.ArgumentParser(prog="jbodlab analyze", description=__doc__.splitlines()[0])
    configure(parser)
    parser.set_defaults(engine=default_engine)
    return run(parser.parse_args(argv))
