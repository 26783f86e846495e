"""The admin schedule value (validation, labels), the ``topic_admin`` check and the
durability rule for a deleted topic's records, on hand-built histories."""

import pytest

from builders import DIRS, H
from harness.checkers.durability import analyse_durability
from harness.checkers.topic_admin import check_topic_admin
from harness.scenario.faults import AdminAction, fault_to_dict
from harness.scenario.fault_tables import TargetCheck, fault_from_dict
from harness.scenario.fields import Problems
from harness.catalog.catalog import by_name

pytestmark = pytest.mark.unit
OLD, NEW = "OLDtopicidaaaaaaaaaaaa", "NEWtopicidaaaaaaaaaaaa"


def admin(h, t_ms, fid, action, tid, result="none", topic="t2"):
    return h.harness(t_ms, "fault_injected", None, fault_id=fid, kind="admin", action=action, fault_kind=action,
                     topic=topic, topic_id=tid, result=result)


def incarnation(h, t_ms, tid, isr=(1, 2, 3)):
    for p in range(2):
        h.ctl(t_ms, "partition_change", topic="t2", topic_id=tid, partition=p, leader=1, isr=list(isr),
              replicas=[1, 2, 3], directories=[DIRS[1][p], DIRS[2][p], DIRS[3][p]])
    return h


def deleted(h, t_ms, broker, p, tid, stray=False, removed=True):
    path = f"/d/t2-{p}.x{broker}{p}{t_ms}-delete"
    h.node(t_ms, broker, "broker", "log_deleted", topic="t2", partition=p, topic_id=tid, stray=stray, path=path)
    if removed:
        h.node(t_ms + 1, broker, "broker", "log_removed", topic="t2", partition=p, topic_id=tid, path=path)
    return h


def story(*, stray_removed=True, mixed=False, new_isr=(1, 2, 3)):
    """t2 created (2 partitions × RF 3), broker 2's d1 (t2-0) fails, t2 deleted (every replica
    deleted but broker 2's t2-0), re-created, the disk repaired; broker 2 then deletes the stray."""
    h = H()
    admin(h, 100, "f0", "create-topic", OLD)
    incarnation(h, 101, OLD)
    h.produce(110, 120, "admin-f0-0", 0, 0, topic="t2", process="admin-f0")
    h.disk_fault(200, 2, 0)
    admin(h, 300, "f2", "delete-topic", OLD)
    for b in (1, 2, 3):
        for p in (0, 1):
            if (b, p) != (2, 0):
                deleted(h, 301, b, p, OLD)
    admin(h, 400, "f3", "create-topic", NEW)
    incarnation(h, 401, NEW, new_isr)
    h.produce(410, 420, "admin-f3-0", 0, 0, topic="t2", process="admin-f3")
    h.produce(411, 421, "admin-f3-1", 1, 0, topic="t2", process="admin-f3")
    h.harness(500, "disk_repaired", 2, dir_id=DIRS[2][0], dir="d1")
    if stray_removed:
        deleted(h, 600, 2, 0, OLD, stray=True)
    h.consume(700, "admin-f3-0", 0, 0, topic="t2").consume(700, "admin-f3-1", 1, 0, topic="t2")
    if mixed:
        h.consume(700, "admin-f0-0", 0, 1, topic="t2")
    return h.build()


def test_stray_removed_and_recreated_topic_intact_is_true():
    r = check_topic_admin(None, story())
    assert r.valid is True, r.summary
    assert r.details["replicas_deleted"] == 6 and r.details["strays_deleted"] == 1
    assert r.details["new_records_checked"] == 2


def test_stray_left_behind_after_the_dir_came_back_is_false():
    r = check_topic_admin(None, story(stray_removed=False))
    assert r.valid is False and "t2-0" in r.summary and "never deleted" in r.summary


def test_old_records_read_from_the_new_topic_or_a_short_isr_is_false():
    assert check_topic_admin(None, story(mixed=True)).valid is False
    r = check_topic_admin(None, story(new_isr=(1, 3)))
    assert r.valid is False and "ISR" in r.summary


def test_a_dir_that_never_came_back_is_unknown_and_a_refusal_false():
    h = H()
    admin(h, 100, "f0", "create-topic", OLD)
    incarnation(h, 101, OLD)
    h.disk_fault(200, 2, 0)
    admin(h, 300, "f2", "delete-topic", OLD)
    for b, p in ((1, 0), (1, 1), (2, 1), (3, 0), (3, 1)):
        deleted(h, 301, b, p, OLD)
    assert check_topic_admin(None, h.build()).valid == "unknown"
    admin(h, 400, "f3", "create-topic", None, result="TOPIC_ALREADY_EXISTS")
    assert check_topic_admin(None, h.build()).valid is False
    assert check_topic_admin(None, H().build()).valid == "unknown"


def test_durability_does_not_expect_the_records_of_a_deleted_incarnation():
    h = H().produce(0, 5, "a", 0, 0, topic="t2").produce(1, 6, "b", 0, 0, topic="t1")
    admin(h, 10, "f0", "delete-topic", OLD)
    h.produce(20, 25, "c", 0, 0, topic="t2")              # the re-created topic's first record
    h.consume(30, "c", 0, 0, topic="t2").consume(30, "b", 0, 0).drained(31, 0, 1, topic="t2").drained(31, 0, 1)
    r = analyse_durability(h.build())
    assert r.deleted_with_topic == 1 and r.acked == 2 and not r.lost and not r.offset_mismatch


def test_admin_action_validation_and_label():
    targets = TargetCheck({1, 2, 3}, {3001}, 3, {"t1": 12})
    problems = Problems()
    a = fault_from_dict({"kind": "admin", "at_ms": 5, "action": "create-topic", "topic": "t2", "partitions": 3,
                         "replication_factor": 3, "records": 10}, "faults[0]", problems, targets)
    assert not problems.items and a == AdminAction(at_ms=5, action="create-topic", topic="t2", partitions=3,
                                                   replication_factor=3, records=10)
    assert a.label() == "create-topic" and a.node is None and fault_to_dict(a)["kind"] == "admin"
    for bad, where in (({"action": "create-topic", "topic": "t2"}, "partitions"),
                       ({"action": "delete-topic", "topic": "t2", "records": 3}, "records"),
                       ({"action": "delete-topic", "topic": "bad/name"}, "topic"),
                       ({"action": "rename", "topic": "t2"}, "action")):
        problems = Problems()
        fault_from_dict({"kind": "admin", "at_ms": 5, **bad}, "f", problems, targets)
        assert any(where in path for path, _ in problems.items), (bad, problems.items)


def test_s19_round_trips_and_its_refs_to_the_admin_topic_validate():
    from harness.scenario.model import Scenario
    s = by_name("delete-topic-while-dir-offline")
    assert s.id == "S19" and Scenario.from_dict(s.to_dict()) == s
    assert s.faults[0].at_ms == 11000 and "topic_admin" in s.checks and "service" in s.checks
