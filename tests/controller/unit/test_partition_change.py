"""The partition change builder (Kafka's PartitionChangeBuilderTest, our rules)."""

import uuid

import pytest

from kafka_common.ids import LOST, MIGRATING, UNASSIGNED, uuid_of
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.model import PartitionRegistration
from controller_impl.state.partition_change import build_change
from controller_impl.state.view import WorkingView

from controller_harness import Harness, dir_id as d, kinds

pytestmark = pytest.mark.unit
T = uuid_of(40, 40)


def view_with(brokers):
    """brokers: {id: (fenced, [dirs])}"""
    img = MetadataImage()
    off = 0
    for b, (fenced, dirs) in brokers.items():
        img.replay(r.RegisterBrokerRecord(broker_id=b, incarnation_id=uuid_of(b, b), broker_epoch=b,
                                          fenced=fenced, log_dirs=tuple(dirs)), off)
        off += 1
    return WorkingView(img)


def part(replicas, isr, leader, dirs):
    return PartitionRegistration(topic_id=T, partition_id=0, replicas=tuple(replicas), isr=tuple(isr),
                                 leader=leader, leader_epoch=3, partition_epoch=5, directories=tuple(dirs))


ALL = {1: (False, [d(1, 1)]), 2: (False, [d(2, 1)]), 3: (False, [d(3, 1)])}
DIRS = [d(1, 1), d(2, 1), d(3, 1)]


def test_no_change_is_no_record():
    # PCBT testChangeRecordIsNoOp / KAFKA-16624.
    v = view_with(ALL)
    assert build_change(v, part([1, 2, 3], [1, 2, 3], 1, DIRS)) is None
    assert build_change(v, part([1], [1], -1, [d(1, 1)]), remove=1) is None  # last member, leaderless already


def test_directories_only_change_is_a_record():
    # PCBT testUpdateDirectories: LOST allowed, no leader or ISR change.
    v = view_with(ALL)
    rec = build_change(v, part([1, 2, 3], [1, 2, 3], 2, DIRS), set_directory=(1, LOST))
    assert rec.directories == (LOST, d(2, 1), d(3, 1)) and rec.isr is None and rec.leader == r.NO_LEADER_CHANGE


def test_election_order_keep_leader_then_replica_order():
    # PCBT testElectLeader (no unclean election in this project).
    v = view_with(ALL)
    p = part([1, 2, 3], [1, 2, 3], 2, DIRS)
    assert build_change(v, p, remove=3).leader == r.NO_LEADER_CHANGE  # keeps 2, ISR shrinks
    assert build_change(v, p, remove=2).leader == 1                  # first in replica order
    p = part([3, 1, 2], [1, 2], 2, [d(3, 1), d(1, 1), d(2, 1)])
    assert build_change(v, p, remove=2).leader == 1                  # 3 is not in the ISR


def test_no_leader_epoch_bump_on_isr_shrink_and_partition_epoch_always():
    # PCBT testNoLeaderEpochBumpOnIsrShrink: the image bumps only the partition epoch.
    h = Harness()
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2, 3]])
    h.alter_partition(1, t.topic_id, 0, [1, 2])
    p = h.part(t.topic_id)
    assert (p.leader_epoch, p.partition_epoch) == (0, 1)


def test_empty_target_isr_is_refused():
    # PCBT testNoLeaderEpochBumpOnEmptyTargetIsr: the ISR never becomes empty.
    v = view_with(ALL)
    rec = build_change(v, part([1, 2], [1], 1, DIRS[:2]), remove=1)
    assert rec.isr is None and rec.leader == -1


@pytest.mark.parametrize("dir_of_1,eligible", [
    (d(1, 1), True), (UNASSIGNED, True), (MIGRATING, True), (LOST, False), (d(1, 9), False)])
def test_leader_acceptance_needs_an_online_dir(dir_of_1, eligible):
    # CCMT/BRT testHasOnlineDir matrix through the election.
    v = view_with(ALL)
    rec = build_change(v, part([2, 1], [2, 1], 2, [d(2, 1), dir_of_1]), remove=2)
    assert rec.leader == (1 if eligible else -1)


@pytest.mark.parametrize("state", ["fenced", "unregistered"])
def test_leader_acceptance_needs_an_active_broker(state):
    brokers = dict(ALL)
    if state == "fenced":
        brokers[1] = (True, [d(1, 1)])
    else:
        del brokers[1]
    v = view_with(brokers)
    rec = build_change(v, part([2, 1], [2, 1], 2, [d(2, 1), d(1, 1)]), remove=2)
    assert rec.leader == -1 and rec.isr == (1,)


def test_fence_multiple_brokers_one_tick():
    # QCT testFenceMultipleBrokers: several stale brokers; ISR/leader end state.
    h = Harness(session_timeout_ms=1000)
    for b in (1, 2, 3, 4):
        h.start_broker(b, [d(b, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2, 3, 4], [2, 3, 4, 1], [3, 4, 1, 2]])
    h.advance(600)
    h.heartbeat(4)
    h.advance(600)
    res = h.tick()
    assert kinds(res).count("BrokerRegistrationChangeRecord") == 3
    for p in h.image.partitions_of(t.topic_id).values():
        assert p.isr == (4,) and p.leader == 4


def test_unregister_moves_leaderships_first():
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.start_broker(2, [d(2, 1)])
    _, t = h.create_topic("t", assignments=[[1, 2]])
    res, resp = h.unregister(1)
    assert kinds(res) == ["PartitionChangeRecord", "UnregisterBrokerRecord"]
    assert h.part(t.topic_id).leader == 2 and 1 not in h.image.brokers
