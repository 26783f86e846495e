"""harness.generator.plan: a scenario's schedule as a timed plan of operations (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.generator.plan import CreateTopic, Heal, Inject, Plan, StartReader, plan_of
from harness.scenario.faults import DiskFault, NetworkFault, ProcessFault, ReplaceDisk
from harness.scenario.sections import ReaderSpec, TopicSpec
from harness.catalog import catalog

pytestmark = pytest.mark.unit


def _scenario(faults, topics=(), readers=()):
    s = catalog.leader_dir_fails()
    w = replace(s.workload, topics=(*s.workload.topics, *topics), readers=tuple(readers))
    return replace(s, faults=tuple(faults), workload=w)


def test_operations_in_time_order_each_heal_after_its_duration():
    faults = [DiskFault(at_ms=5000, node="broker:1", dir="d1", mode="flaky", p=0.1, duration_ms=2000),
              NetworkFault(at_ms=1000, action="isolate", node="broker:2", duration_ms=500),
              ProcessFault(at_ms=3000, action="kill", node="broker:3")]          # no duration: final heal
    late = TopicSpec(name="late", partitions=2, replication_factor=3, create_at_ms=4000)
    reader = ReaderSpec(topic="t1", partition=0, start_at_ms=6500)
    plan = plan_of(_scenario(faults, topics=[late], readers=[reader]))
    assert plan.operations == (
        Inject(1000, 1, faults[1]), Heal(1500, 1), Inject(3000, 2, faults[2]), CreateTopic(4000, late),
        Inject(5000, 0, faults[0]), StartReader(6500, 0, reader), Heal(7000, 0))
    assert [op.kind for op in plan.operations] == ["inject", "heal", "inject", "topic", "inject", "reader", "heal"]


def test_same_millisecond_keeps_the_scenarios_order():
    """Fault by fault (inject, then its heal), then the topics, then the readers: a disk
    replaced at the moment another fault heals comes after that heal only if listed after."""
    faults = [DiskFault(at_ms=1000, node="broker:1", dir="d1", mode="error", duration_ms=1000),
              ReplaceDisk(at_ms=2000, node="broker:1", dir="d1"),
              ProcessFault(at_ms=2000, action="pause", node="broker:2", duration_ms=0)]
    topic = TopicSpec(name="t2", partitions=1, replication_factor=3, create_at_ms=2000)
    reader = ReaderSpec(topic="t1", partition=0, start_at_ms=2000)
    ops = plan_of(_scenario(faults, topics=[topic], readers=[reader])).operations
    assert ops[1:] == (Heal(2000, 0), Inject(2000, 1, faults[1]), Inject(2000, 2, faults[2]), Heal(2000, 2),
                       CreateTopic(2000, topic), StartReader(2000, 0, reader))


def test_topics_created_before_the_workload_are_not_operations():
    s = _scenario([])
    assert all(t.create_at_ms is None for t in s.workload.topics)
    assert plan_of(s) == Plan(())


def test_due_takes_what_is_due_and_leaves_the_rest():
    faults = [NetworkFault(at_ms=100, action="isolate", node="broker:1", duration_ms=100),
              NetworkFault(at_ms=300, action="isolate", node="broker:2")]
    plan = plan_of(_scenario(faults))
    due, rest = plan.due(99.9)
    assert due == () and rest == plan
    due, rest = plan.due(200)
    assert due == (Inject(100, 0, faults[0]), Heal(200, 0)) and len(rest) == 1
    due, rest = rest.due(10_000)
    assert due == (Inject(300, 1, faults[1]),) and rest == Plan(())


def test_every_catalog_scenario_has_a_plan_in_time_order():
    for s in catalog.all_scenarios(seed=3):
        ops = plan_of(s).operations
        assert [op.at_ms for op in ops] == sorted(op.at_ms for op in ops)
        assert sum(isinstance(op, Inject) for op in ops) == len(s.faults)
