"""The bulk paths of a big change (a dir failure, a fence) give the image exactly what the
plain record-by-record replay gives: the registrations a handler merged already
(``ControllerResult.merged``) installed as they are, and results split into batches."""

import copy

import pytest
from kio.schema.broker_heartbeat.v1 import request as hb1

from controller_impl.runtime.image_io import (DEFERRED_INSTALL_MIN_RECORDS, MAX_RECORDS_PER_BATCH, plan_deferred_install,
                                              replay_records, split_records)
from kafka_common.metadata import records as r

from controller_harness import Harness, dir_id as d

pytestmark = pytest.mark.unit


def cluster(partitions: int = 40) -> tuple[Harness, object]:
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    h.start_broker(3, [d(3, 1)])
    assignments = [[1, 2 + p % 2] if p % 3 else [2 + p % 2, 1] for p in range(partitions)]
    _, t = h.create_topic("t", assignments=assignments)
    tid = t.topic_id
    h.assign(1, {d(1, 1): [(tid, p) for p in range(0, partitions, 2)],
                 d(1, 2): [(tid, p) for p in range(1, partitions, 2)]})
    return h, tid


def heartbeat(h: Harness, broker: int, offline=(), want_fence=False):
    req = hb1.BrokerHeartbeatRequest(
        broker_id=broker, broker_epoch=h.epoch(broker), current_metadata_offset=h.image.last_offset,
        want_fence=want_fence, want_shut_down=False, offline_log_dirs=tuple(offline))
    return h.state.handle_broker_heartbeat(req, h.now)


def both_ways(h: Harness, result) -> None:
    """Replays ``result`` plainly into a copy of the image and through its merges into the
    image itself; both end the same, with the same changes reported."""
    plain = copy.deepcopy(h.image)
    base = h.image.last_offset + 1
    for i, rec in enumerate(result.records):
        plain.replay(r.decode_record(r.encode_record(rec)), base + i)
    assert result.merged is not None and len(result.merged) == len(result.records)
    assert any(m is not None for m in result.merged)
    replay_records(h.image, list(result.records), base, result.merged)
    assert h.image.snapshot_state() == plain.snapshot_state()
    assert h.image.last_offset == plain.last_offset
    assert h.image.drain_changes() == plain.drain_changes()
    for b in (1, 2, 3):
        assert h.image.partitions_with_isr_member(b) == plain.partitions_with_isr_member(b)


def test_dir_failure_merges_replay_like_the_records():
    h, _ = cluster()
    h.image.drain_changes()
    res = heartbeat(h, 1, offline=[d(1, 2)])
    assert sum(isinstance(x, r.PartitionChangeRecord) for x in res.records) == 20
    both_ways(h, res)


def test_dir_failure_and_fence_in_one_heartbeat():
    h, _ = cluster()
    h.image.drain_changes()
    res = heartbeat(h, 1, offline=[d(1, 2)], want_fence=True)
    both_ways(h, res)


def test_two_fences_in_one_tick_chain_merges_of_one_partition():
    h = Harness()
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, 1)])
    h.create_topic("t", assignments=[[1 + (p + i) % 3 for i in range(3)] for p in range(30)])
    h.image.drain_changes()
    h.advance(5000)
    h.heartbeat(1)
    h.advance(5000)  # brokers 2 and 3 silent for longer than the session timeout
    res = h.state.tick(h.now)
    keys = [(x.topic_id, x.partition_id) for x in res.records if isinstance(x, r.PartitionChangeRecord)]
    assert len(keys) > len(set(keys))  # a partition changed twice: by each fence
    both_ways(h, res)


def test_a_merge_for_a_registration_no_longer_there_falls_back_to_the_record():
    h, tid = cluster()
    res = heartbeat(h, 1, offline=[d(1, 2)])
    h.advance(1)
    # the image moved on meanwhile (not what the runtime does: the merge must not be trusted)
    other = heartbeat(h, 2, want_fence=True)
    h.apply(other)
    plain = copy.deepcopy(h.image)
    base = h.image.last_offset + 1
    try:
        for i, rec in enumerate(res.records):
            plain.replay(rec, base + i)
    except Exception as exc:  # the records may no longer fit: the merged path must refuse too
        with pytest.raises(Exception):
            replay_records(h.image, list(res.records), base, res.merged)
        return
    replay_records(h.image, list(res.records), base, res.merged)
    assert h.image.snapshot_state() == plain.snapshot_state()


def test_non_atomic_results_split_into_batches_of_at_most_the_limit():
    n = MAX_RECORDS_PER_BATCH
    recs = list(range(2 * n + 3))
    chunks = split_records(recs, atomic=False)
    assert [len(c) for c in chunks] == [n, n, 3] and sum(chunks, []) == recs
    assert split_records(recs, atomic=True) == [recs]
    assert split_records(recs[:n], atomic=False) == [recs[:n]]


def deferred_both_ways(h: Harness, result) -> None:
    """The deferred install (broker records replayed first, then every merge installed)
    ends where the plain replay of the records in order ends."""
    plain = copy.deepcopy(h.image)
    base = h.image.last_offset + 1
    for i, rec in enumerate(result.records):
        plain.replay(r.decode_record(r.encode_record(rec)), base + i)
    records = list(result.records)
    first = plan_deferred_install(h.image, records, result.merged)
    assert first == [i for i, rec in enumerate(records) if not isinstance(rec, r.PartitionChangeRecord)]
    for i in first:
        h.image.replay(records[i], base + i)
    h.image.install_merged([m for m in result.merged if m is not None], base + len(records) - 1)
    assert h.image.snapshot_state() == plain.snapshot_state()
    assert h.image.last_offset == plain.last_offset
    assert h.image.drain_changes() == plain.drain_changes()
    for b in (1, 2, 3):
        assert h.image.partitions_with_isr_member(b) == plain.partitions_with_isr_member(b)


def test_deferred_install_of_a_dir_failure_and_of_two_fences():
    h, _ = cluster(2 * DEFERRED_INSTALL_MIN_RECORDS + 10)
    h.image.drain_changes()
    deferred_both_ways(h, heartbeat(h, 1, offline=[d(1, 2)]))
    h = Harness()
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, 1)])
    h.create_topic("t", assignments=[[1 + (p + i) % 3 for i in range(3)] for p in range(DEFERRED_INSTALL_MIN_RECORDS)])
    h.image.drain_changes()
    h.advance(5000)
    h.heartbeat(1)
    h.advance(5000)
    res = h.state.tick(h.now)
    assert sum(not isinstance(x, r.PartitionChangeRecord) for x in res.records) == 2  # both fences, in between
    deferred_both_ways(h, res)


def test_no_deferred_install_for_small_stale_or_unmerged_results():
    h, _ = cluster(2 * DEFERRED_INSTALL_MIN_RECORDS + 10)
    res = heartbeat(h, 1, offline=[d(1, 2)])
    records = list(res.records)
    assert plan_deferred_install(h.image, records, res.merged) is not None
    assert plan_deferred_install(h.image, records, None) is None
    assert plan_deferred_install(h.image, records[:10], res.merged[:10]) is None  # small
    noop = records + [r.NoOpRecord()]
    assert plan_deferred_install(h.image, noop, res.merged + (None,)) is None  # not a broker record
    h.apply(res)  # the image moved on: the merges no longer start from its registrations
    assert plan_deferred_install(h.image, records, res.merged) is None


def test_fast_constructors_make_what_the_constructors_make():
    from controller_impl.state.replication_control import isr_leader_change, sorted_keys, with_isr_leader
    h, tid = cluster()
    part = h.part(tid, 1)
    for isr, leader in (((2,), 2), (None, r.NO_LEADER_CHANGE), ((1, 2), -1)):
        fast = isr_leader_change(tid, 1, isr, leader)
        assert fast == r.PartitionChangeRecord(topic_id=tid, partition_id=1, isr=isr, leader=leader)
        assert r.decode_record(r.encode_record(fast)) == fast
    new = with_isr_leader(part, (part.replicas[0],), part.replicas[0], part.leader_epoch + 1)
    assert new == type(part)(part.topic_id, 1, part.replicas, (part.replicas[0],), part.replicas[0],
                             part.leader_epoch + 1, part.partition_epoch + 1, part.directories)
    keys = {(t, p) for t in (tid, h.create_topic("u", assignments=[[1, 2]] * 5)[1].topic_id) for p in range(5)}
    assert sorted_keys(keys) == sorted(keys)
    assert sorted_keys({k for k in keys if k[0] == tid}) == sorted(k for k in keys if k[0] == tid)
