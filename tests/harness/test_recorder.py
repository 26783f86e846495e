"""Recorder: a run written with results_schema reads back with pandas (and the schema reader)."""

import json

import pandas as pd
import pytest

from harness.results import tables as rio
from harness.results import schema as rs
from harness.checkers import run_checks
from harness.results.recorder import record_run
from harness.catalog.resolve import load_scenario
from harness.catalog import catalog
from tests.harness.builders import ns
from tests.harness.test_checkers import s1_history

pytestmark = pytest.mark.unit


def test_recorded_run_reads_back_with_pandas(tmp_path):
    scenario = catalog.leader_dir_fails(bounce=True, seed=4)
    history = s1_history().build()
    report = run_checks(scenario, history)
    resources = [{"node_id": 1, "pid": 100, "ts_ns": ns(1000), "cpu_percent": 12.5, "rss_bytes": 50_000_000}]
    run_dir = record_run(tmp_path, scenario=scenario, history=history, report=report, run_id="r-1",
                         resources=resources, backend="fuse", fidelity="block-layer EIO via FUSE",
                         node_configs={"1": {"log.dir.failure.timeout.ms": "5000"}})
    info = json.loads((run_dir / "run.json").read_text())
    assert info["scenario"] == "leader-dir-fails-bounce" and info["seed"] == 4
    assert info["scenario_value"]["faults"][0]["mode"] == "error" and info["fault_backend"] == "fuse"
    assert load_scenario(run_dir / "run.json") == scenario  # re-run the exact value

    def table(name):
        return pd.read_parquet(run_dir / name)

    events = table("events")
    assert len(events) == len(history)
    assert {"fault_injected", "dir_offline", "partition_change", "produce_ok", "consume_ok"} <= set(events["event"])
    fault = events[events["event"] == "fault_injected"].iloc[0]
    assert fault["fault_kind"] == "error" and fault["source"] == "harness" and fault["node_id"] == 1
    assert json.loads(fault["attrs"])["dir_ref"] == "replica:t1/0"
    ops = table("client_ops")
    assert set(ops["op"]) == {"produce", "consume"} and (ops[ops["op"] == "produce"]["outcome"] == "ok").all()
    metrics = table("metrics")
    assert set(metrics["metric"]) >= {"detect_ms", "isr_shrink_ms", "leader_failover_ms", "acked_lost"}
    assert metrics[metrics["metric"] == "detect_ms"]["value"].tolist() == [50.0]
    assert (metrics["backend"] == "fuse").all() and (metrics["log_dir_failure_timeout_ms"] == 5000).all()
    checks = table("checks").set_index("checker")
    assert checks.loc["durability", "valid"] == "true" and checks.loc["failover", "valid"] == "true"
    # 4 produces before the fault are too few to judge service: the composite says unknown
    assert checks.loc["service", "valid"] == "unknown" and checks.loc["all", "valid"] == "unknown"
    assert str(checks.loc["durability", "scenario"]) == "leader-dir-fails-bounce"
    assert table("resources")["cpu_percent"].tolist() == [12.5]
    runs = rio.read_runs([tmp_path])
    assert runs["checks"].num_rows == len(report.results) + 1


def test_bad_rows_write_nothing(tmp_path):
    scenario = catalog.leader_dir_fails()
    with pytest.raises(rs.ResultsError):
        record_run(tmp_path, scenario=scenario, history=s1_history().build(), run_id="r-2",
                   resources=[{"node_id": 1, "ts_ns": "later"}])
    assert not (tmp_path / "r-2").exists()


def test_odd_event_types_are_kept_in_attrs_not_lost(tmp_path):
    from harness.history.model import Event, History
    h = s1_history().build()
    odd = Event(ts_ns=ns(7000), source="node", event="leader_change", node_id=2, role="broker",
                attrs={"topic": "t1", "partition": "0", "isr": ["2"], "leader": True})
    history = History.of(list(h.entries) + [odd], ["b2.events:9: not a JSON object: 'x'"])
    run_dir = record_run(tmp_path, scenario=catalog.leader_dir_fails(), history=history, run_id="r-3")
    events = pd.read_parquet(run_dir / "events")
    row = events[events["event"] == "leader_change"].iloc[0]
    assert pd.isna(row["partition"]) and json.loads(row["attrs"])["partition"] == "0"
    problems = (run_dir / "history_problems.txt").read_text()
    assert "b2.events:9" in problems and "partition='0' has the wrong type" in problems
