"""Unit tests of the runner's pure parts: configs from the scenario value, argument errors,
node refs, value ids, the summary table."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from harness.scenario.fields import ScenarioError
from harness.cli.run import resolve_scenarios, summary_lines
from harness.run.runner import RunOutcome, fidelity_label
from harness.cluster.node_configs import CONTAINER_RUN, node_defs, properties_text, render_properties
from harness.run.session import SessionError, node_ref
from harness.workload.producer import value_id_of, value_of
from kafka_common.config import parse_config
from harness.catalog.catalog import by_name

pytestmark = pytest.mark.unit


def test_node_defs_follow_the_topology() -> None:
    s = by_name("leader-dir-fails")
    nodes = node_defs(s)
    assert sorted(nodes) == [1, 2, 3, 3001, 3002, 3003]  # a 3-controller quorum by default
    assert nodes[1].name == "broker-1" and nodes[1].data_dirs == ("d1", "d2", "d3")
    assert nodes[1].disk_names == ("d1", "d2", "d3", "meta")
    assert nodes[3001].role == "controller" and nodes[3001].disk_names == ("meta",)


def test_broker_properties_parse_and_keep_events_outside_log_dirs() -> None:
    s = by_name("leader-dir-fails")
    props = render_properties(node_defs(s)[2], s, cluster_id="AAAAAAAAAAAAAAAAAAAAAQ")
    cfg = parse_config(properties_text(props).replace("@IP@", "10.0.0.2"))
    cfg = cfg[0] if isinstance(cfg, tuple) else cfg
    assert cfg.node_id == 2 and cfg.process_roles == ("broker",)
    assert cfg.log_dirs == ("/jbodlab/disks/d1/data", "/jbodlab/disks/d2/data", "/jbodlab/disks/d3/data")
    assert cfg.metadata_log_dir == "/jbodlab/disks/meta/data"
    assert cfg.events_file.startswith(CONTAINER_RUN + "/")
    assert not any(cfg.events_file.startswith(d) for d in cfg.log_dirs)
    # the scenario's shrunk timings are what the broker gets
    assert cfg.log_dir_failure_timeout_ms == s.configs.log_dir_failure_timeout_ms
    assert cfg.broker_heartbeat_interval_ms == s.configs.heartbeat_interval_ms
    assert cfg.broker_session_timeout_ms == s.configs.session_timeout_ms
    assert props["controller.quorum.voters"] == \
        "3001@controller-3001:9093,3002@controller-3002:9093,3003@controller-3003:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://@IP@:9092"


def test_controller_properties_parse() -> None:
    s = by_name("failure-timeout-shutdown")
    props = render_properties(node_defs(s)[3001], s, cluster_id="AAAAAAAAAAAAAAAAAAAAAQ")
    cfg = parse_config(properties_text(props))
    cfg = cfg[0] if isinstance(cfg, tuple) else cfg
    assert cfg.process_roles == ("controller",) and cfg.node_id == 3001
    assert cfg.broker_session_timeout_ms == s.configs.session_timeout_ms
    assert "log.dirs" not in props


def test_unknown_scenario_names_the_argument() -> None:
    with pytest.raises(ScenarioError) as exc:
        resolve_scenarios(["no-such-thing"], overrides=[], seed=None, bounce=False, runs=1)
    (field, msg), = exc.value.problems
    assert field == "SCENARIO" and "leader-dir-fails" in msg


def test_bad_override_names_the_field() -> None:
    with pytest.raises(ScenarioError) as exc:
        resolve_scenarios(["S1"], overrides=["faults[0].mode=eror"], seed=None, bounce=False, runs=1)
    assert any(f == "faults[0].mode" and "did you mean 'error'" in m for f, m in exc.value.problems)


def test_bad_runs_and_seed() -> None:
    with pytest.raises(ScenarioError, match="--runs"):
        resolve_scenarios(["S1"], overrides=[], seed=None, bounce=False, runs=0)
    with pytest.raises(ScenarioError, match="--seed"):
        resolve_scenarios(["S1"], overrides=[], seed=-1, bounce=False, runs=1)


def test_runs_get_consecutive_seeds() -> None:
    got = resolve_scenarios(["S1", "follower-dir-fails"], overrides=["workload.duration_ms=19000"], seed=7,
                            bounce=False, runs=2)
    assert [(s.name, s.seed) for s in got] == [("leader-dir-fails", 7), ("leader-dir-fails", 8),
                                               ("follower-dir-fails", 7), ("follower-dir-fails", 8)]
    assert all(s.workload.duration_ms == 19000 for s in got)


def test_scenario_file_errors_name_the_field(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "X1", "name": "x", "topology": {"brokers": 2}, '
                   '"workload": {"topics": [{"name": "t1", "replication_factor": 3}]}}')
    with pytest.raises(ScenarioError) as exc:
        resolve_scenarios([str(bad)], overrides=[], seed=None, bounce=False, runs=1)
    assert any(f == "workload.topics[0].replication_factor" for f, _ in exc.value.problems)


def test_cli_run_with_a_wrong_name_exits_2_naming_it() -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "S99"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "SCENARIO: no scenario 'S99'" in proc.stderr


@pytest.mark.parametrize("text,ref", [("broker-1", "broker:1"), ("2", "broker:2"), ("broker:3", "broker:3"),
                                      ("controller-3001", "controller:3001"), ("3001", "controller:3001"),
                                      ("leader:t1/0", "leader:t1/0")])
def test_session_node_refs(text: str, ref: str) -> None:
    assert node_ref(text) == ref


def test_session_node_ref_error_names_node() -> None:
    with pytest.raises(SessionError, match="NODE: 'disk-7'"):
        node_ref("disk-7")


def test_values_carry_their_id() -> None:
    rng = random.Random(1)
    v = value_of("abc-p0-17", 64, rng)
    assert len(v) == 64 and value_id_of(v) == "abc-p0-17"
    assert value_id_of(b"no separator") is None and value_id_of(None) is None


def test_a_consumer_tells_a_corrupt_value_from_the_one_produced() -> None:
    from harness.workload.producer import consumed_error, value_intact
    v = value_of("abc-p1-3", 100)
    assert v == value_of("abc-p1-3", 100) and value_intact(v) and consumed_error(v) is None
    for i in (0, 5, 40, 99):                       # one flipped bit anywhere: in the id or the padding
        bad = bytearray(v)
        bad[i] ^= 0x04
        assert not value_intact(bytes(bad)) and consumed_error(bytes(bad)).startswith("corrupt value")
    assert consumed_error(b"garbage").startswith("corrupt value: no value id")


def test_summary_lines_show_verdicts_and_metrics() -> None:
    from harness.checkers import CheckReport, CheckResult
    s = by_name("S1")
    report = CheckReport(False, (CheckResult("durability", True, "ok", {}),
                                 CheckResult("failover", False, "leader stayed", {})))
    o = RunOutcome(s, "20260101T000000-leader-dir-fails-s0", None, backend="fuse", fidelity=fidelity_label("fuse"),
                   report=report, metrics=[{"metric": "detect_ms", "value": 10.0, "unit": "ms"},
                                           {"metric": "detect_ms", "value": 30.0, "unit": "ms"}])
    text = "\n".join(summary_lines([o]))
    assert "failover: false — leader stayed" in text
    assert "failover" in text and " 0/1" in text and " 1/1" in text      # pass counts per check
    assert "detect_ms" in text and "2        20.0        29.8        30.0 ms" in text


@pytest.mark.parametrize("argv,message", [
    (["bad/name"], "TOPIC: topic name 'bad/name' has characters"),
    (["t1", "--records", "5"], "--replication-factor/--records: only with --recreate"),
    (["t1", "--recreate", "0"], "--recreate: 0 partitions; needs at least 1"),
    (["t1", "--recreate", "3", "--replication-factor", "0"], "--replication-factor: 0; needs at least 1"),
    (["t1"], "no chaos session at"),
])
def test_cli_delete_topic_refuses_bad_arguments_before_the_lab(tmp_path, argv, message) -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "delete-topic", *argv, "--session-dir",
                           str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
