"""Fixtures of the analysis tests: synthetic runs with known distributions, one SparkSession."""

from __future__ import annotations

import pytest

from harness.results import tables as rio
from harness.results import schema as rs
from harness.analysis import synth
from harness.analysis.synth import Dist, ScenarioSpec

# detect_ms is an exact grid 10..110 over 21 runs per group: q(p) = 10 + 100·p
GRID_SPECS = [
    ScenarioSpec("S1-leader", backends=("fuse", "dm"), runs=21, partitions=3, leader_partitions=2,
                 dists={"detect_ms": Dist("grid", 10, 110)}, backend_scale={}),
    ScenarioSpec("S4-timeout", backends=("fuse",), configs=(3000, 6000), runs=11, partitions=2,
                 leader_partitions=1, timeout_shutdown=True,
                 dists={"timeout_error_ms": Dist("grid", -100, 300), "detect_ms": Dist("grid", 10, 110)}),
]


@pytest.fixture(scope="session")
def grid_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid_runs")
    truth = synth.generate(root, GRID_SPECS, seed=11)
    return root, truth, rio.find_run_dirs([root])


@pytest.fixture(scope="session")
def pandas_summary(grid_runs):
    from harness.analysis import pandas_engine

    return pandas_engine.analyze(grid_runs[2])


@pytest.fixture(scope="session")
def spark():
    """ONE local SparkSession for the whole test session (local[2], 2 shuffle partitions)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("jbodlab-tests")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _write_hand_run(root):
    """A fault that is never healed, a partition that never recovers, gaps around the window."""
    run = root / "hand"
    rio.write_run_json(run, rs.RunInfo(run_id="hand", scenario="S9", seed=0, fault_backend="fuse"))
    ms = 1_000_000
    ev = [rs.event_row(o, run_id="hand", scenario="S9", source=s) for s, o in [
        ("harness", {"ts_ns": 1000 * ms, "event": "fault_injected", "fault_kind": "error"}),  # no fault_id
        ("node", {"ts_ns": 1040 * ms, "event": "dir_offline", "node_id": 1}),
        ("node", {"ts_ns": 1900 * ms, "event": "dir_offline", "node_id": 1}),  # not first: ignored
        ("node", {"ts_ns": 900 * ms, "event": "registered", "node_id": 1}),  # before the fault: ignored
        ("node", {"ts_ns": 3000 * ms, "event": "halt", "node_id": 1}),  # the run's last event: window end
    ]]
    rio.write_table(run, "events", ev)
    ops = []
    # partition 0: ok at 900, 990, (fail at 1010, 1100), ok at 1500, 1600 → last 990, first 1500
    for p, seq in ((0, [(900, "ok"), (990, "ok"), (1010, "fail"), (1100, "fail"), (1500, "ok"), (1600, "ok")]),
                   (1, [(950, "ok"), (1200, "fail")]),  # never recovers
                   (2, [(1100, "ok"), (1300, "ok")])):  # nothing before the fault
        for t, outcome in seq:
            ops.append(dict(run_id="hand", scenario="S9", op="produce", topic="t", partition=p, outcome=outcome,
                            ts_invoke_ns=(t - 5) * ms, ts_complete_ns=t * ms))
    rio.write_table(run, "client_ops", ops)
    rio.write_table(run, "metrics", [dict(run_id="hand", scenario="S9", backend="fuse", metric="detect_ms",
                                         value=40.0, unit="ms", config="default"),
                                    dict(run_id="hand", scenario="S9", backend="fuse", metric="isr_shrink_ms",
                                         value=12.0, unit="ms", partition=0)])  # no topic, default config
    _write_two_fault_run(root)
    return run


def _write_two_fault_run(root):
    """One run (a soak) with two faults, each healed: windows, joins and delays per fault."""
    run = root / "soak"
    rio.write_run_json(run, rs.RunInfo(run_id="soak", scenario="S11", seed=0, fault_backend="dm"))
    ms = 1_000_000
    ev = [rs.event_row(o, run_id="soak", scenario="S11", source=s) for s, o in [
        ("harness", {"ts_ns": 1000 * ms, "event": "fault_injected", "fault_id": "a", "fault_kind": "error"}),
        ("node", {"ts_ns": 1030 * ms, "event": "dir_offline", "node_id": 1}),
        ("harness", {"ts_ns": 2000 * ms, "event": "fault_healed", "fault_id": "a"}),
        ("harness", {"ts_ns": 5000 * ms, "event": "fault_injected", "fault_id": "b", "fault_kind": "delay(50)"}),
        ("node", {"ts_ns": 5070 * ms, "event": "dir_offline", "node_id": 2}),
        ("harness", {"ts_ns": 6000 * ms, "event": "fault_healed", "fault_id": "b"}),
    ]]
    rio.write_table(run, "events", ev)
    oks = [900, 1200, 1250, 4950, 5400, 5450]
    rio.write_table(run, "client_ops", [dict(run_id="soak", scenario="S11", op="produce", topic="t", partition=0,
                                            outcome="ok", ts_invoke_ns=(t - 1) * ms, ts_complete_ns=t * ms)
                                       for t in oks])
    return run


@pytest.fixture(scope="session")
def write_hand_run():
    return _write_hand_run


def _write_service_run(root, *, name="svc", partitions=2, heal=True, restart=True):
    """A recorded run (record_run) of a hand-built history: steady produces on every partition,
    a disk fault on broker 1's d1 at 5 s (healed at 9 s, or never), a restart of broker 2 at 7 s
    (an instantaneous fault), t1-0 failing for 1 s after the fault. Returns (run_dir, history)."""
    from harness.results.recorder import record_run
    from harness.scenario.model import Scenario
    from harness.scenario.sections import TopicSpec, Workload
    from tests.harness.builders import H
    from tests.harness.test_service import FAULT, Ops, base

    h = base(heal_at=9000 if heal else None)
    if restart:
        h.harness(7000, "fault_injected", 2, fault_id="f1", kind="process", action="restart", fault_kind="restart",
                  node_ref="broker:2")
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, FAULT + 1000, 30, outcome="info").run(FAULT + 1000, 15000, 20)
    for p in range(1, partitions):
        Ops(h, p).run(0, 15000, 20 + p)
    history = h.build()
    scenario = Scenario(id="X", name=name, checks=("service",),
                        workload=Workload(topics=(TopicSpec(name="t1", partitions=partitions),)))
    run_dir = record_run(root, scenario=scenario, history=history, run_id=name, backend="fuse", fidelity="test")
    return run_dir, history


@pytest.fixture(scope="session")
def service_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("service_runs")
    return {"healed": _write_service_run(root, name="svc-healed"),
            "open": _write_service_run(root, name="svc-open", heal=False, restart=False),
            "wide": _write_service_run(root, name="svc-wide", partitions=14, restart=False)}
