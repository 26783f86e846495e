"""ElectLeaders, partition reassignment, leader balance, unclean elections and cordoned dirs
on the pure controller (issue 37), through the real record codec (controller_harness)."""

from __future__ import annotations

import datetime

from kio.schema.alter_partition_reassignments.v0 import request as apr0
from kio.schema.alter_partition_reassignments.v1 import request as apr1
from kio.schema.elect_leaders.v2 import request as el2
from kio.schema.list_partition_reassignments.v0 import request as lpr0

from kafka_common import controller_protocol as cp
from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from kafka_common.wire import ErrorCode

from controller_impl.state import elections
from tests.controller.unit.controller_harness import Harness, dir_id

T = datetime.timedelta(seconds=30)


def cluster(brokers=(1, 2, 3, 4), dirs_per_broker: int = 2) -> Harness:
    h = Harness()
    for b in brokers:
        h.start_broker(b, [dir_id(b, n) for n in range(dirs_per_broker)])
    return h


def place_all(h: Harness, tid, pid: int = 0) -> None:
    """Every broker reports its UNASSIGNED replica in its first dir."""
    part = h.part(tid, pid)
    for b, d in zip(part.replicas, part.directories):
        if d == UNASSIGNED:
            h.assign(b, {dir_id(b, 0): [(tid, pid)]})


def elect(h: Harness, election_type: int, topic: str | None = None, partitions=(0,)):
    tps = None if topic is None else (el2.TopicPartitions(topic=topic, partitions=tuple(partitions)),)
    req = el2.ElectLeadersRequest(election_type=election_type, topic_partitions=tps, timeout=T)
    res = h.apply(h.state.handle_elect_leaders(req, h.now))
    return res, res.response


def reassign(h: Harness, topic: str, replicas, pid: int = 0, *, v1_allow: bool | None = None):
    if v1_allow is None:
        req = apr0.AlterPartitionReassignmentsRequest(timeout=T, topics=(apr0.ReassignableTopic(
            name=topic, partitions=(apr0.ReassignablePartition(partition_index=pid, replicas=replicas),)),))
    else:
        req = apr1.AlterPartitionReassignmentsRequest(
            timeout=T, allow_replication_factor_change=v1_allow, topics=(apr1.ReassignableTopic(
                name=topic, partitions=(apr1.ReassignablePartition(partition_index=pid, replicas=replicas),)),))
    res = h.apply(h.state.handle_alter_partition_reassignments(req, h.now))
    return res, res.response.responses[0].partitions[0]


def listed(h: Harness, topics=None):
    req = lpr0.ListPartitionReassignmentsRequest(timeout=T, topics=topics)
    return h.state.handle_list_partition_reassignments(req, h.now).response


def code_of(resp) -> ErrorCode:
    return resp.replica_election_results[0].partition_result[0].error_code


# --- ElectLeaders ------------------------------------------------------------------------

def test_preferred_election_returns_leadership_after_the_preferred_broker_comes_back():
    h = cluster()
    _, t = h.create_topic("t", 1, 3, assignments=None)
    tid = h.topic_id("t")
    place_all(h, tid)
    preferred = h.part(tid).replicas[0]
    _, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.election_not_needed
    h.heartbeat(preferred, want_fence=True)                 # leadership moves away
    assert h.part(tid).leader != preferred
    _, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.preferred_leader_not_available   # fenced and out of the ISR
    h.heartbeat(preferred)                                  # unfenced, not yet back in the ISR
    _, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.preferred_leader_not_available
    part = h.part(tid)
    h.alter_partition(part.leader, tid, 0, list(part.isr) + [preferred])
    res, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.none
    assert h.part(tid).leader == preferred
    assert [type(x).__name__ for x in res.records] == ["PartitionChangeRecord"]


def test_preferred_replica_with_its_dir_offline_is_never_elected():
    h = cluster()
    h.create_topic("t", 1, 3)
    tid = h.topic_id("t")
    place_all(h, tid)
    part = h.part(tid)
    preferred, other = part.replicas[0], part.replicas[1]
    # leadership moved away by a fence + unfence + rejoin
    h.heartbeat(preferred, want_fence=True)
    h.heartbeat(preferred)
    p = h.part(tid)
    h.alter_partition(p.leader, tid, 0, list(p.isr) + [preferred])
    assert h.part(tid).leader == other
    # the preferred replica's dir fails: it leaves the ISR, and would not be elected anyway
    h.heartbeat(preferred, offline=[dir_id(preferred, 0)])
    _, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.preferred_leader_not_available
    assert h.part(tid).leader == other
    assert elections.acceptable(__import__("controller_impl.state.view", fromlist=["WorkingView"]).WorkingView(
        h.image), h.part(tid), preferred, in_isr=False) is False


def test_unclean_election_only_when_no_isr_member_can_lead():
    h = cluster((1, 2, 3))
    h.create_topic("t", 1, 3, assignments=None)
    tid = h.topic_id("t")
    place_all(h, tid)
    a, b, c = h.part(tid).replicas
    _, resp = elect(h, elections.UNCLEAN, "t")
    assert code_of(resp) == ErrorCode.election_not_needed             # it has a leader
    h.heartbeat(b, want_fence=True)
    h.heartbeat(c, want_fence=True)                                    # ISR [a]
    h.heartbeat(b)
    h.heartbeat(c)                                                     # back, not in the ISR
    h.heartbeat(c, offline=[dir_id(c, 0)])                             # c's replica dir is gone
    h.heartbeat(a, want_fence=True)                                    # the last ISR member: leaderless
    part = h.part(tid)
    assert part.leader == -1 and part.isr == (a,)
    _, resp = elect(h, elections.PREFERRED, "t")
    assert code_of(resp) == ErrorCode.preferred_leader_not_available
    res, resp = elect(h, elections.UNCLEAN, "t")
    assert code_of(resp) == ErrorCode.none
    part = h.part(tid)
    assert part.leader == b and part.isr == (b,)                        # never c: its dir is offline
    assert part.leader_recovery_state == elections.LRS_RECOVERING


def test_unclean_election_without_any_live_replica_fails():
    h = cluster((1, 2))
    h.create_topic("t", 1, 2)
    tid = h.topic_id("t")
    place_all(h, tid)
    for b in (1, 2):
        h.heartbeat(b, want_fence=True)
    _, resp = elect(h, elections.UNCLEAN, "t")
    assert code_of(resp) == ErrorCode.eligible_leaders_not_available


def test_elect_all_partitions_leaves_out_election_not_needed_and_unknown_partitions_fail():
    h = cluster()
    h.create_topic("t", 4, 2)
    _, resp = elect(h, elections.PREFERRED)
    assert resp.replica_election_results == ()
    _, resp = elect(h, elections.PREFERRED, "nope", (0, 1))
    assert [p.error_code for p in resp.replica_election_results[0].partition_result] == \
        [ErrorCode.unknown_topic_or_partition] * 2
    _, resp = elect(h, elections.PREFERRED, "t", (9,))
    assert code_of(resp) == ErrorCode.unknown_topic_or_partition


def test_unclean_timer_honours_the_topic_config():
    h = cluster((1, 2))
    h.create_topic("t", 1, 2)
    tid = h.topic_id("t")
    place_all(h, tid)
    first, second = h.part(tid).replicas
    h.heartbeat(second, want_fence=True)
    h.heartbeat(second)
    h.heartbeat(first, want_fence=True)            # leaderless, ISR [first]
    assert h.part(tid).leader == -1
    assert h.apply(h.state.handle_unclean_elections(h.now)).records == ()   # disabled by default
    h.apply(type("R", (), {"records": (r.ConfigRecord(resource_type=2, resource_name="t",
                                                      name="unclean.leader.election.enable", value="true"),)})())
    res = h.apply(h.state.handle_unclean_elections(h.now))
    assert len(res.records) == 1 and h.part(tid).leader == second and h.part(tid).isr == (second,)


def test_leader_balance_moves_leaders_back_above_the_threshold_only():
    h = cluster((1, 2, 3))
    h.create_topic("t", 6, 3)
    tid = h.topic_id("t")
    for p in range(6):
        place_all(h, tid, p)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    for p in range(6):
        part = h.part(tid, p)
        if 1 not in part.isr:
            h.alter_partition(part.leader, tid, p, list(part.isr) + [1])
    led_by_1 = [p for p in range(6) if h.part(tid, p).replicas[0] == 1]
    assert led_by_1 and all(h.part(tid, p).leader != 1 for p in led_by_1)
    h.config.leader_imbalance_per_broker_percentage = 100     # 100 % off is not above 100 %
    assert h.apply(h.state.handle_leader_balance(h.now)).records == ()
    h.config.leader_imbalance_per_broker_percentage = 10
    res = h.apply(h.state.handle_leader_balance(h.now))
    assert res.response == [(1, len(led_by_1), len(led_by_1))]
    assert all(h.part(tid, p).leader == 1 for p in led_by_1)
    assert h.apply(h.state.handle_leader_balance(h.now)).records == ()


# --- reassignment ------------------------------------------------------------------------

def test_reassignment_adds_then_removes_once_the_targets_are_in_sync():
    h = cluster()
    h.create_topic("t", 1, 3, assignments=None)
    tid = h.topic_id("t")
    place_all(h, tid)
    old = h.part(tid).replicas
    new_broker = next(b for b in (1, 2, 3, 4) if b not in old)
    target = (new_broker,) + old[1:]
    _, pr = reassign(h, "t", target)
    assert pr.error_code == ErrorCode.none
    part = h.part(tid)
    assert part.replicas == target + (old[0],)
    assert part.adding_replicas == (new_broker,) and part.removing_replicas == (old[0],)
    assert part.directory(new_broker) == UNASSIGNED                    # multi-dir broker picks its dir
    ongoing = listed(h)
    assert ongoing.topics[0].partitions[0].adding_replicas == (new_broker,)
    # the new replica reports its dir, catches up; the leader adds it to the ISR: done
    h.assign(new_broker, {dir_id(new_broker, 1): [(tid, 0)]})
    part = h.part(tid)
    h.alter_partition(part.leader, tid, 0, list(part.isr) + [new_broker])
    part = h.part(tid)
    assert part.replicas == target and part.isr == tuple(b for b in part.isr if b in target)
    assert old[0] not in part.isr and not part.adding_replicas and not part.removing_replicas
    assert part.leader in target and part.directory(new_broker) == dir_id(new_broker, 1)
    assert listed(h).topics == ()


def test_cancel_reverts_and_no_reassignment_is_an_error():
    h = cluster()
    h.create_topic("t", 1, 2)
    tid = h.topic_id("t")
    place_all(h, tid)
    old = h.part(tid).replicas
    _, pr = reassign(h, "t", None)
    assert pr.error_code == ErrorCode.no_reassignment_in_progress
    others = tuple(b for b in (1, 2, 3, 4) if b not in old)
    reassign(h, "t", others)
    assert h.part(tid).adding_replicas == others
    _, pr = reassign(h, "t", None)
    assert pr.error_code == ErrorCode.none
    part = h.part(tid)
    assert set(part.replicas) == set(old) and not part.adding_replicas and not part.removing_replicas


def test_bad_targets_are_refused_and_change_nothing():
    h = cluster()
    h.create_topic("t", 1, 2)
    tid = h.topic_id("t")
    before = h.part(tid)
    for target, code in (((), ErrorCode.invalid_replica_assignment), ((1, 1), ErrorCode.invalid_replica_assignment),
                         ((1, 9), ErrorCode.invalid_replica_assignment)):
        res, pr = reassign(h, "t", target)
        assert pr.error_code == code and res.records == ()
    res, pr = reassign(h, "t", (1, 2, 3), v1_allow=False)
    assert pr.error_code == ErrorCode.invalid_replica_assignment and res.records == ()
    res, pr = reassign(h, "nope", (1, 2))
    assert pr.error_code == ErrorCode.unknown_topic_or_partition
    assert h.part(tid) == before


def test_shrinking_the_replication_factor_completes_at_once():
    h = cluster()
    h.create_topic("t", 1, 3)
    tid = h.topic_id("t")
    place_all(h, tid)
    old = h.part(tid).replicas
    _, pr = reassign(h, "t", old[1:])
    part = h.part(tid)
    assert pr.error_code == ErrorCode.none and part.replicas == old[1:] and part.leader in old[1:]


def test_target_dir_failing_mid_move_keeps_the_move_pending_and_the_old_replicas_serving():
    """KAFKA-16297's window: the move is accepted, the target's dir fails before it joined the
    ISR. The target is never promoted; the original replicas keep the partition; cancel works."""
    h = cluster()
    h.create_topic("t", 1, 2)
    tid = h.topic_id("t")
    place_all(h, tid)
    old = h.part(tid).replicas
    target_broker = next(b for b in (1, 2, 3, 4) if b not in old)
    reassign(h, "t", (target_broker,) + old[1:])
    h.assign(target_broker, {dir_id(target_broker, 0): [(tid, 0)]})
    h.heartbeat(target_broker, offline=[dir_id(target_broker, 0)])
    part = h.part(tid)
    res, resp = h.alter_partition(part.leader, tid, 0, list(part.isr) + [target_broker])
    assert resp.topics[0].partitions[0].error_code == ErrorCode.ineligible_replica
    part = h.part(tid)
    assert part.adding_replicas == (target_broker,) and target_broker not in part.isr
    assert part.leader in old and set(part.isr) == set(old)
    _, resp = elect(h, elections.UNCLEAN, "t")
    assert code_of(resp) == ErrorCode.election_not_needed
    _, pr = reassign(h, "t", None)
    assert pr.error_code == ErrorCode.none and set(h.part(tid).replicas) == set(old)  # Kafka's order: target first


# --- cordoned dirs (KIP-1066) ------------------------------------------------------------

def test_a_broker_with_every_dir_cordoned_gets_no_new_replica():
    h = cluster((1, 2, 3))
    req = cp.broker_heartbeat(2, broker_id=3, broker_epoch=h.epoch(3), current_metadata_offset=h.image.last_offset,
                              cordoned_log_dirs=[dir_id(3, 0), dir_id(3, 1)])
    resp = h.apply(h.state.handle_broker_heartbeat(req, h.now)).response
    assert resp.error_code == ErrorCode.none
    assert h.state.fully_cordoned() == frozenset({3})
    h.create_topic("t", 6, 2)
    tid = h.topic_id("t")
    assert all(3 not in h.part(tid, p).replicas for p in range(6))
    req = cp.broker_heartbeat(2, broker_id=3, broker_epoch=h.epoch(3), current_metadata_offset=h.image.last_offset,
                              cordoned_log_dirs=[dir_id(3, 0)])          # one dir open again
    h.apply(h.state.handle_broker_heartbeat(req, h.now))
    assert h.state.fully_cordoned() == frozenset()


def test_cordoning_an_unknown_dir_fails_the_heartbeat():
    h = cluster((1,))
    req = cp.broker_heartbeat(2, broker_id=1, broker_epoch=h.epoch(1), current_metadata_offset=h.image.last_offset,
                              cordoned_log_dirs=[dir_id(7, 7)])
    res = h.apply(h.state.handle_broker_heartbeat(req, h.now))
    assert res.response.error_code == ErrorCode.invalid_request and res.records == ()
