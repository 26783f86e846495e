"""MetadataImage replay: Kafka's replay rules, invariants that raise, indexes, change tracking."""

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kafka_common.ids import LOST, MIGRATING, UNASSIGNED, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.image_changes import ImageError

pytestmark = pytest.mark.unit

T1 = uuid.UUID(int=(1 << 64) + 11)
D = {i: uuid.UUID(int=(7 << 64) + i) for i in range(1, 10)}


class Log:
    def __init__(self):
        self.image = MetadataImage()
        self.offset = 0

    def apply(self, *recs):
        for rec in recs:
            self.image.replay(rec, self.offset)
            self.offset += 1
        return self.image


def reg(bid, dirs, epoch=None, inc=None, fenced=True):
    return r.RegisterBrokerRecord(broker_id=bid, incarnation_id=inc or uuid.UUID(int=100 + bid),
                                  broker_epoch=bid * 10 if epoch is None else epoch,
                                  end_points=(r.BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + bid,
                                                               security_protocol=0),),
                                  fenced=fenced, log_dirs=tuple(dirs))


def part(pid, replicas, isr, leader, dirs, tid=T1):
    return r.PartitionRecord(partition_id=pid, topic_id=tid, replicas=tuple(replicas), isr=tuple(isr),
                             leader=leader, leader_epoch=0, partition_epoch=0, directories=tuple(dirs))


def base():
    log = Log()
    log.apply(reg(1, [D[1], D[2]]), reg(2, [D[3]]), r.TopicRecord(name="t", topic_id=T1),
              part(0, [1, 2], [1, 2], 1, [D[1], D[3]]),
              part(1, [2, 1], [2, 1], 2, [D[3], D[2]]),
              part(2, [1, 2], [1, 2], 1, [UNASSIGNED, D[3]]))
    return log


def test_register_sets_dirs_owner_and_offsets():
    log = base()
    img = log.image
    assert img.brokers[1].log_dirs == tuple(sorted([D[1], D[2]], key=lambda d: d.int))
    assert img.brokers[1].fenced and img.brokers[1].epoch == 10
    assert img.register_offsets == {1: 0, 2: 1}
    assert img.dir_owner(D[2]) == 1 and img.dir_owner(D[3]) == 2
    log.apply(reg(1, [D[1]]))  # same broker re-registers without D2
    assert img.register_offsets[1] == 6 and img.dir_owner(D[2]) is None
    assert img.last_offset == 6


def test_dir_owned_by_another_broker_raises_and_changes_nothing():
    log = base()
    before = log.image.brokers[2]
    with pytest.raises(ImageError, match="owned by broker 1"):
        log.apply(reg(2, [D[1]]))
    assert log.image.brokers[2] is before and log.image.last_offset == 5


def test_dir_index_skips_reserved_ids_and_isr_and_replica_indexes():
    img = base().image
    assert img.partitions_in_dir(D[1]) == {(T1, 0)}
    assert img.partitions_in_dir(D[2]) == {(T1, 1)}
    assert img.partitions_in_dir(D[3]) == {(T1, 0), (T1, 1), (T1, 2)}
    assert img.partitions_in_dir(UNASSIGNED) == frozenset()
    assert img.partitions_with_isr_member(1) == {(T1, 0), (T1, 1), (T1, 2)}
    assert img.partitions_of_broker(3) == frozenset()
    assert img.partition_count() == 3


def test_registration_change_rules():
    log = base()
    img = log.image
    log.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=-1))
    assert not img.brokers[1].fenced and len(img.brokers[1].log_dirs) == 2  # empty LogDirs: no change
    log.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=0, log_dirs=(D[1],)))
    assert not img.brokers[1].fenced and img.brokers[1].log_dirs == (D[1],)
    assert img.dir_owner(D[2]) is None and img.dir_owner(D[1]) == 1
    log.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=1))
    assert img.brokers[1].fenced
    log.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=1))
    assert img.brokers[1].in_controlled_shutdown
    for bad, msg in [(dict(fenced=2), "fenced value"), (dict(in_controlled_shutdown=-1), "in_controlled_shutdown"),
                     (dict(broker_epoch=11), "epoch"), (dict(broker_id=9), "not registered")]:
        kw = dict(broker_id=1, broker_epoch=10) | bad
        with pytest.raises(ImageError, match=msg):
            log.apply(r.BrokerRegistrationChangeRecord(**kw))


def test_fence_unfence_and_unregister():
    log = base()
    img = log.image
    log.apply(r.UnfenceBrokerRecord(id=2, epoch=20))
    assert not img.brokers[2].fenced
    log.apply(r.FenceBrokerRecord(id=2, epoch=20))
    assert img.brokers[2].fenced
    with pytest.raises(ImageError):
        log.apply(r.UnregisterBrokerRecord(broker_id=2, broker_epoch=21))
    log.apply(r.UnregisterBrokerRecord(broker_id=2, broker_epoch=20))
    assert 2 not in img.brokers and 2 not in img.register_offsets and img.dir_owner(D[3]) is None
    log.apply(reg(3, [D[3]]))  # a freed dir can be registered by another broker
    assert img.dir_owner(D[3]) == 3


def test_partition_change_epochs_and_directories():
    log = base()
    img = log.image
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, isr=(1,)))
    p = img.partition(T1, 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), 1, 0, 1)
    assert img.partitions_with_isr_member(2) == {(T1, 1), (T1, 2)}
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1))
    p = img.partition(T1, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (-1, 1, 2)
    # Directories-only change: partition epoch +1, leader epoch unchanged, index moves.
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, directories=(D[2], D[3])))
    p = img.partition(T1, 0)
    assert (p.directories, p.leader_epoch, p.partition_epoch) == ((D[2], D[3]), 1, 3)
    assert img.partitions_in_dir(D[1]) == frozenset()
    assert img.partitions_in_dir(D[2]) == {(T1, 0), (T1, 1)}
    # LOST is never indexed.
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, directories=(LOST, D[3])))
    assert img.partitions_in_dir(D[2]) == {(T1, 1)}
    # Empty list resets to MIGRATING (Kafka's defaultToMigrating).
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, directories=()))
    assert img.partition(T1, 0).directories == (MIGRATING, MIGRATING)


def test_replica_change_without_directories_keeps_retained_dirs():
    log = base()
    log.apply(reg(3, [D[5]]))
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, replicas=(1, 2, 3)))
    assert log.image.partition(T1, 0).directories == (D[1], D[3], MIGRATING)


@pytest.mark.parametrize("change,msg", [
    (dict(isr=(1, 5)), "not a subset"),
    (dict(leader=5), "leader 5 not in ISR"),
    (dict(directories=(D[1],)), "not aligned"),
    (dict(isr=(1, 1)), "duplicate"),
    (dict(partition_id=9), "unknown partition"),
])
def test_broken_invariants_raise_and_change_nothing(change, msg):
    log = base()
    before = log.image.partition(T1, 0)
    with pytest.raises(ImageError, match=msg):
        log.apply(r.PartitionChangeRecord(**(dict(topic_id=T1, partition_id=0) | change)))
    assert log.image.partition(T1, 0) is before
    assert log.image.partitions_in_dir(D[1]) == {(T1, 0)}


def test_partition_record_rules():
    log = base()
    with pytest.raises(ImageError, match="unknown topic"):
        log.apply(part(0, [1], [1], 1, [D[1]], tid=uuid.UUID(int=(9 << 64))))
    with pytest.raises(ImageError, match="not aligned"):
        log.apply(part(5, [1, 2], [1], 1, [D[1]]))
    log.apply(part(5, [1, 2], [1], 1, []))  # v0-style: no directories → MIGRATING
    assert log.image.partition(T1, 5).directories == (MIGRATING, MIGRATING)


def test_remove_topic_cleans_index_per_partition_even_with_empty_isr():
    # Reference §3.4: Kafka cleans the dir index per ISR member, leaking empty-ISR partitions.
    log = base()
    log.apply(part(3, [1], [], -1, [D[2]]))
    assert (T1, 3) in log.image.partitions_in_dir(D[2])
    log.apply(r.RemoveTopicRecord(topic_id=T1))
    img = log.image
    for d in D.values():
        assert img.partitions_in_dir(d) == frozenset()
    assert img.partitions_with_isr_member(1) == frozenset() and img.partitions_of_broker(1) == frozenset()
    assert img.partition_count() == 0 and "t" not in img.topic_ids and img.partitions_of(T1) == {}
    log.apply(r.TopicRecord(name="t", topic_id=uuid.UUID(int=(1 << 64) + 12)))  # name reusable


def test_topic_record_duplicates_raise():
    log = base()
    with pytest.raises(ImageError, match="name"):
        log.apply(r.TopicRecord(name="t", topic_id=uuid.UUID(int=(3 << 64))))
    with pytest.raises(ImageError, match="id"):
        log.apply(r.TopicRecord(name="u", topic_id=T1))


def test_offsets_must_increase_and_unknown_records_raise():
    log = base()
    with pytest.raises(ImageError, match="offset"):
        log.image.replay(r.NoOpRecord(), 3)
    with pytest.raises(ImageError, match="cannot replay"):
        log.image.replay(object(), 100)
    log.image.replay(r.NoOpRecord(), 100)
    assert log.image.last_offset == 100


def test_change_tracking():
    log = base()
    changes = log.image.drain_changes()
    assert set(changes.brokers) == {1, 2} and changes.brokers[1][0] is None
    assert set(changes.partitions) == {(T1, 0), (T1, 1), (T1, 2)} and T1 in changes.created_topics
    assert log.image.drain_changes().is_empty()
    old = log.image.partition(T1, 0)
    log.apply(r.PartitionChangeRecord(topic_id=T1, partition_id=0, isr=(1,)),
              r.PartitionChangeRecord(topic_id=T1, partition_id=0, leader=-1))
    changes = log.image.drain_changes()
    assert changes.partitions[(T1, 0)] == (old, log.image.partition(T1, 0))
    log.apply(r.RemoveTopicRecord(topic_id=T1))
    changes = log.image.drain_changes()
    assert changes.removed_topics[T1].name == "t"
    assert all(new is None for _, new in changes.partitions.values()) and len(changes.partitions) == 3


# --- property: indexes always equal a brute-force recomputation ------------------------

DIRS = [D[1], D[2], D[3], D[4], UNASSIGNED, LOST, MIGRATING]


@st.composite
def change_records(draw):
    pid = draw(st.integers(0, 3))
    replicas = tuple(draw(st.permutations([1, 2, 3]))[:draw(st.integers(1, 3))])
    isr = tuple(b for b in replicas if draw(st.booleans()))
    leader = draw(st.sampled_from(list(isr) + [-1]))
    dirs = tuple(draw(st.sampled_from(DIRS)) for _ in replicas)
    if draw(st.booleans()):
        return part(pid, replicas, isr, leader, dirs)
    return ("change", pid, draw(st.booleans()), dirs, replicas, isr, leader)


@settings(max_examples=150, deadline=None)
@given(st.lists(change_records(), max_size=25))
def test_indexes_match_brute_force(items):
    log = Log()
    log.apply(reg(1, [D[1], D[2]]), reg(2, [D[3]]), reg(3, [D[4]]), r.TopicRecord(name="t", topic_id=T1))
    for item in items:
        if isinstance(item, tuple):
            _, pid, with_replicas, dirs, replicas, isr, leader = item
            if log.image.partition(T1, pid) is None:
                continue
            rec = r.PartitionChangeRecord(topic_id=T1, partition_id=pid, replicas=replicas,
                                          isr=isr, leader=leader, directories=dirs if with_replicas else None)
            try:
                log.apply(rec)
            except ImageError:
                pass
        else:
            log.apply(item)
    img = log.image
    parts = list(img.all_partitions())
    for d in DIRS:
        want = {(p.topic_id, p.partition_id) for p in parts if d in p.directories and not is_reserved(d)}
        assert set(img.partitions_in_dir(d)) == want
    for b in (1, 2, 3):
        assert set(img.partitions_with_isr_member(b)) == {(p.topic_id, p.partition_id) for p in parts if b in p.isr}
        assert set(img.partitions_of_broker(b)) == {(p.topic_id, p.partition_id) for p in parts if b in p.replicas}
    assert img.partition_count() == len(parts)


def test_known_and_offline_dirs_survive_a_restart_registration():
    log = base()
    img = log.image
    log.apply(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, log_dirs=(D[1],)))
    assert img.offline_dirs(1) == {D[2]} and img.known_dirs(1) == {D[1], D[2]}
    log.apply(reg(1, [D[1]], epoch=50, inc=uuid.UUID(int=999)))  # new incarnation, D2 still gone
    assert img.offline_dirs(1) == {D[2]}
    log.apply(reg(2, [D[3], D[2]]))  # another broker takes D2: no longer broker 1's
    assert img.offline_dirs(1) == frozenset()
    log.apply(r.UnregisterBrokerRecord(broker_id=1, broker_epoch=50))
    assert img.known_dirs(1) == frozenset()


# -- snapshots ---------------------------------------------------------------------------
def _snapshot_image():
    import random as _random
    from kafka_common import ids as _ids
    from kafka_common.metadata import records as rr
    rng = _random.Random(5)
    img = MetadataImage()
    dirs = {b: [_ids.random_directory_id(rng) for _ in range(2)] for b in (1, 2)}
    off = 0
    for b in (1, 2):
        img.replay(rr.RegisterBrokerRecord(broker_id=b, incarnation_id=_ids.random_uuid(rng), broker_epoch=off,
                                           end_points=(rr.BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + b,
                                                                         security_protocol=0),),
                                           fenced=b == 2, log_dirs=tuple(sorted(dirs[b], key=lambda u: u.int))), off)
        off += 1
    tid = _ids.random_uuid(rng)
    img.replay(rr.TopicRecord(name="t", topic_id=tid), off)
    off += 1
    for p in range(6):
        img.replay(rr.PartitionRecord(partition_id=p, topic_id=tid, replicas=(1, 2), isr=(1, 2), leader=1,
                                      leader_epoch=0, partition_epoch=0,
                                      directories=(dirs[1][p % 2], _ids.UNASSIGNED)), off)
        off += 1
    img.drain_changes()
    return img, tid, dirs


@pytest.mark.unit
def test_snapshot_round_trip_keeps_state_and_indexes():
    from kafka_common.metadata import snapshot
    img, tid, dirs = _snapshot_image()
    blob = snapshot.encode(img, img.last_offset + 1, 3)
    assert snapshot.read_id(blob) == (img.last_offset + 1, 3)
    back, end, epoch = snapshot.decode(blob)
    assert (end, epoch) == (img.last_offset + 1, 3)
    assert back.snapshot_state() == img.snapshot_state()
    assert back.brokers == img.brokers and back.register_offsets == img.register_offsets
    assert back.partitions_in_dir(dirs[1][0]) == img.partitions_in_dir(dirs[1][0])
    assert back.partitions_with_isr_member(2) == img.partitions_with_isr_member(2)
    assert back.partition_count() == 6 and back.known_dirs(1) == img.known_dirs(1)
    with pytest.raises(snapshot.SnapshotError):
        snapshot.decode(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(snapshot.SnapshotError):
        snapshot.decode(b"not a snapshot at all, no")


@pytest.mark.unit
def test_replace_with_records_the_difference_as_changes():
    from kafka_common.metadata import records as rr
    img, tid, dirs = _snapshot_image()
    newer, _, _ = _snapshot_image()
    newer.replay(rr.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=(1,), leader=1), newer.last_offset + 1)
    newer.drain_changes()
    holder = img
    img.replace_with(newer)
    assert holder.partition(tid, 0).isr == (1,) and holder.last_offset == newer.last_offset
    changes = holder.drain_changes()
    assert list(changes.partitions) == [(tid, 0)]
    assert changes.partitions[(tid, 0)][0].isr == (1, 2)
    empty = MetadataImage()
    empty.replace_with(newer)
    ch = empty.drain_changes()
    assert len(ch.partitions) == 6 and set(ch.brokers) == {1, 2} and tid in ch.created_topics
