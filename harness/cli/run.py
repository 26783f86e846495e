"""``jbodlab run SCENARIO… | --all [--runs N] [--seed S] [--backend auto|dm|fuse]``: run scenarios in the lab.

Each SCENARIO is a catalog name (``leader-dir-fails``, ``leader-dir-fails-bounce``, ``S1``) or a
``.json``/``.toml`` file (a ``run.json`` re-runs its recorded value); ``--all`` is every variant
of the catalog. Every run is written to ``<results>/<run_id>/`` (Parquet + run.json). More than
one run is a *campaign* (:mod:`harness.run.campaign`): one results root (``results/campaign-<UTC
stamp>/`` unless ``--results`` says otherwise) that ``jbodlab analyze <root>`` aggregates, a
progress line before and after each run (run i/N, scenario, elapsed, ETA, verdicts so far)
and one summary at the end (every check's pass count per scenario, each metric's
p50/p99/max over the runs, acked records lost, duplicates), also written to
``<root>/summary.md`` and ``<root>/campaign.json``. Ctrl-C (or SIGTERM) stops the run in
progress, heals, tears its lab down and prints the summary so far (exit 130); a second
Ctrl-C while that happens is ignored, so the machine is left clean.

Exit 0 when every check of every run is true, 1 when some check is false/unknown or a run
failed, 2 for a bad argument, 130 when interrupted.

    jbodlab run S1
    jbodlab run leader-dir-fails follower-dir-fails --runs 2 --seed 7 --backend fuse
    jbodlab run --all --runs 5 --analyze
    jbodlab run my.toml --set workload.rate_per_s=500 --set faults[0].mode=error-writes
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from harness.scenario.fields import ScenarioError

__all__ = ["configure", "run", "resolve_scenarios", "summary_lines", "results_root"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help="catalog name or id (S1, leader-dir-fails[-bounce]) or a .json/.toml file")
    parser.add_argument("--all", action="store_true", dest="all_scenarios",
                        help="every variant of the catalog (jbodlab scenario list)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario (seeds S, S+1, …)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first run (default: the scenario's)")
    parser.add_argument("--backend", default="auto", choices=("auto", "dm", "fuse"),
                        help="disk fault backend (auto: dm where it works, else fuse)")
    parser.add_argument("--results", default=None,
                        help="results root (default ./results for one run, ./results/campaign-<UTC stamp> for more)")
    parser.add_argument("--client", default=None, choices=("confluent-kafka", "kafka-python"),
                        help="override the scenario's workload client")
    parser.add_argument("--bounce", action="store_true", help="the bounce variant of catalog scenarios")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="override a scenario field, e.g. workload.duration_ms=15000")
    parser.add_argument("--quiet", action="store_true", help="only the progress lines and the summary")
    parser.add_argument("--analyze", action="store_true",
                        help="then run `jbodlab analyze` over these runs (report in <results>/analysis)")
    parser.add_argument("--analyze-engine", choices=("auto", "pandas", "spark"), default="auto",
                        help="engine of --analyze (default auto: pandas for small inputs, Spark for large)")


def resolve_scenarios(names: list[str], *, overrides: list[str], seed: int | None, bounce: bool, runs: int,
                      all_scenarios: bool = False):
    """Scenario values for every name × run (``all_scenarios``: every catalog variant, then
    the names); raises ScenarioError naming the field/problem."""
    from harness.catalog.resolve import resolve_runs
    if all_scenarios:
        from harness.catalog.catalog import all_scenarios as catalog
        variants = [s.variant for s in catalog()]
        names = variants + [n for n in names if n not in set(variants)]
    if not names:
        raise ScenarioError([("SCENARIO", "name at least one scenario, or --all")])
    return [s for name in names
            for s in resolve_runs(name, overrides=overrides, seed=seed, bounce=bounce, runs=runs)]


def results_root(args: argparse.Namespace, runs: int, now_ns: int | None = None) -> Path:
    """``--results``, else ``results`` for one run and ``results/campaign-<stamp>`` for more."""
    if args.results:
        return Path(args.results)
    from harness.run.campaign import campaign_root_name
    return Path("results") if runs == 1 else Path("results") / campaign_root_name(now_ns)


def summary_lines(outcomes) -> list[str]:
    """The summary of finished runs (a campaign of one is a campaign)."""
    from harness.run.campaign import Record, summarize
    from harness.run.campaign import summary_lines as lines
    records = [Record.of(o) for o in outcomes]
    out = lines(summarize(records))
    for o in outcomes:
        for r in (o.report.results if o.report else ()):
            if r.valid is not True:
                from harness.checkers import valid_text
                out.append(f"  {o.run_id}: {r.name}: {valid_text(r.valid)} — {r.summary[:300]}")
    return out


class InterruptOnce:
    """SIGINT/SIGTERM: the first one stops the campaign (KeyboardInterrupt: the runner heals and
    tears the lab down); later ones are ignored, so the teardown is never cut short."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self, _sig, _frm) -> None:
        if self.stopping:
            print("jbodlab run: still healing and tearing the lab down, please wait", file=sys.stderr, flush=True)
            return
        self.stopping = True
        raise KeyboardInterrupt

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)


def run(args: argparse.Namespace) -> int:
    from harness.run.runner import RunOptions, run_scenario
    try:
        scenarios = resolve_scenarios(args.scenarios, overrides=args.overrides, seed=args.seed,
                                      bounce=args.bounce, runs=args.runs, all_scenarios=args.all_scenarios)
    except ScenarioError as exc:
        for field_path, message in exc.problems:
            print(f"jbodlab run: {field_path}: {message}", file=sys.stderr)
        return 2
    from harness.run.campaign import Progress, Record, campaign_header, summarize, summary_markdown
    from harness.workload.producer import SUPPORTED_CLIENTS
    root = results_root(args, len(scenarios))
    campaign = len(scenarios) > 1
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    def show(msg: str) -> None:
        print(msg, flush=True)
    InterruptOnce().install()
    progress = Progress([(s.variant, s.workload.duration_ms / 1000) for s in scenarios], started_s=t0)
    outcomes = []
    if campaign:
        root.mkdir(parents=True, exist_ok=True)
        show(f"{campaign_header([s.variant for s in scenarios], args.runs)} into {root}")
    interrupted = False
    try:
        for i, s in enumerate(scenarios):
            if (args.client or s.workload.client) not in SUPPORTED_CLIENTS:
                say(f"workload.client {s.workload.client!r} is not run by the runner: using confluent-kafka")
            show(progress.before(i, s.variant, s.id, s.seed, time.monotonic()))
            say(f"{s.id} {s.variant}: {s.expect.must_show}")
            o = run_scenario(s, RunOptions(backend=args.backend, results_root=str(root), client=args.client, say=say))
            outcomes.append(o)
            show(progress.after(Record.of(o), time.monotonic()) + f" -> {o.run_dir}")
    except KeyboardInterrupt:
        interrupted = True
        print("\njbodlab run: interrupted; the lab of the run in progress is healed and torn down", file=sys.stderr)
    summary = summarize(Record.of(o) for o in outcomes)
    for line in summary_lines(outcomes):
        print(line)
    print(f"results: {root.resolve() if campaign else ', '.join(str(o.run_dir) for o in outcomes)}")
    if campaign:
        (root / "summary.md").write_text(summary_markdown(summary))
        (root / "campaign.json").write_text(json.dumps({
            "scenarios": [s.variant for s in scenarios[::args.runs]], "runs_each": args.runs,
            "planned": len(scenarios), "finished": len(outcomes), "interrupted": interrupted,
            "wall_s": round(time.monotonic() - t0, 1), "verdicts": dict(summary.verdicts),
            "runs": [{"run_id": o.run_id, "variant": o.scenario.variant, "seed": o.scenario.seed,
                      "verdict": o.verdict, "seconds": round(o.seconds, 1), "error": o.error} for o in outcomes],
        }, indent=2) + "\n")
    if interrupted:
        return 130
    if args.analyze:
        from harness.cli.jbodlab import main as cli_main
        dirs = [str(o.run_dir) for o in outcomes if o.run_dir is not None and (o.run_dir / "run.json").exists()]
        if dirs:
            print("", flush=True)
            cli_main(["analyze", *([str(root)] if campaign else dirs), "--out", str(root / "analysis"),
                      "--engine", args.analyze_engine])
    return 0 if outcomes and all(o.verdict == "true" and not o.error for o in outcomes) else 1
