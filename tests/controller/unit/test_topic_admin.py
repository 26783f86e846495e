"""DeleteTopics and CreatePartitions on the pure controller (records, errors, validate_only,
Directories of new partitions), driven like the runtime drives it (controller_harness)."""

import datetime
from types import SimpleNamespace

import pytest

from kafka_common import wire
from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from controller_impl.state.authz import API_RULES
from kafka_common.authz import denied_response

from controller_harness import Harness, dir_id as d, kinds

pytestmark = pytest.mark.unit
T = datetime.timedelta(seconds=30)


def delete(h, version=6, names=(), ids=(), both=()):
    mod = wire.request_module(20, version)
    if version >= 6:
        topics = tuple(wire.make(mod.DeleteTopicState, name=n, topic_id=None) for n in names) + \
            tuple(wire.make(mod.DeleteTopicState, name=None, topic_id=i) for i in ids) + \
            tuple(wire.make(mod.DeleteTopicState, name=n, topic_id=i) for n, i in both)
        req = wire.make(wire.request_class(20, version), topics=topics, timeout=T)
    else:
        req = wire.make(wire.request_class(20, version), topic_names=tuple(names), timeout=T)
    res = h.apply(h.state.handle_delete_topics(req, h.now))
    return res, res.response.responses


def grow(h, topics, validate_only=False, version=3):
    """topics: [(name, count, assignments or None)]"""
    mod = wire.request_module(37, version)
    req = wire.make(wire.request_class(37, version), timeout=T, validate_only=validate_only, topics=tuple(
        wire.make(mod.CreatePartitionsTopic, name=n, count=c, assignments=None if a is None else tuple(
            wire.make(mod.CreatePartitionsAssignment, broker_ids=tuple(b)) for b in a)) for n, c, a in topics))
    res = h.apply(h.state.handle_create_partitions(req, h.now))
    return res, res.response.results


def cluster(dirs_per_broker=1):
    h = Harness()
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, i) for i in range(1, dirs_per_broker + 1)])
    return h


# ------------------------------------------------------------------ DeleteTopics
def test_delete_by_name_writes_remove_topic_record_and_the_image_drops_the_topic():
    h = cluster()
    _, t = h.create_topic("gone", 3, 2)
    h.create_topic("kept", 1, 1)
    res, (out,) = delete(h, 6, names=["gone"])
    assert kinds(res) == ["RemoveTopicRecord"] and res.records[0].topic_id == t.topic_id
    assert (out.name, out.topic_id, out.error_code.value) == ("gone", t.topic_id, 0)
    assert "gone" not in h.image.topic_ids and t.topic_id not in h.image.topics
    assert h.image.partitions_of(t.topic_id) == {} and "kept" in h.image.topic_ids


def test_delete_by_topic_id_v6_and_by_name_v0_v1():
    h = cluster()
    _, t = h.create_topic("by-id", 1, 1)
    res, (out,) = delete(h, 6, ids=[t.topic_id])
    assert out.error_code.value == 0 and out.name == "by-id" and kinds(res) == ["RemoveTopicRecord"]
    for version in (0, 1):   # v0: kafka_common.legacy_schemas (kio has 1-6)
        h.create_topic("old-client", 1, 1)
        res, (out,) = delete(h, version, names=["old-client"])
        assert out.error_code.value == 0 and "old-client" not in h.image.topic_ids


def test_delete_errors_unknown_name_unknown_id_duplicates_both_and_neither():
    h = cluster()
    _, t = h.create_topic("x", 1, 1)
    res, outs = delete(h, 6, names=["nope", "x", "x"], ids=[d(9, 9)])
    assert [o.error_code.value for o in outs] == [3, 42, 42, 100] and res.records == ()
    res, outs = delete(h, 6, both=[("x", t.topic_id), (None, None)])
    assert [o.error_code.value for o in outs] == [42, 42] and res.records == ()
    assert "x" in h.image.topic_ids


def test_delete_refused_when_deletion_is_disabled():
    h = cluster()
    h.config.delete_topic_enable = False
    h.create_topic("x", 1, 1)
    res, (out,) = delete(h, 6, names=["x"])
    assert out.error_code.value == 73 and res.records == () and "x" in h.image.topic_ids
    for version in (0, 2):   # v0–2 cannot carry TOPIC_DELETION_DISABLED
        _, (out,) = delete(h, version, names=["x"])
        assert out.error_code.value == 42


def test_recreated_topic_gets_a_new_id_and_fresh_partitions():
    h = cluster(dirs_per_broker=2)
    _, first = h.create_topic("again", 2, 3)
    delete(h, 6, names=["again"])
    _, second = h.create_topic("again", 2, 3)
    assert second.error_code.value == 0 and second.topic_id != first.topic_id
    assert h.image.topic_ids["again"] == second.topic_id and first.topic_id not in h.image.topics
    assert all(p.directories == (UNASSIGNED,) * 3 for p in h.image.partitions_of(second.topic_id).values())


# ------------------------------------------------------------------ CreatePartitions
def test_create_partitions_places_like_create_topics_with_the_topics_rf_and_unassigned_dirs():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])   # multi-dir: UNASSIGNED, the broker places it
    h.start_broker(2, [d(2, 1)])             # single dir: that dir
    h.start_broker(3, [d(3, 1)])
    _, t = h.create_topic("grow", 2, 2)
    res, (out,) = grow(h, [("grow", 5, None)])
    assert out.error_code.value == 0 and kinds(res) == ["PartitionRecord"] * 3
    parts = h.image.partitions_of(t.topic_id)
    assert sorted(parts) == [0, 1, 2, 3, 4]
    for pid in (2, 3, 4):
        p = parts[pid]
        assert len(p.replicas) == 2 and len(set(p.replicas)) == 2 and p.isr == p.replicas
        assert p.leader == p.replicas[0] and (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert p.directories == tuple(UNASSIGNED if b == 1 else d(b, 1) for b in p.replicas)
    assert len({parts[pid].leader for pid in (2, 3, 4)}) == 3   # spread over the brokers


def test_create_partitions_errors_and_validate_only():
    h = cluster()
    h.create_topic("g", 3, 2)
    _, outs = grow(h, [("g", 3, None), ("g2", 5, None)])
    assert [o.error_code.value for o in outs] == [37, 3]
    _, (out,) = grow(h, [("g", 2, None)])
    assert out.error_code.value == 37 and "increase" in out.error_message
    _, outs = grow(h, [("g", 4, None), ("g", 5, None)])
    assert [o.error_code.value for o in outs] == [42, 42]
    res, (out,) = grow(h, [("g", 4, None)], validate_only=True)
    assert out.error_code.value == 0 and res.records == () and len(h.image.partitions_of(h.topic_id("g"))) == 3
    _, (out,) = grow(h, [("g", 20_000, None)])
    assert out.error_code.value == 44


def test_create_partitions_explicit_assignments_validated():
    h = cluster()
    h.create_topic("m", 1, 2)
    tid = h.topic_id("m")
    for bad in ([[1, 2], [2, 3]],   # two assignments for one new partition
                [[1]],              # RF 1 where the topic has 2
                [[1, 1]],           # a broker twice
                [[1, 9]]):          # an unregistered broker
        res, (out,) = grow(h, [("m", 2, bad)])
        assert out.error_code.value == 39 and res.records == (), (bad, out)
    h.heartbeat(3, want_fence=True)
    h.heartbeat(2, want_fence=True)
    _, (out,) = grow(h, [("m", 2, [[2, 3]])])
    assert out.error_code.value == 39 and "fenced" in out.error_message
    res, (out,) = grow(h, [("m", 3, [[3, 1], [1, 2]])])
    assert out.error_code.value == 0 and kinds(res) == ["PartitionRecord"] * 2
    assert h.part(tid, 1).replicas == (3, 1) and h.part(tid, 1).isr == (1,) and h.part(tid, 1).leader == 1
    assert h.part(tid, 2).replicas == (1, 2) and h.part(tid, 2).leader == 1


def test_refusals_by_authorization_name_every_topic():
    rule = API_RULES[20]
    mod = wire.request_module(20, 6)
    req = wire.make(wire.request_class(20, 6), timeout=T,
                    topics=(wire.make(mod.DeleteTopicState, name="a", topic_id=None),))
    resp = denied_response(rule, 20, req, 6, "no")
    assert [(x.name, x.error_code.value) for x in resp.responses] == [("a", 31)]
    mod = wire.request_module(37, 3)
    req = wire.make(wire.request_class(37, 3), timeout=T, validate_only=False,
                    topics=(wire.make(mod.CreatePartitionsTopic, name="b", count=2, assignments=None),))
    resp = denied_response(API_RULES[37], 37, req, 3, "no")
    assert [(x.name, x.error_code.value) for x in resp.results] == [("b", 31)]
