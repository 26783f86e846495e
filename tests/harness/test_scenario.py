"""Scenario values: round trip, catalog matrix, files, CLI, and errors that name the field."""

import argparse
import json

import pytest

from harness.scenario.faults import (ADMIN_ACTIONS, DISK_MODES, FAULT_CLASSES, FAULT_KINDS, NETWORK_ACTIONS, PROCESS_ACTIONS,
                                     AdminAction, DiskFault, MoveReplica, NetworkFault, ProcessFault, ReplaceDisk,
                                     soak_schedule)
from harness.scenario.fields import ScenarioError
from harness.cli.scenario import add_scenario_arguments, scenario_from_args
from harness.scenario.model import Scenario
from harness.scenario.text import apply_override, parse_scenario_text
from harness.catalog.resolve import load_scenario
from harness.catalog import catalog

pytestmark = pytest.mark.unit


def problems_of(data) -> dict[str, str]:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_dict(data)
    return dict(info.value.problems)


def base() -> dict:
    return catalog.leader_dir_fails().to_dict()


@pytest.mark.parametrize("scenario", catalog.all_scenarios(seed=7), ids=lambda s: s.variant)
def test_every_catalog_scenario_round_trips_through_its_run_json_form(scenario):
    text = json.dumps(scenario.to_dict())
    again = Scenario.from_dict(json.loads(text))
    assert again == scenario and again.seed == 7
    assert scenario.checks and scenario.expect.must_show


def test_catalog_matrix_has_s1_to_s23_and_bounce_variants():
    every = catalog.all_scenarios()
    assert {s.id for s in every} == {f"S{i}" for i in range(1, 24)}   # S17-S18: catalog_operator, S19: catalog_admin
    # a baseline of at least 10 s of service before the first fault (after the 1 s warm-up)
    for s in every:
        assert min(f.at_ms for f in s.faults) >= 11000, (s.variant, min(f.at_ms for f in s.faults))
    for name in catalog.CONTROLLER_SCENARIOS:   # the quorum scenarios need a quorum
        s = catalog.by_name(name)
        assert s.topology.controllers == 3 and "quorum_logs" in s.checks
        assert any(getattr(f, "node", None) == "controller:active" for f in s.faults)
    assert catalog.by_name("S13").expect.outcomes["controller:active"] == "halted"
    variants = [s.variant for s in every]
    assert len(variants) == len(set(variants))
    for name in catalog.BOUNCE_APPLIES:
        assert name in variants and f"{name}-bounce" in variants
    bounced = catalog.by_name("leader-dir-fails-bounce")
    restart = [f for f in bounced.faults if isinstance(f, ProcessFault)]
    assert bounced.bounce and restart and restart[0].node == "leader:t1/0" and restart[0].clean
    assert catalog.by_name("S4").expect.timeout_shutdown is True
    assert catalog.by_name("timeout-not-leader").expect.timeout_shutdown is False
    assert catalog.by_name("last-dir-fails").expect.outcomes == {"leader:t1/0": "halted"}
    # the default shape: several partitions to lead and follow per broker, several producers
    assert all("service" in s.checks for s in every)
    s1 = catalog.by_name("S1")
    assert s1.workload.topics[0].partitions == 12 and s1.workload.producers == 4
    assert catalog.by_name("S15").workload.topics[0].partitions >= 300
    with pytest.raises(KeyError, match="choose from"):
        catalog.by_name("nope")


def test_configs_are_shrunk_and_rendered_as_kafka_keys():
    props = catalog.leader_dir_fails().configs.broker_properties()
    assert props["broker.heartbeat.interval.ms"] == "500"
    assert props["broker.session.timeout.ms"] == "3000"
    assert props["log.dir.failure.timeout.ms"] == "5000"
    assert props["log.roll.ms"] == "3000"


def test_wrong_mode_names_the_field_and_suggests():
    d = base()
    d["faults"].append({"kind": "disk", "at_ms": 6000, "node": "broker:1", "dir": "d2", "mode": "eror"})
    msg = problems_of(d)["faults[1].mode"]
    assert msg.startswith("'eror' is not one of error, error-reads") and "did you mean 'error'" in msg


def test_many_problems_reported_at_once_with_paths():
    d = base()
    d["topology"]["brokers"] = 0
    d["topology"]["disks"] = 3
    d["workload"]["topics"][0]["partitions"] = "three"
    d["workload"]["acks"] = "2"
    d["faults"][0]["node"] = "broker:9"
    d["faults"][0]["at_ms"] = 99_000_000
    d["checks"].append("speed")
    d["expect"]["outcomes"]["broker:1"] = "dead"
    p = problems_of(d)
    assert p["topology.brokers"] == "0 is below the minimum 1"
    assert p["topology.disks"].startswith("unknown field")
    assert p["workload.topics[0].partitions"] == "must be an integer, got a string 'three'"
    assert p["workload.acks"].startswith("'2' is not one of all, 1, 0")
    assert p["faults[0].node"].startswith("no broker 9")
    assert "not before the end of the workload" in p["faults[0].at_ms"]
    assert p[f"checks[{len(d['checks']) - 1}]"].startswith("'speed' is not one of")
    assert p["expect.outcomes.broker:1"].startswith("'dead' is not one of alive, shutdown, halted")


@pytest.mark.parametrize("fault, path, needle", [
    ({"kind": "disk", "at_ms": 1, "node": "broker:1", "dir": "d9"}, "faults[0].dir", "3 data dirs"),
    ({"kind": "disk", "at_ms": 1, "node": "broker:1", "dir": "d1", "mode": "flaky"}, "faults[0].p", "needs p"),
    ({"kind": "disk", "at_ms": 1, "node": "controller:3001", "dir": "d1"}, "faults[0].dir", "only its metadata dir"),
    ({"kind": "network", "at_ms": 1, "node": "controller:7", "action": "isolate"}, "faults[0].node", "no controller 7"),
    ({"kind": "disk", "at_ms": 1, "node": "leader:t9/0", "dir": "d1"}, "faults[0].node", "'t9' is not one of t1"),
    ({"kind": "disk", "at_ms": 1, "node": "leader:t1/15", "dir": "d1"}, "faults[0].node", "partitions 0..11"),
    ({"kind": "network", "at_ms": 1, "node": "broker:1", "action": "partition"}, "faults[0].peer", "needs peer"),
    ({"kind": "network", "at_ms": 1, "node": "broker:1", "action": "delay"}, "faults[0].delay_ms", "needs delay_ms"),
    ({"kind": "process", "at_ms": 1, "node": "broker:1", "action": "restart", "duration_ms": 5},
     "faults[0].duration_ms", "instantaneous"),
    ({"kind": "replace-disk", "at_ms": 1, "node": "broker:1", "dir": "all"}, "faults[0].dir", "name one dir"),
    ({"kind": "flood", "at_ms": 1}, "faults[0].kind", "'flood' is not one of disk"),
    ({"kind": "disk", "at_ms": -1, "node": "broker:1", "dir": "d1", "colour": 1}, "faults[0].colour", "unknown field"),
])
def test_fault_validation(fault, path, needle):
    d = base()
    d["faults"] = [fault]
    p = problems_of(d)
    assert needle in p[path], p


def test_cross_field_rules():
    d = base()
    d["configs"]["session_timeout_ms"] = 400
    d["configs"]["broker_overrides"] = {"log.roll.ms": "1", "num.io.threads": 8}
    d["workload"]["topics"][0]["replication_factor"] = 4
    d["bounce"] = True
    p = problems_of(d)
    assert "must exceed heartbeat_interval_ms" in p["configs.session_timeout_ms"]
    assert p["configs.broker_overrides.log.roll.ms"] == "set it with configs.log_roll_ms"
    assert "exceeds the 3 brokers" in p["workload.topics[0].replication_factor"]
    assert "no process restart" in p["bounce"]


def test_files_json_toml_and_run_json(tmp_path):
    s = catalog.follower_dir_fails(seed=11)
    (tmp_path / "s.json").write_text(s.to_json())
    assert load_scenario(tmp_path / "s.json") == s
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r1", "scenario": s.to_dict()}))
    assert load_scenario(tmp_path / "run.json") == s
    toml = '''
id = "X1"
name = "my-leader-dir"
seed = 3
[topology]
brokers = 3
dirs_per_broker = 2
[configs]
log_dir_failure_timeout_ms = 4000
[[workload.topics]]
name = "t1"
partitions = 2
[[faults]]
kind = "disk"
at_ms = 5000
node = "leader:t1/0"
dir = "replica:t1/0"
mode = "error-writes"
[expect]
outcomes = { "leader:t1/0" = "alive" }
leader_moves = true
'''
    (tmp_path / "s.toml").write_text(toml)
    got = load_scenario(tmp_path / "s.toml")
    assert got.faults == (DiskFault(at_ms=5000, node="leader:t1/0", dir="replica:t1/0", mode="error-writes"),)
    assert got.topology.dirs_per_broker == 2 and got.configs.log_dir_failure_timeout_ms == 4000
    with pytest.raises(ScenarioError, match="unknown format"):
        load_scenario(tmp_path / "s.yaml")
    with pytest.raises(ScenarioError, match="json line 1"):
        parse_scenario_text("{", "json")
    with pytest.raises(ScenarioError, match="No such file"):
        load_scenario(tmp_path / "missing.json")


def test_cli_arguments_and_overrides(tmp_path):
    parser = argparse.ArgumentParser()
    add_scenario_arguments(parser)
    args = parser.parse_args(["--scenario", "leader-dir-fails", "--bounce", "--seed", "9",
                              "--set", "workload.rate_per_s=500", "--set", "faults[0].mode=error-writes",
                              "--set", "configs.broker_overrides={\"num.io.threads\": \"4\"}"])
    s = scenario_from_args(args)
    assert s.bounce and s.seed == 9 and s.workload.rate_per_s == 500 and s.faults[0].mode == "error-writes"
    assert s.configs.broker_properties()["num.io.threads"] == "4"
    bad = parser.parse_args(["--scenario", "S2", "--set", "faults[0].mode=eror"])
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.mode: 'eror' is not one of"):
        scenario_from_args(bad)
    with pytest.raises(ScenarioError, match=r"faults\[5\]: index out of range"):
        apply_override(base(), "faults[5].mode=error")
    with pytest.raises(ScenarioError, match="not PATH=VALUE"):
        apply_override(base(), "faults")
    path = tmp_path / "s.json"
    path.write_text(catalog.replace_disk().to_json())
    assert scenario_from_args(parser.parse_args(["--scenario", str(path)])).name == "replace-disk"


def test_soak_schedule_is_deterministic_per_seed_and_survivable():
    a = soak_schedule(5, duration_ms=180_000, broker_ids=[1, 2, 3], dirs_per_broker=3, controller_id=3001)
    b = soak_schedule(5, duration_ms=180_000, broker_ids=[1, 2, 3], dirs_per_broker=3, controller_id=3001)
    c = soak_schedule(6, duration_ms=180_000, broker_ids=[1, 2, 3], dirs_per_broker=3, controller_id=3001)
    assert a == b and a != c and len(a) >= 5
    from harness.scenario.faults import fault_seed
    assert fault_seed(5, 0) != fault_seed(5, 1) and fault_seed(5, 1) == fault_seed(5, 1)
    assert all(f.at_ms < 180_000 for f in a)
    assert not any(isinstance(f, DiskFault) and f.dir in ("all", "metadata") for f in a)
    for seed in range(20):   # however short, a soak fails a dir first (its checks judge a dir failure)
        short = soak_schedule(seed, duration_ms=40_000, broker_ids=[1, 2, 3], dirs_per_broker=2, controller_id=3001,
                              first_at_ms=11_000)
        assert isinstance(short[0], DiskFault) and short[0].mode == "error" and short[0].at_ms == 11_000
    Scenario.from_dict(catalog.soak(seed=5).to_dict())


def test_scenario_command(tmp_path, capsys):
    from harness.cli import scenario as scenario_cmd
    parser = argparse.ArgumentParser()
    scenario_cmd.configure(parser)
    assert scenario_cmd.run(parser.parse_args(["list"])) == 0
    assert "leader-dir-fails-bounce" in capsys.readouterr().out
    assert scenario_cmd.run(parser.parse_args(["show", "--scenario", "S5"])) == 0
    assert json.loads(capsys.readouterr().out)["expect"]["timeout_shutdown"] is False
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(catalog.soak(minutes=1).to_json())
    d = base()
    d["faults"][0]["mode"] = "eror"
    bad.write_text(json.dumps(d))
    assert scenario_cmd.run(parser.parse_args(["validate", str(good), str(bad)])) == 1
    out = capsys.readouterr()
    assert "good.json: ok" in out.out and "bad.json: faults[0].mode: 'eror' is not one of" in out.err


def test_fault_on_a_topic_before_it_exists():
    d = catalog.restart_fenced_until_assigned().to_dict()
    d["faults"].append({"kind": "disk", "at_ms": 12000, "node": "leader:t2/0", "dir": "d1"})
    assert problems_of(d) == {"faults[1].node": "topic 't2' is only created at 14000 ms (workload.topics)"}


def test_null_and_empty_values():
    d = base()
    d["workload"]["rate_per_s"] = None
    d["faults"][0]["duration_ms"] = None      # optional: null means "until the final heal"
    d["workload"]["topics"] = []
    d["faults"] = []
    p = problems_of(d)
    assert p == {"workload.rate_per_s": "must not be null", "workload.topics": "needs at least one topic",
                 "expect.outcomes.leader:t1/0": "no topic 't1': the workload has no valid topics"}
    with pytest.raises(ScenarioError, match="<scenario>: must be a table of fields, got a list"):
        Scenario.from_dict([1])


def test_s16_targets_the_group_coordinators_offsets_dir():
    from broker_impl.groups.state.records import partition_for
    s = catalog.by_name("S16")
    p = partition_for(s.workload.group_id, int(s.configs.broker_overrides["offsets.topic.num.partitions"]))
    (fault,) = s.faults
    assert (fault.node, fault.dir) == (f"leader:__consumer_offsets/{p}", f"replica:__consumer_offsets/{p}")
    assert s.workload.group_consumers == 2 and "group_consumption" in s.checks
    data = s.to_dict()
    data["workload"]["group_consumers"] = 0     # no group: the offsets topic is no known fault target
    with pytest.raises(ScenarioError, match="__consumer_offsets"):
        Scenario.from_dict(data)


@pytest.mark.parametrize("fault,problem", [
    ({"kind": "disk", "at_ms": 100, "node": "leader:t1/0", "dir": "replica:t1/0", "mode": "corrupt-reads",
      "file": "t1-0:oldest-segment", "p": 0.5}, None),
    ({"kind": "disk", "at_ms": 100, "node": "controller:3001", "dir": "metadata", "mode": "bad-blocks",
      "file": "metadata-log"}, None),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "all+metadata", "mode": "lose-unsynced"}, None),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d2", "mode": "permission"}, None),
    ({"kind": "process", "at_ms": 200, "node": "broker:1", "action": "power-cut", "duration_ms": 2000}, None),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "metadata", "mode": "error-reads",
      "file": "t1-0:oldest-segment"}, "a data partition: not in the metadata dir"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "lose-unsynced",
      "file": "t1-0:index"}, "acts on a whole dir, not on a file"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "bad-blocks"}, "needs file"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "all", "mode": "error", "file": "t1-0:segments"},
     "a file lies in one dir"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "error", "file": "t1-99:segments"},
     "partitions 0..11"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "error", "file": "oops"},
     "is not a file target"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "corrupt-writes", "p": 0}, "within (0, 1]"),
    ({"kind": "disk", "at_ms": 100, "node": "broker:1", "dir": "d1", "mode": "enospc", "p": 0.3}, "only for modes"),
])
def test_partial_silent_and_lost_write_faults_validate(fault, problem):
    from harness.scenario.fields import ScenarioError
    from harness.scenario.model import Scenario
    data = {"id": "X", "name": "x", "faults": [fault]}
    if problem is None:
        s = Scenario.from_dict(data)
        assert Scenario.from_dict(s.to_dict()) == s
        return
    with pytest.raises(ScenarioError) as exc:
        Scenario.from_dict(data)
    assert any(problem in msg for _path, msg in exc.value.problems), exc.value.problems


# the ``fault_kind`` label of every fault kind, as the results tables (Parquet) store it: a label
# that changed its spelling would split one kind of fault into two across old and new runs
FAULT_LABELS = [
    (DiskFault(at_ms=0, node="broker:1", dir="d1"), "error"),
    *[(DiskFault(at_ms=0, node="broker:1", dir="d1", mode=m), m)
      for m in ("error-reads", "error-writes", "enospc", "remove", "bad-blocks", "lose-unsynced", "permission")],
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="flaky", p=0.05), "flaky(0.05)"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="corrupt-reads", p=0.1), "corrupt-reads(0.1)"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="corrupt-writes", p=1.0), "corrupt-writes(1.0)"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="delay", delay_ms=50), "delay(50ms)"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="error", file="t1-0:segments"), "error[t1-0:segments]"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="flaky", p=0.2, file="checkpoint:recovery-point-offset-checkpoint"),
     "flaky(0.2)[checkpoint:recovery-point-offset-checkpoint]"),
    (DiskFault(at_ms=0, node="broker:1", dir="d1", mode="delay", delay_ms=5, file="metadata-log"),
     "delay(5ms)[metadata-log]"),
    (NetworkFault(at_ms=0, action="partition", node="broker:1", peer="controller:0"), "partition"),
    (NetworkFault(at_ms=0, action="isolate", node="broker:1"), "isolate"),
    (NetworkFault(at_ms=0, action="delay", node="broker:1", delay_ms=50, jitter_ms=5), "net-delay(50ms)"),
    (NetworkFault(at_ms=0, action="loss", node="broker:1", loss_pct=5.0), "loss(5.0%)"),
    (ProcessFault(at_ms=0, action="kill", node="broker:1"), "kill(SIGKILL)"),
    (ProcessFault(at_ms=0, action="kill", node="broker:1", signal="SIGTERM"), "kill(SIGTERM)"),
    (ProcessFault(at_ms=0, action="pause", node="broker:1"), "pause"),
    (ProcessFault(at_ms=0, action="restart", node="broker:1", clean=False), "restart"),
    (ProcessFault(at_ms=0, action="power-cut", node="broker:1"), "power-cut"),
    (ReplaceDisk(at_ms=0, node="broker:1", dir="d1"), "replace-disk"),
    (MoveReplica(at_ms=0, node="broker:1", topic="t1", partition=0, to_dir="d2"), "move-replica"),
    (AdminAction(at_ms=0, action="delete-topic", topic="t1"), "delete-topic"),
    (AdminAction(at_ms=0, action="create-topic", topic="t2", partitions=3, replication_factor=3), "create-topic"),
    (AdminAction(at_ms=0, action="reassign", node="broker:1"), "reassign"),
    (AdminAction(at_ms=0, action="elect"), "elect(preferred)"),
    (AdminAction(at_ms=0, action="elect", election="preferred"), "elect(preferred)"),
    (AdminAction(at_ms=0, action="elect", election="unclean"), "elect(unclean)"),
]


@pytest.mark.parametrize("fault, label", FAULT_LABELS, ids=[lbl for _f, lbl in FAULT_LABELS])
def test_every_fault_kind_names_itself_as_the_results_tables_store_it(fault, label):
    assert fault.label() == label


def test_the_label_table_covers_every_fault_kind_and_mode():
    faults = [f for f, _l in FAULT_LABELS]
    assert {f.kind for f in faults} == set(FAULT_KINDS) == set(FAULT_CLASSES)
    assert {f.mode for f in faults if isinstance(f, DiskFault)} == set(DISK_MODES)
    assert {f.action for f in faults if isinstance(f, NetworkFault)} == set(NETWORK_ACTIONS)
    assert {f.action for f in faults if isinstance(f, ProcessFault)} == set(PROCESS_ACTIONS)
    assert {f.action for f in faults if isinstance(f, AdminAction)} == set(ADMIN_ACTIONS)
