"""``jbodlab run SCENARIO… [--runs N] [--seed S] [--backend auto|dm|fuse]``: run scenarios in the lab.

Each SCENARIO is a catalog name (``leader-dir-fails``, ``leader-dir-fails-bounce``, ``S1``) or a
``.json``/``.toml`` file (a ``run.json`` re-runs its recorded value). Every run is written to
``<results>/<run_id>/`` (Parquet + run.json) and a summary table ends the output: each run's
check verdicts, then each metric's p50/max per scenario. Exit 0 when every check of every run
is true, 1 when some check is false/unknown or a run failed, 2 for a bad argument.

    jbodlab run S1
    jbodlab run leader-dir-fails follower-dir-fails --runs 2 --seed 7 --backend fuse
    jbodlab run my.toml --set workload.rate_per_s=500 --set faults[0].mode=error-writes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from harness.fields import ScenarioError

__all__ = ["configure", "run", "resolve_scenarios", "summary_lines"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                        help="catalog name or id (S1, leader-dir-fails[-bounce]) or a .json/.toml file")
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario (seeds S, S+1, …)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first run (default: the scenario's)")
    parser.add_argument("--backend", default="auto", choices=("auto", "dm", "fuse"),
                        help="disk fault backend (auto: dm where it works, else fuse)")
    parser.add_argument("--results", default="results", help="results root (default ./results)")
    parser.add_argument("--client", default=None, choices=("confluent-kafka", "kafka-python"),
                        help="override the scenario's workload client")
    parser.add_argument("--bounce", action="store_true", help="the bounce variant of catalog scenarios")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="override a scenario field, e.g. workload.duration_ms=15000")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    parser.add_argument("--analyze", action="store_true",
                        help="then run `jbodlab analyze` over these runs (report in <results>/analysis)")
    parser.add_argument("--analyze-engine", choices=("auto", "pandas", "spark"), default="auto",
                        help="engine of --analyze (default auto: pandas for small inputs, Spark for large)")


def resolve_scenarios(names: list[str], *, overrides: list[str], seed: int | None, bounce: bool, runs: int):
    """Scenario values for every name × run; raises ScenarioError naming the field/problem."""
    from scenarios.resolve import resolve_runs
    return [s for name in names
            for s in resolve_runs(name, overrides=overrides, seed=seed, bounce=bounce, runs=runs)]


def summary_lines(outcomes) -> list[str]:
    """The summary table: verdicts per run, then metrics p50/max per scenario × metric."""
    from harness.checkers import valid_text
    lines = ["", "=== runs ==="]
    names = sorted({r.name for o in outcomes if o.report for r in o.report.results})
    header = f"{'run':52} {'backend':7} {'all':8} " + " ".join(f"{n[:12]:12}" for n in names)
    lines.append(header)
    for o in outcomes:
        checks = {r.name: valid_text(r.valid) for r in (o.report.results if o.report else ())}
        lines.append(f"{o.run_id[:52]:52} {o.backend:7} {o.verdict:8} " +
                     " ".join(f"{checks.get(n, '-'):12}" for n in names))
        if o.error:
            lines.append(f"    error: {o.error}")
        for r in (o.report.results if o.report else ()):
            if r.valid is not True:
                lines.append(f"    {r.name}: {valid_text(r.valid)} — {r.summary}")
    lines += ["", "=== metrics (p50 / max, n) ==="]
    agg: dict[tuple[str, str, str], list[float]] = {}
    for o in outcomes:
        for m in o.metrics:
            agg.setdefault((o.scenario.variant, m["metric"], m.get("unit", "ms")), []).append(float(m["value"]))
    if not agg:
        lines.append("(no metrics measured)")
    for (variant, metric, unit), vals in sorted(agg.items()):
        lines.append(f"{variant:34} {metric:28} {statistics.median(vals):10.1f} / {max(vals):10.1f} {unit:5} "
                     f"n={len(vals)}")
    for o in outcomes:
        if o.run_dir is not None:
            lines.append(f"results: {o.run_dir}")
    return lines


def run(args: argparse.Namespace) -> int:
    from harness.runner import RunOptions, run_scenario
    try:
        scenarios = resolve_scenarios(args.scenarios, overrides=args.overrides, seed=args.seed,
                                      bounce=args.bounce, runs=args.runs)
    except ScenarioError as exc:
        for field_path, message in exc.problems:
            print(f"jbodlab run: {field_path}: {message}", file=sys.stderr)
        return 2
    from harness.workload import SUPPORTED_CLIENTS
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    import signal

    def on_term(_sig, _frm):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)   # `kill` is Ctrl-C: heal, tear down, record
    outcomes = []
    try:
        for i, s in enumerate(scenarios, 1):
            if (args.client or s.workload.client) not in SUPPORTED_CLIENTS:
                say(f"workload.client {s.workload.client!r} is not run by the runner: using confluent-kafka")
            say(f"run {i}/{len(scenarios)}: {s.id} {s.variant} seed {s.seed} — {s.expect.must_show}")
            o = run_scenario(s, RunOptions(backend=args.backend, results_root=args.results, client=args.client,
                                           say=say))
            outcomes.append(o)
            say(f"run {i}/{len(scenarios)}: {s.variant}: {o.verdict} ({o.seconds:.0f} s) -> {o.run_dir}")
    except KeyboardInterrupt:
        print("\njbodlab run: interrupted; lab torn down", file=sys.stderr)
        for line in summary_lines(outcomes):
            print(line)
        return 130
    for line in summary_lines(outcomes):
        print(line)
    if args.analyze:
        from harness.cli import main as cli_main
        dirs = [str(o.run_dir) for o in outcomes if o.run_dir is not None and (o.run_dir / "run.json").exists()]
        if dirs:
            print("", flush=True)
            cli_main(["analyze", *dirs, "--out", str(Path(args.results) / "analysis"),
                      "--engine", args.analyze_engine])
    return 0 if outcomes and all(o.verdict == "true" and not o.error for o in outcomes) else 1
