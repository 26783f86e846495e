"""OfflineLogDirs in heartbeats (behaviour §2, D3) and leader election around failed dirs."""

import pytest

from kafka_common.ids import LOST, uuid_of
from kafka_common.metadata import records as r

from controller_harness import Harness, code, dir_id as d, kinds

pytestmark = pytest.mark.unit


def jbod_cluster():
    """Broker 1 has dirs d(1,1), d(1,2); brokers 2 and 3 one dir each. Topic t, 6
    partitions, rf 2; broker 1's replicas of even partitions in d(1,1), odd in d(1,2)."""
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    h.start_broker(3, [d(3, 1)])
    assignments = [[1, 2], [1, 3], [2, 1], [3, 1], [1, 2], [2, 3]]
    _, t = h.create_topic("t", assignments=assignments)
    tid = t.topic_id
    res, resp = h.assign(1, {d(1, 1): [(tid, 0), (tid, 2), (tid, 4)], d(1, 2): [(tid, 1), (tid, 3)]})
    assert all(p.error_code.value == 0 for dd in resp.directories for tt in dd.topics for p in tt.partitions)
    return h, tid


def test_offline_dir_yields_exactly_the_partitions_in_it_and_one_registration_change():
    h, tid = jbod_cluster()
    before = {pid: h.part(tid, pid) for pid in range(6)}
    res, resp = h.heartbeat(1, offline=[d(1, 2)])
    assert code(resp) == 0 and not resp.is_fenced
    assert kinds(res) == ["PartitionChangeRecord", "PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    changed = {rec.partition_id: rec for rec in res.records[:2]}
    assert set(changed) == {1, 3}
    # p1: broker 1 led it → leader moves to 3, ISR shrinks; p3: broker 3 leads, only ISR shrinks.
    assert changed[1].leader == 3 and changed[1].isr == (3,) and changed[1].directories is None
    assert changed[3].leader == r.NO_LEADER_CHANGE and changed[3].isr == (3,)
    brc = res.records[-1]
    assert brc.broker_id == 1 and brc.broker_epoch == h.epoch(1) and brc.log_dirs == (d(1, 1),)
    assert brc.fenced == 0 and brc.__version__ == 2
    p1, p3 = h.part(tid, 1), h.part(tid, 3)
    assert (p1.leader, p1.leader_epoch, p1.partition_epoch) == (3, before[1].leader_epoch + 1,
                                                                before[1].partition_epoch + 1)
    assert (p3.leader, p3.leader_epoch, p3.partition_epoch) == (3, before[3].leader_epoch,
                                                                before[3].partition_epoch + 1)
    for pid in (0, 2, 4, 5):
        assert h.part(tid, pid) == before[pid]
    assert h.image.brokers[1].log_dirs == (d(1, 1),)


def test_resend_is_idempotent():
    h, tid = jbod_cluster()
    h.heartbeat(1, offline=[d(1, 2)])
    for _ in range(3):
        res, resp = h.heartbeat(1, offline=[d(1, 2)])
        assert code(resp) == 0 and res.records == ()


def test_unknown_dir_is_57_and_changes_nothing():
    h, tid = jbod_cluster()
    last = h.image.last_offset
    contact = h.state.sessions.last_contact_ms[1]
    h.advance(10)
    res, resp = h.heartbeat(1, offline=[d(1, 2), uuid_of(0xDEAD, 0xBEEF)])
    assert code(resp) == 57 and res.records == () and h.image.last_offset == last
    assert h.state.sessions.last_contact_ms[1] == contact
    assert h.image.brokers[1].log_dirs == tuple(sorted([d(1, 1), d(1, 2)], key=lambda x: x.int))


def test_another_brokers_dir_and_reserved_ids_are_57():
    h, tid = jbod_cluster()
    for bad in (d(2, 1), LOST):
        res, resp = h.heartbeat(1, offline=[bad])
        assert code(resp) == 57 and res.records == ()


def test_two_dirs_offline_together_one_registration_change():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2), d(1, 3)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2], [1, 2], [1, 2]])
    tid = t.topic_id
    h.assign(1, {d(1, 1): [(tid, 0)], d(1, 2): [(tid, 1)], d(1, 3): [(tid, 2)]})
    res, _ = h.heartbeat(1, offline=[d(1, 1), d(1, 2)])
    assert kinds(res).count("BrokerRegistrationChangeRecord") == 1
    assert {rec.partition_id for rec in res.records if isinstance(rec, r.PartitionChangeRecord)} == {0, 1}
    assert res.records[-1].log_dirs == (d(1, 3),)
    assert h.part(tid, 2).leader == 1


def test_last_isr_member_is_kept_and_partition_goes_leaderless():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    _, t = h.create_topic("t", assignments=[[1]])
    tid = t.topic_id
    h.assign(1, {d(1, 2): [(tid, 0)]})
    res, _ = h.heartbeat(1, offline=[d(1, 2)])
    assert kinds(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert res.records[0].isr is None and res.records[0].leader == -1
    p = h.part(tid)
    assert p.isr == (1,) and p.leader == -1
    # The broker is still unfenced, but its replica's dir is offline: never re-elected.
    res, _ = h.heartbeat(1, offline=[d(1, 2)])
    assert res.records == () and h.part(tid).leader == -1


def test_leader_never_elected_into_an_offline_or_lost_dir():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    h.start_broker(3, [d(3, 1)])
    _, t = h.create_topic("t", assignments=[[2, 1, 3], [2, 1, 3]])
    tid = t.topic_id
    h.assign(1, {d(1, 2): [(tid, 0)], d(1, 1): [(tid, 1)]})
    h.heartbeat(1, offline=[d(1, 2)])  # p0: broker 1 out of the ISR, dir offline
    assert h.part(tid, 0).isr == (2, 3)
    h.heartbeat(3)
    res, _ = h.heartbeat(2, want_fence=True)  # leader 2 goes: p0 → 3 (not 1), p1 → 1 (online dir)
    assert h.part(tid, 0).leader == 3 and h.part(tid, 1).leader == 1


def test_election_skips_replica_whose_dir_is_lost_even_if_in_isr():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    h.apply(type("R", (), {"records": (
        r.TopicRecord(name="x", topic_id=uuid_of(50, 50)),
        r.PartitionRecord(partition_id=0, topic_id=uuid_of(50, 50), replicas=(2, 1), isr=(2, 1), leader=2,
                          leader_epoch=0, partition_epoch=0, directories=(d(2, 1), LOST)),
        r.PartitionRecord(partition_id=1, topic_id=uuid_of(50, 50), replicas=(2, 1), isr=(2, 1), leader=2,
                          leader_epoch=0, partition_epoch=0, directories=(d(2, 1), d(1, 7))),
    )})())
    h.heartbeat(2, want_fence=True)
    for pid in (0, 1):  # LOST, and a dir not among broker 1's online dirs
        p = h.part(uuid_of(50, 50), pid)
        assert p.leader == -1 and p.isr == (1,)


def test_fenced_broker_reports_are_processed_too():
    h, tid = jbod_cluster()
    h.heartbeat(1, want_fence=True)
    res, resp = h.heartbeat(1, offline=[d(1, 2)], want_fence=True)
    assert code(resp) == 0 and kinds(res) == ["BrokerRegistrationChangeRecord"]
    assert res.records[0].log_dirs == (d(1, 1),)


def test_offline_report_and_unfence_in_one_heartbeat():
    h, tid = jbod_cluster()
    h.heartbeat(1, want_fence=True)
    res, resp = h.heartbeat(1, offline=[d(1, 2)])
    assert not resp.is_fenced
    assert kinds(res)[:2] == ["BrokerRegistrationChangeRecord", "BrokerRegistrationChangeRecord"]
    assert res.records[0].log_dirs == (d(1, 1),) and res.records[1].fenced == -1
    # Leaderless partitions in the offline dir are not given to broker 1.
    for pid in (1, 3):
        assert 1 not in (h.part(tid, pid).leader,)


def test_every_dir_offline_fences_the_broker_and_keeps_it_fenced():
    # Decision: a record cannot say "no dirs" (empty LogDirs = no change), so the broker
    # is fenced instead; it stays fenced while it reports all its dirs offline.
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2]])
    tid = t.topic_id
    h.assign(1, {d(1, 1): [(tid, 0)]})
    res, resp = h.heartbeat(1, offline=[d(1, 1), d(1, 2)])
    assert resp.is_fenced and kinds(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert res.records[-1].fenced == 1 and res.records[-1].log_dirs == ()
    assert h.part(tid).leader == 2 and h.part(tid).isr == (2,)
    res, resp = h.heartbeat(1, offline=[d(1, 1), d(1, 2)])
    assert resp.is_fenced and res.records == ()


def test_restarted_broker_may_report_a_dir_it_registered_before():
    h, tid = jbod_cluster()
    h.heartbeat(1, offline=[d(1, 2)])
    h.advance(9001)
    h.heartbeat(2)
    h.heartbeat(3)
    h.tick()
    _, resp = h.register(1, [d(1, 1)], incarnation=uuid_of(9, 9))
    assert code(resp) == 0
    res, resp = h.heartbeat(1, offline=[d(1, 2)])
    assert code(resp) == 0 and not resp.is_fenced  # known dir: idempotent, no 57


def test_cost_is_proportional_to_the_dir_not_the_cluster():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("big", assignments=[[1, 2]] * 300)
    tid = t.topic_id
    h.assign(1, {d(1, 1): [(tid, p) for p in range(295)], d(1, 2): [(tid, p) for p in range(295, 300)]})
    calls = []
    real = h.image.partition
    h.image.partition = lambda *k: calls.append(k) or real(*k)
    res, _ = h.heartbeat(1, offline=[d(1, 2)])
    del h.image.partition
    assert len(res.records) == 6
    assert len(calls) <= 5 * 3, len(calls)  # the 5 partitions of d(1,2), never the 295 others
