"""Leader-epoch cache rules (unit), the failure channel's once-per-dir contract (unit), and
Kafka's checkpoint text formats on files (integration)."""

from __future__ import annotations

import errno
import os
import threading
import uuid

import pytest
from hypothesis import given, strategies as st

from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.epoch_cache import LeaderEpochCache, end_offset_for
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.failure import DirFailureChannel


def _cache(entries=()):
    saved = []
    return LeaderEpochCache(list(entries), saved.append), saved


@pytest.mark.unit
def test_epoch_cache_assign_and_persist_only_on_change():
    cache, saved = _cache()
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch later: the first start offset stays
    cache.assign(3, 10)
    assert cache.entries == [(1, 0), (3, 10)] and saved == [[(1, 0)], [(1, 0), (3, 10)]]
    cache.assign(2, 7)  # Kafka's rule: removes entries with epoch ≥ 2 or start ≥ 7
    assert cache.entries == [(1, 0), (2, 7)]
    cache.assign(-1, 20)  # undefined epoch (pre-v2 data) ignored
    assert cache.entries == [(1, 0), (2, 7)]


@pytest.mark.unit
def test_epoch_cache_end_offsets_for_offset_for_leader_epoch():
    cache, _ = _cache([(1, 0), (3, 10), (4, 25)])
    assert cache.end_offset_for(0, 40) == (-1, -1)
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (1, 10)  # unknown epoch → largest smaller one
    assert cache.end_offset_for(3, 40) == (3, 25)
    assert cache.end_offset_for(4, 40) == (4, 40)
    assert cache.end_offset_for(9, 40) == (4, 40)
    assert _cache()[0].end_offset_for(1, 5) == (-1, -1)


@pytest.mark.unit
def test_epoch_cache_snapshot_is_immutable_and_answers_without_a_cache():
    """A follower fetch answers OffsetForLeaderEpoch-style checks on the loop from a snapshot
    while the dir worker changes the cache: a snapshot never changes under its reader (the
    cache installs a new tuple per change; before, each check copied and rebuilt a cache)."""
    cache, _ = _cache([(1, 0), (3, 10)])
    snap = cache.snapshot
    cache.assign(4, 25)
    cache.truncate_from_end(12)
    cache.truncate_from_start(5)
    assert snap == ((1, 0), (3, 10))
    assert end_offset_for(snap, 1, 40) == (1, 10) and end_offset_for(snap, 3, 40) == (3, 40)
    assert cache.snapshot == ((1, 5), (3, 10)) and end_offset_for(cache.snapshot, 2, 40) == (1, 10)
    assert end_offset_for((), 1, 5) == (-1, -1)


@pytest.mark.unit
def test_epoch_cache_truncation():
    cache, saved = _cache([(1, 0), (3, 10), (4, 25)])
    cache.truncate_from_end(25)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_end(100)
    assert len(saved) == 1  # nothing changed: nothing written
    cache.truncate_from_start(12)
    assert cache.entries == [(3, 12)]
    cache.clear()
    assert cache.entries == [] and saved[-1] == []


@pytest.mark.unit
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=30))
def test_epoch_cache_stays_strictly_increasing(pairs):
    cache, _ = _cache()
    for epoch, start in pairs:
        cache.assign(epoch, start)
        e = cache.entries
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(e, e[1:]))
        if e:
            assert e[-1][0] >= epoch or e[-1][1] <= start


@pytest.mark.unit
def test_failure_channel_reports_once_per_dir_even_concurrently():
    calls = []
    channel = DirFailureChannel(lambda d, e, op: calls.append((d, e, op)))
    barrier = threading.Barrier(8)

    def fail(i):
        barrier.wait()
        try:
            with channel.io("/a", "append" if i % 2 else "fsync"):
                raise OSError(errno.EIO, "boom")
        except KafkaStorageError:
            pass
    threads = [threading.Thread(target=fail, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(calls) == 1 and calls[0][:2] == ("/a", errno.EIO)
    ran = []
    with pytest.raises(KafkaStorageError) as info:
        with channel.io("/a", "append"):
            ran.append(1)
    assert ran == [] and info.value.errno is None
    with channel.io("/b", "append"):
        ran.append(2)
    assert ran == [2]
    channel.mark_offline_at_start("/c")
    assert channel.is_offline("/c") and len(calls) == 1
    with pytest.raises(ValueError):  # non-OSErrors pass through untouched
        with channel.io("/b", "read"):
            raise ValueError("not an I/O error")
    assert not channel.is_offline("/b")


@pytest.mark.integration
def test_offset_checkpoint_roundtrip_and_errors(tmp_path):
    path = str(tmp_path / ckpt.HW_CHECKPOINT)
    assert ckpt.read_offsets(path) == {}
    ckpt.write_offsets(path, {("b", 1): 7, ("a-x", 0): 12})
    assert open(path).read() == "0\n2\na-x 0 12\nb 1 7\n"
    assert ckpt.read_offsets(path) == {("b", 1): 7, ("a-x", 0): 12}
    assert not os.path.exists(path + ".tmp")
    for bad, msg in [("1\n0\n", "version"), ("0\n3\na 0 1\n", "count 3"), ("0\n1\na 0\n", "3 fields"),
                     ("0\nx\n", "count"), ("0\n1\na b c\n", "integers"), ("", "version and count")]:
        open(path, "w").write(bad)
        with pytest.raises(ckpt.CheckpointFormatError, match=msg):
            ckpt.read_offsets(path)


@pytest.mark.integration
def test_epoch_and_partition_metadata_files(tmp_path):
    epochs = str(tmp_path / ckpt.EPOCH_CHECKPOINT)
    ckpt.write_epochs(epochs, [(0, 0), (4, 100)])
    assert open(epochs).read() == "0\n2\n0 0\n4 100\n"
    assert ckpt.read_epochs(epochs) == [(0, 0), (4, 100)]
    meta = str(tmp_path / ckpt.PARTITION_METADATA)
    tid = uuid.UUID(int=99 << 70)
    ckpt.write_partition_metadata(meta, tid)
    assert open(meta).read().startswith("version: 0\ntopic_id: ")
    assert ckpt.read_partition_metadata(meta) == tid
    open(meta, "w").write("version: 0\ntopic_id: nope\n")
    with pytest.raises(ckpt.CheckpointFormatError, match="topic_id"):
        ckpt.read_partition_metadata(meta)
