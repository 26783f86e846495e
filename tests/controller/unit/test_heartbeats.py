"""BrokerHeartbeat: epochs, unfencing (caught up, want_fence, D4), fencing, shutdown, sessions."""

import pytest

from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from controller_impl.state.heartbeats import BrokerSessions, HeartbeatFacts, Transition, next_transition

from controller_harness import Harness, code, dir_id as d, kinds

pytestmark = pytest.mark.unit


def test_unregistered_broker_is_102_and_stale_epoch_is_77():
    h = Harness()
    h.register(1, [d(1, 1)])
    from kio.schema.broker_heartbeat.v1 import request as hb1
    res = h.state.handle_broker_heartbeat(hb1.BrokerHeartbeatRequest(
        broker_id=4, broker_epoch=0, current_metadata_offset=0, want_fence=False, want_shut_down=False), 0)
    assert code(res.response) == 102 and res.records == ()
    res, resp = h.heartbeat(1, epoch=h.epoch(1) + 1, offline=[d(1, 1)])
    assert code(resp) == 77 and res.records == ()  # OfflineLogDirs dropped with it


def test_unfence_only_when_caught_up_and_not_want_fence():
    h = Harness()
    h.register(1, [d(1, 1)])
    reg_offset = h.image.register_offsets[1]
    res, resp = h.heartbeat(1, metadata_offset=reg_offset - 1)
    assert res.records == () and resp.is_fenced and not resp.is_caught_up
    res, resp = h.heartbeat(1, metadata_offset=reg_offset, want_fence=True)
    assert res.records == () and resp.is_fenced and resp.is_caught_up
    res, resp = h.heartbeat(1, metadata_offset=reg_offset)
    assert kinds(res) == ["BrokerRegistrationChangeRecord"] and res.records[0].fenced == -1
    assert not resp.is_fenced and not h.image.brokers[1].fenced
    res, resp = h.heartbeat(1)  # steady state: nothing to write
    assert res.records == () and not resp.is_fenced and resp.is_caught_up


def test_d4_multi_dir_broker_with_unassigned_replica_stays_fenced():
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", 2, 2)
    tid = t.topic_id
    assert h.part(tid, 0).directories[h.part(tid, 0).replicas.index(1)] == UNASSIGNED
    assert h.part(tid, 0).directories[h.part(tid, 0).replicas.index(2)] == d(2, 1)
    # Already unfenced: not re-fenced by new UNASSIGNED replicas (§6).
    res, resp = h.heartbeat(1)
    assert not resp.is_fenced and res.records == ()
    # Restart broker 1 (new incarnation after its session lapses): now D4 applies.
    h.advance(9001)
    h.heartbeat(2)
    h.tick()
    from kafka_common.ids import uuid_of
    h.register(1, [d(1, 1), d(1, 2)], incarnation=uuid_of(5, 5))
    res, resp = h.heartbeat(1)
    assert resp.is_fenced and resp.is_caught_up and res.records == ()
    h.assign(1, {d(1, 1): [(tid, 0)]})
    res, resp = h.heartbeat(1)
    assert resp.is_fenced  # partition 1 still UNASSIGNED on broker 1
    h.assign(1, {d(1, 2): [(tid, 1)]})
    res, resp = h.heartbeat(1)
    assert not resp.is_fenced and kinds(res)[0] == "BrokerRegistrationChangeRecord"


def test_single_dir_broker_never_has_unassigned_replicas():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    _, t = h.create_topic("t", 3, 1)
    assert all(p.directories == (d(1, 1),) for p in h.image.partitions_of(t.topic_id).values())


def test_want_fence_fences_and_moves_leaders():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", 1, 2, assignments=[[1, 2]])
    res, resp = h.heartbeat(1, want_fence=True)
    assert resp.is_fenced and kinds(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    p = h.part(t.topic_id)
    assert p.leader == 2 and p.isr == (2,) and p.leader_epoch == 1 and p.partition_epoch == 1


def test_want_shut_down_moves_leaders_then_says_shut_down():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", 1, 2, assignments=[[1, 2]])
    res, resp = h.heartbeat(1, want_shut_down=True)
    assert resp.should_shut_down and resp.is_fenced
    assert h.part(t.topic_id).leader == 2
    res, resp = h.heartbeat(1, want_shut_down=True)  # fenced: shut down now, no records
    assert resp.should_shut_down and res.records == ()


def test_unfence_elects_leader_for_leaderless_partitions():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    _, t = h.create_topic("t", 1, 1)
    h.heartbeat(1, want_fence=True)
    p = h.part(t.topic_id)
    assert p.leader == -1 and p.isr == (1,)  # last ISR member kept, leaderless
    res, resp = h.heartbeat(1)
    assert kinds(res) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    p = h.part(t.topic_id)
    assert p.leader == 1 and p.leader_epoch == 2


def test_session_expiry_fences_and_moves_leaders():
    h = Harness(session_timeout_ms=9000)
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, 1)])
    _, t = h.create_topic("t", 3, 3)
    tid = t.topic_id
    led_by_1 = [pid for pid, p in h.image.partitions_of(tid).items() if p.leader == 1]
    assert led_by_1
    h.advance(5000)
    h.heartbeat(2)
    h.heartbeat(3)
    h.advance(4000)
    assert h.tick().records == ()  # exactly at the timeout: still alive
    h.advance(1)
    res = h.tick()
    assert kinds(res)[-1] == "BrokerRegistrationChangeRecord" and res.records[-1].fenced == 1
    assert h.image.brokers[1].fenced
    for pid, p in h.image.partitions_of(tid).items():
        assert 1 not in p.isr and p.leader in (2, 3)
    assert h.tick().records == ()  # fenced brokers are never stale


def test_sessions_start_fresh_after_controller_restart():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.advance(100_000)
    from controller_impl.state import ControllerState
    restarted = ControllerState(h.image, h.config, h.now)
    assert restarted.tick(h.now + 9000).records == ()
    assert kinds(restarted.tick(h.now + 9001)) == ["BrokerRegistrationChangeRecord"]


def test_transition_table():
    f = dict(fenced=True, want_fence=False, want_shut_down=False, caught_up=True,
             assignments_known=True, has_online_dir=True)
    assert next_transition(HeartbeatFacts(**f)) is Transition.UNFENCE
    for k, v in [("want_fence", True), ("caught_up", False), ("assignments_known", False),
                 ("has_online_dir", False)]:
        assert next_transition(HeartbeatFacts(**(f | {k: v}))) is Transition.NONE
    assert next_transition(HeartbeatFacts(**(f | {"want_shut_down": True}))) is Transition.SHUTDOWN
    up = f | {"fenced": False}
    assert next_transition(HeartbeatFacts(**up)) is Transition.NONE
    assert next_transition(HeartbeatFacts(**(up | {"assignments_known": False}))) is Transition.NONE
    assert next_transition(HeartbeatFacts(**(up | {"want_fence": True}))) is Transition.FENCE
    assert next_transition(HeartbeatFacts(**(up | {"has_online_dir": False}))) is Transition.FENCE


def test_session_validity():
    s = BrokerSessions(100)
    from kafka_common.metadata.model import BrokerRegistration
    from kafka_common.ids import uuid_of
    reg = BrokerRegistration(1, 5, uuid_of(1, 1), (), None, False, False, (d(1, 1),))
    assert not s.has_valid_session(reg, 0)
    s.touch(1, 0)
    assert s.has_valid_session(reg, 100) and not s.has_valid_session(reg, 101)
    fenced = BrokerRegistration(1, 5, uuid_of(1, 1), (), None, True, False, (d(1, 1),))
    assert not s.has_valid_session(fenced, 50)
    with pytest.raises(ValueError):
        BrokerSessions(0)
