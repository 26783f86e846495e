"""The system suite: every scenario of scenarios.md runs in containers on loop devices with real
block-level faults, and each of its "must show" checks is one test.

A scenario runs once (cached per variant); its checks are then asserted one by one, so a
broken failover shows as ``test_must_show[S1 leader-dir-fails/failover]`` even when another
check of the same run fails. Timings are the catalog's shrunk ones; the suite shortens only
the workload (``SUITE_DURATION_MS``; S15 keeps its catalog length, ``MANY_DURATION_MS``: at
1 record/s per partition its baseline needs the 23 s before its fault and its recovery a 10 s
window and one more after it; at least ``AFTER_LAST_FAULT_MS`` after the last fault ends, so the service
check sees the recovery) and the drain bound, runs the librdkafka client, and heals S10's
faults after 6 s instead of 10 s.

Checks that cannot pass because a broker feature is still missing are ``xfail(strict=True)``
with the missing feature named (:data:`MISSING`), so they flip to failures once it lands.
Checks that pass in some runs and not in others on these 2 cores are ``xfail(strict=False)``
with the measured margin (:data:`MARGINAL`).

Needs root, dockerd and loop devices (``scripts/bootstrap.sh`` + ``jbodlab setup``).
Results go to ``$JBODLAB_SYSTEM_RESULTS`` (kept); by default to a temp dir that is removed
when every test of this module passed and kept, with its path printed, when one failed
(a suite run leaves ~80 MB there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

SUITE_DURATION_MS = 22000       # the catalog's first fault at 11 s (1 s warm-up + a 10 s baseline), 11 s after
MANY = "many-partitions-leader-dir-fails"
MANY_DURATION_MS = 45000
DRAIN_TIMEOUT_MS = 8000
SLOW_FAULT_MS = 6000
AFTER_LAST_FAULT_MS = 8000     # workload left after the last fault ends (heal or instant)

# (catalog variant, checks asserted). The checks are the scenario's own (its must-show).
SUITE = [
    "leader-dir-fails",
    "leader-dir-fails-bounce",
    "follower-dir-fails",
    "follower-dir-fails-bounce",
    "bounce-after-failure-leader",
    "bounce-after-failure-follower",
    "failure-timeout-shutdown",
    "timeout-not-leader",
    "last-dir-fails",
    "metadata-dir-fails",
    "restart-fenced-until-assigned",
    "replace-disk",
    "move-replica-source-fails",
    "move-replica-target-fails",
    "flaky-and-slow",
    "flaky-and-slow-bounce",
    "many-partitions-leader-dir-fails",
    "soak",
    "active-controller-killed-during-report",
    "active-controller-metadata-disk-fails",
    "active-controller-partitioned-during-report",
    "offsets-dir-fails",
    "segment-blocks-fail",
    "silent-corruption",
    "power-cut",
    "permission-denied",
    # S19 (KAFKA-16157/16234: delete and re-create while a replica's dir is offline); S17 and S18
    # (reassignment, preferred leaders) run in campaigns only, for the suite's time: their calls
    # are integration tests (tests/dataplane/test_operator_clients.py)
    "delete-topic-while-dir-offline",
]
SOAK_DURATION_MS = 40000

# (variant, check) -> the missing broker feature; (variant, "schedule") for test_schedule_carried_out.
MISSING: dict[tuple[str, str], str] = {}
# (variant, check) -> a check that passes in some runs and not in others on these 2 cores, with
# the measured margin: a non-strict xfail (it may pass; when it fails, the reason says by how much).
# None today. S15's `service` was one for a long time (300 partitions at 1000 records/s:
# true in 9 of 13 quiet runs on 2026-11-30's machine, false before any fault on slower ones). Then
# two causes were found, neither the broker's: 1000/s saturated the slowest machine's 2 cores before
# the fault (S15 now offers 300/s, 1/s per partition), and the check judged each partition's
# recovery against a p99 of its own ~20 baseline ops — their maximum — so with 300 partitions one
# slow second of the cluster after the fault was "not recovered" somewhere in most runs, faulted or
# not: a fake fault in fault-free service gave false in 4 of 8 re-checks. A partition's p99
# reference is now at least its leader's pooled baseline p99 (0 of 8 false), and S15 at 300/s was
# true in 13 of 13 runs, 8 of them beside a `while True` hog (docs/status.md).
MARGINAL: dict[tuple[str, str], str] = {}
# (variant) -> a known cause whose ONLY signature is duplicates: the durability test is an xfail
# when the check fails with duplicates and nothing else (:func:`only_duplicates`: a lost,
# mismatched, reordered or phantom record still fails it), and passes when the check passes.
# Seen only where acks take longer than the client's timeouts (S15 on 2 cores: 39-53 of ~23.4k
# acked in 2 of 3 suite runs, each run with ~670 _MSG_TIMED_OUT). The signature: a block of one
# producer's consecutive values appended once, never acked, then appended again as ONE batch
# (acked at one instant, e.g. 12 values at offsets 20-31 and again at 32-43). In the same epoch
# the broker would refuse that batch (it matches no remembered batch and does not continue the
# sequence: OUT_OF_ORDER_SEQUENCE_NUMBER), so it came under a new epoch from sequence 0 — what
# librdkafka's idempotent producer does after a message timeout (message.timeout.ms 20 s): it
# drains, bumps the producer-wide epoch and re-sends what it still holds, including values whose
# first send's outcome was unknown (request timed out); a new epoch is a new producer to the
# broker (Kafka's too). Reproduced at the log level by `jbodlab bench idempotence -- --rate 1500
# --seconds 20 --flush-messages 5 --message-timeout-ms 3000 --request-timeout-ms 1000` (S15's shape
# on loopback, loaded): 105 duplicate copies, every one across epochs (e.g. epoch 81 sequences
# 1-5 again as epoch 82 sequences 0-4), none within one. Same-epoch retries are answered with
# the original offsets (tests/broker/replication/test_repl_idempotent_retries.py). Not strict:
# with fast acks nothing times out, so the check usually passes.
DUPLICATES = {v: "librdkafka re-sent under a bumped epoch after message timeouts (client-side; the broker "
                 "deduplicates same-epoch retries)"
              for v in SUITE if v not in ("failure-timeout-shutdown", "timeout-not-leader")}


def only_duplicates(result) -> bool:
    """The durability result is false, it names duplicates, and no other error of the check
    (every error of :class:`~harness.checkers.durability.DurabilityReport` but duplicates)."""
    from harness.checkers.durability import DurabilityReport
    others = [k for k in DurabilityReport().errors if k != "duplicates"]
    d = result.details
    return result.valid is False and bool(d.get("duplicates_count")) \
        and all(f"{k}_count" in d for k in others) and not any(d[f"{k}_count"] for k in others)


def _capable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "needs a running dockerd (jbodlab setup)"
    if not Path("/dev/loop-control").exists():
        return "needs loop devices"
    return None


_RUNS: dict[str, object] = {}


def _results_root() -> Path:
    root = os.environ.get("JBODLAB_SYSTEM_RESULTS")
    if root:
        return Path(root)
    if "root" not in _RUNS:
        _RUNS["root"] = Path(tempfile.mkdtemp(prefix="jbodlab-system-"))
    return _RUNS["root"]  # type: ignore[return-value]


def suite_scenario(variant: str):
    from harness.scenario.model import Scenario
    from harness.scenario.text import apply_override
    from harness.catalog.catalog import by_name, soak
    base = soak(minutes=1) if variant == "soak" else by_name(variant)
    data = base.to_dict()
    duration = SOAK_DURATION_MS if variant == "soak" else (
        MANY_DURATION_MS if variant == MANY else SUITE_DURATION_MS)
    if variant == "soak":
        data["faults"] = [f for f in data["faults"] if f["at_ms"] < duration - 6000]
        from infra.netfaults import netem_available
        if not netem_available()[0]:   # a host capability, not a broker feature: drop net delays
            data["faults"] = [f for f in data["faults"] if not (f["kind"] == "network" and f["action"] == "delay")]
    if base.id == "S10":
        # the catalog's 10 s faults would heal 1 s before a 16 s workload ends: the service
        # check could not see the slow dir's partitions recover after the heal
        for f in data["faults"]:
            if f.get("duration_ms"):
                f["duration_ms"] = SLOW_FAULT_MS
    if variant != "soak":
        # the service check must see what follows the last fault: with 3 s left after S3's
        # restart (or S8's replacement, S7's heal) a recovery of a few seconds ended the run
        # as 'unknown'; the scenario's own bound still judges it
        ends = [f["at_ms"] + (f.get("duration_ms") or 0) for f in data["faults"]]
        duration = max(duration, max(ends, default=0) + AFTER_LAST_FAULT_MS)
    drain = base.workload.drain_timeout_ms if variant == MANY else DRAIN_TIMEOUT_MS   # 300 partitions to read
    for assignment in (f"workload.duration_ms={duration}", f"workload.drain_timeout_ms={drain}",
                       "workload.client=confluent-kafka"):
        apply_override(data, assignment)
    return Scenario.from_dict(data)


@pytest.fixture(scope="module", autouse=True)
def _temp_results(request):
    """The default results dir goes when the module passed, stays (path printed) when not."""
    failed_before = request.session.testsfailed
    yield
    root = _RUNS.pop("root", None)
    if root is None:
        return
    if request.session.testsfailed == failed_before:
        shutil.rmtree(root, ignore_errors=True)
    else:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"system suite: runs kept in {root} (JBODLAB_SYSTEM_RESULTS=dir keeps them always)")


def outcome_of(variant: str):
    if variant not in _RUNS:
        reason = _capable()
        if reason:
            pytest.skip(reason)
        from harness.run.runner import RunOptions, run_scenario
        lines: list[str] = []
        o = run_scenario(suite_scenario(variant), RunOptions(backend="auto", results_root=str(_results_root()),
                                                             say=lines.append))
        o.log = lines  # type: ignore[attr-defined]
        _RUNS[variant] = o
    return _RUNS[variant]


def _cases():
    from harness.catalog.catalog import by_name
    out = []
    for v in SUITE:
        checks = by_name(v).checks if v != "soak" else ("durability", "failover", "liveness", "timeout_accuracy",
                                                        "fencing", "metadata_invariants", "service")
        for c in checks:
            marks = ([pytest.mark.xfail(reason=MISSING[(v, c)], strict=True)] if (v, c) in MISSING else
                     [pytest.mark.xfail(reason=MARGINAL[(v, c)], strict=False)] if (v, c) in MARGINAL else [])
            out.append(pytest.param(v, c, id=f"{by_name(v).id} {v}/{c}", marks=marks))
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant,check", _cases())
def test_must_show(variant: str, check: str) -> None:
    o = outcome_of(variant)
    assert o.error is None, f"run failed: {o.error} (log: {o.run_dir})\n" + "\n".join(o.log[-30:])
    if check == "failover" and any(f.kind == "move-replica" for f in o.scenario.faults):
        # the move outcomes mean nothing unless the move was really requested and accepted
        assert not o.harness_errors, f"the move was not carried out: {o.harness_errors}"
    results = {r.name: r for r in o.report.results}
    r = results[check]
    if check == "durability" and variant in DUPLICATES and only_duplicates(r):
        pytest.xfail(f"{DUPLICATES[variant]}: {r.summary}")
    assert r.valid is True, f"{variant}: {check} is {r.valid}: {r.summary}\n{r.details}\nrun: {o.run_dir}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", [
    pytest.param(v, marks=[pytest.mark.xfail(reason=MISSING[(v, "schedule")], strict=True)]
                 if (v, "schedule") in MISSING else []) for v in SUITE])
def test_schedule_carried_out(variant: str) -> None:
    """Every scheduled fault/action was really carried out (a move that never happened would
    make the move checks vacuous)."""
    o = outcome_of(variant)
    assert o.error is None, o.error
    assert not o.harness_errors, o.harness_errors


@pytest.mark.timeout(600)
def test_s1_results_read_back_with_pandas() -> None:
    """The recorded run reads back with pandas: every table, run.json with backend + fidelity."""
    import json

    import pandas as pd
    o = outcome_of("leader-dir-fails")
    info = json.loads((o.run_dir / "run.json").read_text())
    assert info["fault_backend"] in ("dm", "fuse") and info["fidelity"]
    assert info["scenario_value"]["id"] == "S1"
    events = pd.read_parquet(o.run_dir / "events")
    assert {"fault_injected", "fault_healed", "first_io_error_observed", "dir_offline"} <= set(events["event"])
    metrics = pd.read_parquet(o.run_dir / "metrics")
    assert {"detect_ms", "isr_shrink_ms", "leader_failover_ms"} <= set(metrics["metric"])
    service = {"produce_before_p50_ms", "produce_before_p99_ms", "produce_during_p99_ms", "produce_during_per_s",
               "latency_degradation_ratio"}
    assert service <= set(metrics["metric"])
    per_partition = metrics[(metrics.metric == "produce_before_p50_ms") & metrics.partition.notna()]
    assert len(per_partition) == o.scenario.workload.topics[0].partitions
    assert (metrics[metrics.metric == "detect_ms"]["value"] >= 0).all()
    # the host's load over the workload (harness.run.host_load): one run-level row each, a share of
    # all cores; the lab alone keeps this machine's cores partly busy
    host = metrics[metrics.metric.isin(["host_cpu_busy_ratio", "host_cpu_other_ratio"])].set_index("metric")
    assert sorted(host.index) == ["host_cpu_busy_ratio", "host_cpu_other_ratio"] and host.partition.isna().all()
    assert 0 < host.loc["host_cpu_busy_ratio", "value"] <= 1
    assert 0 <= host.loc["host_cpu_other_ratio", "value"] <= host.loc["host_cpu_busy_ratio", "value"]
    checks = pd.read_parquet(o.run_dir / "checks")
    assert {"all", "service"} <= set(checks["checker"])
    for table in ("client_ops", "resources"):
        assert (o.run_dir / table).is_dir()


@pytest.mark.timeout(600)
def test_s7_fencing_ms_measured() -> None:
    o = outcome_of("restart-fenced-until-assigned")
    assert o.error is None, o.error
    fencing = [m for m in o.metrics if m["metric"] == "fencing_ms" and m.get("node_id") == 3]
    assert len(fencing) >= 2, f"broker 3 registered and unfenced at start and after its restart: {fencing}"


def moved_leaders(run_dir: Path, topic: str) -> dict[int, int]:
    """Per broker, how many of ``topic``'s partitions it leads at the end of the run that another
    broker led when the first fault was injected: the controller's ``partition_change`` events
    (each carries the partition's whole state) replayed in order."""
    import json

    import pandas as pd
    events = pd.read_parquet(run_dir / "events", columns=["ts_ns", "event", "topic", "attrs"])
    fault_ns = int(events[events.event == "fault_injected"].ts_ns.min())
    changes = events[(events.event == "partition_change") & (events.topic == topic)].sort_values("ts_ns")
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    for ts, attrs in zip(changes.ts_ns, changes["attrs"]):
        state = json.loads(attrs)
        (before if ts < fault_ns else after)[state["partition"]] = state["leader"]
        if ts < fault_ns:
            after[state["partition"]] = state["leader"]
    heirs: dict[int, int] = {}
    for p, leader in after.items():
        if before.get(p) is not None and leader != before[p]:
            heirs[leader] = heirs.get(leader, 0) + 1
    return heirs


@pytest.mark.timeout(600)
def test_s15_moved_leaders_split_between_the_other_brokers() -> None:
    """S15's failed dir holds a third of one broker's leaders (t1-0's leader, broker 1: ~33 of
    its 100; the broker makes its leaders' logs before its followers', as Kafka does, so they
    spread over its dirs). They must not all move to one heir: once the followers
    came in one order and broker 2 took all of them (then 100, all in one dir); the placement
    turns the followers each round, so the two other brokers take half each."""
    o = outcome_of(MANY)
    assert o.error is None, o.error
    heirs = moved_leaders(o.run_dir, "t1")
    moved = sum(heirs.values())
    assert 25 <= moved <= 40, f"S15 should move the ~33 leaders on broker 1's failed dir: {heirs}"
    assert len(heirs) == 2 and max(heirs.values()) <= 0.6 * moved, \
        f"the moved leaders should split between the two other brokers: {heirs} (run: {o.run_dir})"
