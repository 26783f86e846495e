"""AssignReplicasToDirs (API 73) and AlterPartition (API 56)."""

import pytest

from kafka_common.ids import LOST, UNASSIGNED, uuid_of
from kafka_common.metadata import records as r
from controller_impl.state import is_authorized

from controller_harness import Harness, code, dir_id as d, kinds

pytestmark = pytest.mark.unit


def cluster():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    h.start_broker(3, [d(3, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2], [2, 1], [2, 3]])
    return h, t.topic_id


def errors(resp):
    return {(dd.id_, tt.topic_id, p.partition_index): p.error_code.value
            for dd in resp.directories for tt in dd.topics for p in tt.partitions}


def test_assign_records_directories_only_and_identical_is_a_noop():
    h, tid = cluster()
    before = h.part(tid, 0)
    res, resp = h.assign(1, {d(1, 2): [(tid, 0)]})
    assert code(resp) == 0 and errors(resp) == {(d(1, 2), tid, 0): 0}
    (rec,) = res.records
    assert rec.directories == (d(1, 2), d(2, 1)) and rec.isr is None and rec.leader == r.NO_LEADER_CHANGE
    p = h.part(tid, 0)
    assert p.partition_epoch == before.partition_epoch + 1 and p.leader_epoch == before.leader_epoch
    assert (tid, 0) in h.image.partitions_in_dir(d(1, 2))
    res, resp = h.assign(1, {d(1, 2): [(tid, 0)]})
    assert code(resp) == 0 and res.records == ()


def test_assign_per_partition_errors():
    # RCMT testHandleAssignReplicasToDirs.
    h, tid = cluster()
    ghost = uuid_of(0x77, 0x77)
    res, resp = h.assign(1, {d(1, 1): [(tid, 0), (tid, 9), (tid, 2), (ghost, 0)]})
    assert errors(resp) == {(d(1, 1), tid, 0): 0, (d(1, 1), tid, 9): 3, (d(1, 1), tid, 2): 6,
                            (d(1, 1), ghost, 0): 100}
    assert len(res.records) == 1


def test_assign_stale_epoch_is_top_level_77():
    h, tid = cluster()
    res, resp = h.assign(1, {d(1, 1): [(tid, 0)]}, epoch=h.epoch(1) - 1)
    assert code(resp) == 77 and resp.directories == () and res.records == ()


@pytest.mark.parametrize("target", [LOST, uuid_of(0x99, 0x99), "offline"])
def test_assign_to_lost_unknown_or_offline_dir_also_leaves_isr_and_leadership(target):
    h, tid = cluster()
    h.assign(1, {d(1, 1): [(tid, 0), (tid, 1)]})
    if target == "offline":
        h.heartbeat(1, offline=[d(1, 2)])
        target = d(1, 2)
    assert h.part(tid, 0).leader == 1 and h.part(tid, 1).isr == (2, 1)
    res, resp = h.assign(1, {target: [(tid, 0), (tid, 1)]})
    assert code(resp) == 0 and set(errors(resp).values()) == {0}
    assert kinds(res) == ["PartitionChangeRecord"] * 4
    first, second = res.records[0], res.records[1]
    assert first.directories == (target, d(2, 1)) and first.isr is None and first.leader == r.NO_LEADER_CHANGE
    assert second.directories is None and second.isr == (2,) and second.leader == 2
    p0, p1 = h.part(tid, 0), h.part(tid, 1)
    assert p0.directories == (target, d(2, 1)) and p0.isr == (2,) and p0.leader == 2
    assert p1.directories == (d(2, 1), target) and p1.isr == (2,) and p1.leader == 2


def test_assign_unassigned_replica_to_online_dir_elects_nothing_new():
    h, tid = cluster()
    assert h.part(tid, 1).directories == (d(2, 1), UNASSIGNED)
    res, _ = h.assign(1, {d(1, 1): [(tid, 1)]})
    assert res.records[0].leader == r.NO_LEADER_CHANGE and h.part(tid, 1).leader == 2


def test_assign_same_partition_twice_later_entry_wins():
    h, tid = cluster()
    res, _ = h.assign(1, {d(1, 1): [(tid, 0)], d(1, 2): [(tid, 0)]})
    assert len(res.records) == 2 and h.part(tid, 0).directories[0] == d(1, 2)


def test_fenced_broker_may_assign():
    h, tid = cluster()
    h.heartbeat(1, want_fence=True)
    res, resp = h.assign(1, {d(1, 2): [(tid, 0)]})
    assert code(resp) == 0 and h.part(tid, 0).directories[0] == d(1, 2)


def test_authorization_helper():
    # broker-only RPCs, the metadata-log Fetch and CreateTopics need CLUSTER_ACTION (Kafka's rules)
    for key in (62, 63, 73, 56, 64, 1, 19):
        assert not is_authorized("User:alice", key, authorizer_enabled=True, super_users=frozenset({"User:broker"}))
        assert not is_authorized(None, key, authorizer_enabled=True, super_users=frozenset({"User:broker"}))
        assert is_authorized("User:broker", key, authorizer_enabled=True, super_users=frozenset({"User:broker"}))
        assert is_authorized("User:alice", key, authorizer_enabled=False, super_users=frozenset())
    assert is_authorized("User:alice", 18, authorizer_enabled=True, super_users=frozenset())
    h = Harness()
    assert h.state.is_authorized("User:broker", 73) and not h.state.is_authorized("User:x", 73)


# --- AlterPartition -----------------------------------------------------------------

def shrunk():
    h, tid = cluster()
    h.assign(1, {d(1, 1): [(tid, 0)]})
    res, resp = h.alter_partition(1, tid, 0, [1])
    assert code(resp) == 0
    return h, tid


def test_shrink_and_expand_isr():
    # RCMT testShrinkAndExpandIsr.
    h, tid = cluster()
    before = h.part(tid, 0)
    res, resp = h.alter_partition(1, tid, 0, [1])
    (p,) = resp.topics[0].partitions
    assert code(resp) == 0 and p.error_code.value == 0 and tuple(p.isr) == (1,)
    assert p.partition_epoch == before.partition_epoch + 1 and p.leader_epoch == before.leader_epoch
    assert kinds(res) == ["PartitionChangeRecord"] and res.records[0].leader == r.NO_LEADER_CHANGE
    res, resp = h.alter_partition(1, tid, 0, [1, 2], isr_epochs={2: h.epoch(2)})
    assert resp.topics[0].partitions[0].error_code.value == 0 and h.part(tid, 0).isr == (1, 2)
    res, resp = h.alter_partition(1, tid, 0, [1, 2])  # no change: no record
    assert res.records == () and resp.topics[0].partitions[0].error_code.value == 0


@pytest.mark.parametrize("kw,err", [
    (dict(partition_epoch=0), 95),         # INVALID_UPDATE_VERSION (Kafka's code: 95)
    (dict(leader_epoch=7), 74),            # FENCED_LEADER_EPOCH
])
def test_alter_partition_epoch_checks(kw, err):
    h, tid = shrunk()
    res, resp = h.alter_partition(1, tid, 0, [1, 2], **kw)
    assert resp.topics[0].partitions[0].error_code.value == err and res.records == ()


def test_alter_partition_rejects_fenced_offline_dir_and_stale_epoch_replicas():
    # RCMT testAlterPartitionShouldRejectFencedBrokers / ...BrokersWithStaleEpoch; and
    # beyond Kafka (reference §9.7): a replica whose dir is offline is ineligible.
    h, tid = cluster()
    _, t2 = h.create_topic("u", assignments=[[2, 1]])
    u = t2.topic_id
    h.assign(1, {d(1, 2): [(u, 0)]})
    h.alter_partition(2, u, 0, [2])
    h.heartbeat(1, offline=[d(1, 2)])
    res, resp = h.alter_partition(2, u, 0, [2, 1])
    assert resp.topics[0].partitions[0].error_code.value == 107 and res.records == ()
    h, tid = shrunk()
    res, resp = h.alter_partition(1, tid, 0, [1, 2], isr_epochs={2: h.epoch(2) + 1})
    assert resp.topics[0].partitions[0].error_code.value == 107
    h.heartbeat(2, want_fence=True)
    res, resp = h.alter_partition(1, tid, 0, [1, 2])
    assert resp.topics[0].partitions[0].error_code.value == 107 and res.records == ()


def test_alter_partition_other_errors():
    h, tid = cluster()
    res, resp = h.alter_partition(1, tid, 0, [1], epoch=h.epoch(1) + 1)
    assert code(resp) == 77
    res, resp = h.alter_partition(2, tid, 0, [2])      # not the leader
    assert resp.topics[0].partitions[0].error_code.value == 42
    res, resp = h.alter_partition(1, tid, 0, [2])      # leader not in new ISR
    assert resp.topics[0].partitions[0].error_code.value == 42
    res, resp = h.alter_partition(1, tid, 0, [1, 3])   # 3 is not a replica
    assert resp.topics[0].partitions[0].error_code.value == 42
    assert h.part(tid, 0).isr == (1, 2)


def test_alter_partition_v2_and_unknown_ids():
    from kio.schema.alter_partition.v2 import request as ap2
    h, tid = cluster()
    p = h.part(tid, 0)
    pd = lambda pid: ap2.PartitionData(partition_index=pid, leader_epoch=p.leader_epoch, new_isr=(1,),
                                       partition_epoch=p.partition_epoch)
    req = ap2.AlterPartitionRequest(broker_id=1, broker_epoch=h.epoch(1), topics=(
        ap2.TopicData(topic_id=tid, partitions=(pd(0), pd(7))),
        ap2.TopicData(topic_id=uuid_of(0x66, 1), partitions=(pd(0),))))
    res = h.apply(h.state.handle_alter_partition(req, 0))
    got = [[x.error_code.value for x in t.partitions] for t in res.response.topics]
    assert got == [[0, 3], [100]] and res.response.__version__ == 2
    assert h.part(tid, 0).isr == (1,)
