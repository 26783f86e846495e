"""The campaign's pure parts: the run plan, progress and ETA, the summary over the runs."""

from __future__ import annotations

import argparse

import pytest

from harness.run.campaign import (DEFAULT_OVERHEAD_S, Progress, Record, campaign_header, campaign_root_name, fmt_duration,
                              summarize, summary_lines, summary_markdown)
from harness.cli.run import resolve_scenarios, results_root
from harness.catalog.catalog import all_scenarios

pytestmark = pytest.mark.unit


def rec(variant: str, verdict: str = "true", seconds: float = 40.0, workload_s: float = 30.0, checks=None,
        metrics=(), seed: int = 0) -> Record:
    return Record(variant=variant, scenario_id=variant[:2].upper(), seed=seed, verdict=verdict,
                  checks=checks or {"durability": "true", "service": verdict}, metrics=tuple(metrics),
                  seconds=seconds, workload_s=workload_s)


def test_all_runs_every_variant_n_times_with_consecutive_seeds():
    got = resolve_scenarios([], overrides=[], seed=None, bounce=False, runs=2, all_scenarios=True)
    variants = [s.variant for s in all_scenarios()]
    assert [s.variant for s in got] == [v for v in variants for _ in range(2)]
    assert [s.seed for s in got[:2]] == [0, 1]
    with pytest.raises(Exception, match="at least one scenario"):
        resolve_scenarios([], overrides=[], seed=None, bounce=False, runs=1)


def test_a_campaign_gets_one_results_root():
    args = argparse.Namespace(results=None)
    assert str(results_root(args, 1)) == "results"
    root = results_root(args, 3, now_ns=1_700_000_000_000_000_000)
    assert str(root) == "results/campaign-20231114T221320" == f"results/{campaign_root_name(1_700_000_000 * 10**9)}"
    assert str(results_root(argparse.Namespace(results="/tmp/x"), 3)) == "/tmp/x"


def test_campaign_header_says_the_plan():
    assert campaign_header(["a", "a", "b", "b"], 2) == "campaign: 4 runs (2 scenarios × 2)"
    assert campaign_header(["S15"] * 5, 5) == "campaign: 5 runs (1 scenario × 5)"
    # a scenario named again on the command line: not "2 scenarios × 1"
    assert campaign_header(["S15", "S1", "S1", "S1", "S15"], 1) == \
        "campaign: 5 runs of 2 scenarios (S15 ×2, S1 ×3)"


def test_eta_uses_the_same_variant_then_workload_plus_overhead():
    p = Progress([("a", 30.0), ("b", 30.0), ("a", 30.0), ("c", 180.0)], started_s=0.0)
    assert p.eta_s() == 3 * (30 + DEFAULT_OVERHEAD_S) + 180 + DEFAULT_OVERHEAD_S
    p.after(rec("a", seconds=50.0), now_s=50.0)           # overhead 20 s
    assert p.eta_s() == (30 + 20) + 50 + (180 + 20)
    line = p.before(1, "b", "S2", 1, now_s=50.0)
    assert line == "[run 2/4 · 50s elapsed · ETA 5m00s · verdicts: true 1] S2 b seed 1"
    done = p.after(rec("b", verdict="false", seconds=70.0, checks={"service": "false", "durability": "true"}),
                   now_s=120.0)
    assert done.startswith("[2/4 · 2m00s elapsed · ETA") and "verdicts: true 1 false 1" in done
    assert done.endswith("b seed 0: false in 1m10s — service=false")


def test_fmt_duration():
    assert [fmt_duration(x) for x in (0, 59.4, 61, 3600 * 2 + 65, None)] == ["0s", "59s", "1m01s", "2h01m", "?"]


def test_summary_counts_checks_and_aggregates_run_level_metrics():
    def metrics(detect, recovery, lost=0.0, dups=0.0):
        return [{"metric": "detect_ms", "value": detect, "unit": "ms"},
                {"metric": "service_recovery_ms", "value": recovery, "unit": "ms", "partition": None},
                {"metric": "service_recovery_ms", "value": 99999.0, "unit": "ms", "partition": 3},  # per partition
                {"metric": "acked_lost", "value": lost, "unit": "count"},
                {"metric": "duplicates", "value": dups, "unit": "count"}]
    records = [rec("s1", metrics=metrics(10, 100)), rec("s1", metrics=metrics(20, 300, dups=2), seed=1),
               rec("s1", verdict="false", metrics=metrics(30, 200), seed=2,
                   checks={"durability": "true", "service": "false"}),
               rec("s2", verdict="unknown", checks={"durability": "unknown"}, metrics=metrics(5, 50, lost=1))]
    s = summarize(records)
    assert s.checks["s1"] == {"durability": (3, 3), "service": (2, 3)} and s.checks["s2"] == {"durability": (0, 1)}
    st = s.metrics[("s1", "service_recovery_ms")]
    assert (st["n"], st["p50"], st["max"]) == (3, 200.0, 300.0) and st["p99"] == pytest.approx(298.0)
    assert s.metrics[("s1", "detect_ms")]["p50"] == 20.0
    assert s.lost == {"s1": 0.0, "s2": 1.0} and s.duplicates == {"s1": 2.0, "s2": 0.0}
    text = "\n".join(summary_lines(s))
    assert "4 runs, verdicts: false 1, true 2, unknown 1" in text
    assert "s1           3          3/3          2/3" in text
    assert "acked records lost: 1 in 4 runs (s2 1)" in text
    assert "duplicates (idempotent producers, acks=all): 2 (s1 2)" in text
    one = "\n".join(summary_lines(summarize(records[:1])))
    assert "=== campaign: 1 run, verdicts: true 1 ===" in one and "acked records lost: 0 in 1 run" in one
    md = summary_markdown(s)
    assert "| s1 | service | 2 | 3 |" in md
    assert "| s1 | service_recovery_ms | 3 | 200.000 | 298.000 | 300.000 | ms |" in md
