"""A campaign: many scenario runs in a row, with a progress display and one summary (pure).

``jbodlab run --all --runs 5`` (or any list of scenarios with ``--runs N``) runs every
scenario N times into ONE results root (``results/campaign-<UTC stamp>/`` by default), so
``jbodlab analyze <root>`` aggregates them. This module holds the parts that need no lab:

- :class:`Record` — what the summary needs of one run (from a ``RunOutcome``);
- :class:`Progress` — the line printed before and after each run: which run of how many,
  which scenario, elapsed, ETA, verdicts so far. The ETA adds, for each run still to come, the
  mean wall time of the finished runs of the same variant, or else the scenario's workload
  duration plus the mean overhead (wall time − workload duration) of the finished runs
  (``DEFAULT_OVERHEAD_S`` before any run finished);
- :func:`summarize` / :func:`summary_lines` — the summary: verdicts per run, every check's
  pass count per scenario, each metric's p50/p99/max over the runs per scenario (type-7
  percentiles, as the analysis; the service metrics by their run-level rows), and the records
  lost / duplicated (the workload's producers are idempotent with acks=all).
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from harness.checkers.base import valid_text
from harness.checkers.service_windows import percentile

__all__ = ["Record", "Progress", "CampaignSummary", "summarize", "summary_lines", "campaign_header",
           "campaign_root_name", "fmt_duration", "DEFAULT_OVERHEAD_S", "SHOWN_METRICS", "RUN_LEVEL_METRICS"]

DEFAULT_OVERHEAD_S = 30.0     # lab up, topics, drain, tear down: a first guess until a run finished
# metrics printed in the summary (all of them go to the campaign's summary.md)
SHOWN_METRICS = ("detect_ms", "report_ms", "isr_shrink_ms", "leader_failover_ms", "client_unavailable_ms",
                 "failure_timeout_shutdown_ms", "fencing_ms", "leader_rebalance_ms", "produce_before_p99_ms",
                 "produce_during_p99_ms",
                 "broker_produce_during_p99_ms",
                 "service_recovery_ms", "latency_degradation_ratio", "acked_lost", "duplicates",
                 "host_cpu_busy_ratio", "host_cpu_other_ratio")
RUN_LEVEL_METRICS = ("produce_", "service_recovery_ms", "latency_degradation_ratio")   # prefixes / names


@dataclass(frozen=True)
class Record:
    variant: str
    scenario_id: str
    seed: int
    verdict: str                           # true | false | unknown | error
    checks: dict[str, str]                 # check name -> true | false | unknown
    metrics: tuple[dict, ...] = ()
    seconds: float = 0.0
    workload_s: float = 0.0
    error: str | None = None
    run_id: str = ""

    @staticmethod
    def of(outcome: Any) -> "Record":
        s = outcome.scenario
        checks = {r.name: valid_text(r.valid) for r in (outcome.report.results if outcome.report else ())}
        return Record(variant=s.variant, scenario_id=s.id, seed=s.seed, verdict=outcome.verdict, checks=checks,
                      metrics=tuple(outcome.metrics), seconds=outcome.seconds,
                      workload_s=s.workload.duration_ms / 1000, error=outcome.error, run_id=outcome.run_id)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "?"
    s = int(round(max(seconds, 0)))
    h, rest = divmod(s, 3600)
    mi, sec = divmod(rest, 60)
    return f"{h}h{mi:02d}m" if h else (f"{mi}m{sec:02d}s" if mi else f"{sec}s")


def campaign_root_name(now_ns: int | None = None) -> str:
    now_ns = time.time_ns() if now_ns is None else now_ns
    return "campaign-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns / 1e9))


@dataclass
class Progress:
    """Progress of a campaign over ``plan`` = [(variant, workload seconds)] in run order."""

    plan: Sequence[tuple[str, float]]
    started_s: float
    done: list[Record] = field(default_factory=list)

    def eta_s(self) -> float:
        by_variant: dict[str, list[float]] = defaultdict(list)
        for r in self.done:
            by_variant[r.variant].append(r.seconds)
        overheads = [r.seconds - r.workload_s for r in self.done]
        overhead = sum(overheads) / len(overheads) if overheads else DEFAULT_OVERHEAD_S
        total = 0.0
        for variant, workload_s in self.plan[len(self.done):]:
            seen = by_variant.get(variant)
            total += sum(seen) / len(seen) if seen else workload_s + max(overhead, 0.0)
        return total

    def verdicts(self) -> str:
        c = Counter(r.verdict for r in self.done)
        return " ".join(f"{k} {c[k]}" for k in ("true", "false", "unknown", "error") if c[k]) or "none yet"

    def line(self, now_s: float, *, next_index: int | None = None) -> str:
        n = len(self.plan)
        i = len(self.done) if next_index is None else next_index
        head = f"[{i}/{n}" if next_index is None else f"[run {i + 1}/{n}"
        return (f"{head} · {fmt_duration(now_s - self.started_s)} elapsed · ETA {fmt_duration(self.eta_s())} · "
                f"verdicts: {self.verdicts()}]")

    def before(self, index: int, variant: str, scenario_id: str, seed: int, now_s: float) -> str:
        return f"{self.line(now_s, next_index=index)} {scenario_id} {variant} seed {seed}"

    def after(self, record: Record, now_s: float) -> str:
        self.done.append(record)
        why = ""
        bad = [f"{k}={v}" for k, v in record.checks.items() if v != "true"]
        if record.error:
            why = f" — error: {record.error[:120]}"
        elif bad:
            why = " — " + ", ".join(bad)
        return (f"{self.line(now_s)} {record.scenario_id} {record.variant} seed {record.seed}: "
                f"{record.verdict} in {fmt_duration(record.seconds)}{why}")


def _run_level(m: dict) -> bool:
    """The rows the summary aggregates: the service metrics by their run-level row only."""
    name = m["metric"]
    if name.startswith(RUN_LEVEL_METRICS[0]) or name in RUN_LEVEL_METRICS[1:]:
        return m.get("partition") is None
    return True


@dataclass
class CampaignSummary:
    records: list[Record]
    checks: dict[str, dict[str, tuple[int, int]]]         # variant -> check -> (passed, runs)
    metrics: dict[tuple[str, str], dict[str, Any]]        # (variant, metric) -> n, p50, p99, max, unit
    lost: dict[str, float]                                 # variant -> acked records lost, summed over runs
    duplicates: dict[str, float]
    verdicts: Counter


def summarize(records: Iterable[Record]) -> CampaignSummary:
    records = list(records)
    checks: dict[str, dict[str, list[int]]] = defaultdict(dict)
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    lost: dict[str, float] = defaultdict(float)
    dups: dict[str, float] = defaultdict(float)
    for r in records:
        for name, v in r.checks.items():
            cell = checks[r.variant].setdefault(name, [0, 0])
            cell[0] += v == "true"
            cell[1] += 1
        for m in r.metrics:
            if not _run_level(m):
                continue
            values[(r.variant, m["metric"])].append(float(m["value"]))
            units[m["metric"]] = m.get("unit", "ms")
            if m["metric"] == "acked_lost":
                lost[r.variant] += float(m["value"])
            elif m["metric"] == "duplicates":
                dups[r.variant] += float(m["value"])
    metrics = {}
    for key, vals in values.items():
        x = sorted(vals)
        metrics[key] = {"n": len(x), "p50": percentile(x, 0.5), "p99": percentile(x, 0.99), "max": x[-1],
                        "unit": units[key[1]]}
    return CampaignSummary(records, {v: {c: (p, n) for c, (p, n) in cs.items()} for v, cs in checks.items()},
                           metrics, dict(lost), dict(dups), Counter(r.verdict for r in records))


def _variants(s: CampaignSummary) -> list[str]:
    seen: list[str] = []
    for r in s.records:
        if r.variant not in seen:
            seen.append(r.variant)
    return seen


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def campaign_header(variants: Sequence[str], runs: int) -> str:
    """``campaign: 10 runs (2 scenarios × 5)``; a scenario named more than once on the command
    line makes the plan no product, so then ``campaign: 32 runs of 2 scenarios (S1 ×30, …)``."""
    counts: dict[str, int] = {}
    for v in variants:
        counts[v] = counts.get(v, 0) + 1
    scenarios = _count(len(counts), "scenario")
    if len(variants) == len(counts) * runs:
        return f"campaign: {len(variants)} runs ({scenarios} × {runs})"
    each = ", ".join(f"{v} ×{n}" for v, n in counts.items())
    return f"campaign: {len(variants)} runs of {scenarios} ({each})"


def summary_lines(s: CampaignSummary, *, metrics: Sequence[str] | None = SHOWN_METRICS) -> list[str]:
    """The campaign summary as text lines (``metrics=None``: every metric)."""
    out = ["", f"=== campaign: {_count(len(s.records), 'run')}, verdicts: " +
           ", ".join(f"{k} {v}" for k, v in sorted(s.verdicts.items())) + " ==="]
    names = sorted({c for cs in s.checks.values() for c in cs})
    width = max([len(v) for v in _variants(s)] + [8])
    out.append(f"{'scenario':{width}}  {'runs':>4}  " + "  ".join(f"{n[:11]:>11}" for n in names))
    for v in _variants(s):
        runs = sum(1 for r in s.records if r.variant == v)
        cells = []
        for n in names:
            p = s.checks.get(v, {}).get(n)
            cells.append(f"{'-' if p is None else f'{p[0]}/{p[1]}':>11}")
        out.append(f"{v:{width}}  {runs:>4}  " + "  ".join(cells))
    errors = [r for r in s.records if r.error]
    for r in errors:
        out.append(f"  error in {r.run_id or r.variant}: {r.error[:160]}")
    out += ["", "=== metrics over the runs (per scenario: n, p50, p99, max) ==="]
    shown = [(k, v) for k, v in sorted(s.metrics.items(), key=lambda kv: (_variants(s).index(kv[0][0]), kv[0][1]))
             if metrics is None or k[1] in metrics]
    if metrics is not None:
        shown.sort(key=lambda kv: (_variants(s).index(kv[0][0]), metrics.index(kv[0][1])))
    if not shown:
        out.append("(no metrics measured)")
    last = None
    for (variant, metric), st in shown:
        if variant != last:
            out.append(f"{variant}")
            last = variant
        out.append(f"  {metric:28} {st['n']:>5}  {st['p50']:>10.1f}  {st['p99']:>10.1f}  {st['max']:>10.1f} "
                   f"{st['unit']}")
    total_lost, total_dups = sum(s.lost.values()), sum(s.duplicates.values())
    out += ["", f"acked records lost: {total_lost:.0f} in {_count(len(s.records), 'run')}"
            + ("" if not total_lost else " (" + ", ".join(f"{v} {n:.0f}" for v, n in s.lost.items() if n) + ")"),
            f"duplicates (idempotent producers, acks=all): {total_dups:.0f}"
            + ("" if not total_dups else " (" + ", ".join(f"{v} {n:.0f}" for v, n in s.duplicates.items() if n) + ")")]
    return out


def summary_markdown(s: CampaignSummary) -> str:
    """Every metric, for ``<root>/summary.md``."""
    lines = ["# campaign summary", "", "| scenario | check | passed | runs |", "|---|---|---:|---:|"]
    for v in _variants(s):
        for c, (p, n) in sorted(s.checks.get(v, {}).items()):
            lines.append(f"| {v} | {c} | {p} | {n} |")
    lines += ["", "| scenario | metric | n | p50 | p99 | max | unit |", "|---|---|---:|---:|---:|---:|---|"]
    for (v, metric), st in sorted(s.metrics.items(), key=lambda kv: (_variants(s).index(kv[0][0]), kv[0][1])):
        lines.append(f"| {v} | {metric} | {st['n']} | {st['p50']:.3f} | {st['p99']:.3f} | {st['max']:.3f} | "
                     f"{st['unit']} |")
    lines += ["", f"acked records lost: {sum(s.lost.values()):.0f}; "
                  f"duplicates: {sum(s.duplicates.values()):.0f}", ""]
    return "\n".join(lines)
