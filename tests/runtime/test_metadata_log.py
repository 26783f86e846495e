"""controller_impl.log: durable appends, reads, recovery of torn/corrupt tails (real files)."""

from __future__ import annotations

import os
import uuid

import pytest

from controller_impl.log import LogError, MetadataLog
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.records import (NoOpRecord, PartitionRecord, RegisterBrokerRecord,
                                           TopicRecord)

pytestmark = pytest.mark.integration


def fill(log: MetadataLog, batches: int) -> None:
    for i in range(batches):
        log.append([NoOpRecord(), TopicRecord(name=f"t{i}", topic_id=uuid.UUID(int=1000 + i))],
                   timestamp_ms=1_700_000_000_000 + i)


def offsets_of(data: bytes) -> list[int]:
    return [h.base_offset + i for h, recs in decode_batches(data) for i in range(len(recs))]


def test_append_is_gap_free_committed_and_readable(tmp_path):
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024)
    fill(log, 40)
    assert (log.end_offset, log.high_watermark) == (80, 80)
    assert len(log.segment_files()) > 1  # rolled
    assert offsets_of(log.read(0, 1 << 20)) == list(range(80))
    # from the middle of a batch: whole batch returned; at least one batch even over max_bytes
    assert offsets_of(log.read(37, 1))[:2] == [36, 37]
    assert log.read(80, 1 << 20) == b""
    assert offsets_of(log.read(0, 1 << 20, limit=10)) == list(range(10))
    log.close()


def test_reopen_replays_every_record_in_order(tmp_path):
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024)
    fill(log, 25)
    log.close()
    seen = []
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024, on_record=lambda r, o: seen.append((o, r)))
    assert [o for o, _ in seen] == list(range(50))
    assert seen[3][1] == TopicRecord(name="t1", topic_id=uuid.UUID(int=1001))
    assert log.recovery.truncated_at is None and log.end_offset == 50
    fill(log, 1)
    assert log.end_offset == 52
    log.close()


@pytest.mark.parametrize("cut", [1, 5, 30, 61, 100])
def test_torn_last_batch_is_truncated_not_fatal(tmp_path, cut):
    log = MetadataLog.open(str(tmp_path))
    fill(log, 5)
    path = log.segment_files()[-1]
    log.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - cut)
    log = MetadataLog.open(str(tmp_path))
    assert log.end_offset == 8 and log.recovery.truncated_at is not None
    assert log.recovery.reason
    fill(log, 1)  # appends continue right after the last good batch
    assert offsets_of(log.read(0, 1 << 20)) == list(range(10))
    log.close()


def test_corrupt_middle_batch_cuts_there_and_drops_later_segments(tmp_path):
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024)
    fill(log, 30)
    first = log.segment_files()[0]
    nsegs = len(log.segment_files())
    log.close()
    with open(first, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024)
    assert nsegs > 1 and len(log.recovery.removed_segments) == nsegs - 1
    assert log.end_offset < 20 and offsets_of(log.read(0, 1 << 20)) == list(range(log.end_offset))
    log.close()


def test_garbage_appended_to_the_tail_is_cut(tmp_path):
    log = MetadataLog.open(str(tmp_path))
    fill(log, 3)
    path = log.segment_files()[-1]
    log.close()
    with open(path, "ab") as f:
        f.write(os.urandom(333))
    log = MetadataLog.open(str(tmp_path))
    assert log.end_offset == 6 and log.recovery.truncated_bytes == 333
    log.close()


T77 = uuid.UUID(int=(77 << 64) | 77)


def test_replay_into_an_image_matches_the_live_one(tmp_path):
    d1 = uuid.UUID(int=(1 << 100) + 5)
    records = [RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=9), broker_epoch=0,
                                    log_dirs=(d1,)),
               TopicRecord(name="t", topic_id=T77),
               PartitionRecord(partition_id=0, topic_id=T77, replicas=(1,), isr=(1,),
                               leader=1, leader_epoch=0, partition_epoch=0, directories=(d1,))]
    live = MetadataImage()
    log = MetadataLog.open(str(tmp_path))
    for rec in records:
        first, last = log.append([rec], timestamp_ms=1)
        live.replay(rec, first)
    log.close()
    replayed = MetadataImage()
    MetadataLog.open(str(tmp_path), on_record=replayed.replay).close()
    assert replayed.brokers == live.brokers and replayed.topics == live.topics
    assert replayed.partitions_in_dir(d1) == live.partitions_in_dir(d1) == {(T77, 0)}


def test_follower_path_append_batch_commit_truncate(tmp_path):
    leader = MetadataLog.open(str(tmp_path / "a"))
    fill(leader, 4)
    follower = MetadataLog.open(str(tmp_path / "b"))
    data = leader.read(0, 1 << 20)
    pos = 0
    for header, _ in decode_batches(data):
        follower.append_batch(data[pos:pos + header.size_bytes])
        pos += header.size_bytes
    assert follower.end_offset == 8 and follower.high_watermark == 0
    assert follower.read(0, 1 << 20) == b""  # nothing committed yet
    follower.commit(4)
    assert offsets_of(follower.read(0, 1 << 20)) == [0, 1, 2, 3]
    follower.truncate_to(6)
    assert follower.end_offset == 6
    with pytest.raises(LogError):
        follower.truncate_to(2)  # below the high watermark
    with pytest.raises(LogError):
        follower.append_batch(data[:pos // 4])  # not the next offset / not one batch
    leader.close()
    follower.close()


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.sampled_from(["flip", "truncate", "append"]), st.integers(0, 10**6),
                                 st.binary(min_size=1, max_size=40)), min_size=1, max_size=3))
def test_any_damage_recovers_to_a_clean_prefix(tmp_path_factory, damage):
    root = tmp_path_factory.mktemp("fz")
    log = MetadataLog.open(str(root), segment_bytes=2048)
    fill(log, 30)
    files = log.segment_files()
    log.close()
    for kind, pos, data in damage:
        path = files[pos % len(files)]
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            if kind == "flip" and size:
                f.seek(pos % size)
                f.write(data[: max(1, size - pos % size)])
            elif kind == "truncate":
                f.truncate(pos % (size + 1))
            else:
                f.seek(0, 2)
                f.write(data)
    seen = []
    log = MetadataLog.open(str(root), segment_bytes=2048, on_record=lambda r, o: seen.append(o))
    assert seen == list(range(log.end_offset)) and log.end_offset <= 60
    assert offsets_of(log.read(0, 1 << 20)) == seen
    fill(log, 1)  # and it is writable again
    log.close()
    again = []
    MetadataLog.open(str(root), segment_bytes=2048, on_record=lambda r, o: again.append(o)).close()
    assert again == list(range(len(seen) + 2))


def test_follower_appends_fetched_bytes_as_they_come(tmp_path):
    """append_fetched: batches it holds already are skipped, a partial or corrupt batch
    stops it (what precedes stays), segments roll at the size limit, and the result reads
    back as the leader's log."""
    leader = MetadataLog.open(str(tmp_path / "a"))
    fill(leader, 12)
    data = leader.read(0, 1 << 20)
    sizes = [h.size_bytes for h, _ in decode_batches(data)]
    follower = MetadataLog.open(str(tmp_path / "b"), segment_bytes=3 * sizes[0] + 1)
    assert follower.append_fetched(data[:sizes[0] + sizes[1] + 5]) == [(0, 1, 0), (2, 3, 0)]  # cut mid-batch
    assert follower.end_offset == 4
    # a resend from offset 0 skips what is held; a corrupt 6th batch stops it there
    bad = bytearray(data)
    bad[sum(sizes[:5]) + sizes[5] - 1] ^= 0xFF
    written = follower.append_fetched(bytes(bad))
    assert [w[0] for w in written] == [4, 6, 8] and follower.end_offset == 10
    assert follower.append_fetched(memoryview(data)[sum(sizes[:5]):]) == [(10, 11, 0)] + [
        (b, b + 1, 0) for b in range(12, 24, 2)]
    assert follower.append_fetched(data[sum(sizes[:3]):]) == []  # nothing new
    assert len(os.listdir(follower.directory)) > 2  # rolled
    follower.commit(24)
    assert follower.read(0, 1 << 20) == data
    follower.close()
    reopened = MetadataLog.open(str(tmp_path / "b"), segment_bytes=3 * sizes[0] + 1)
    assert reopened.end_offset == 24
    reopened.commit(24)
    assert reopened.read(0, 1 << 20) == data
    reopened.close()
    leader.close()
