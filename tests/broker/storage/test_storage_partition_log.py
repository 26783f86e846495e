"""PartitionLog on real files: append, read, roll, sparse index, truncation, epochs, flush
policy and recovery after an unclean stop."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kafka_common import batch_header as bh
from kafka_common.clock import ManualClock
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, InvalidRecordBatch, OffsetOutOfRange
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog, roll_jitter_ms
from broker_impl.storage.segment import INDEX_ENTRY_BYTES
from storage_batches import headers, make_batch

pytestmark = pytest.mark.integration
TOPIC_ID = uuid.UUID(int=0xABCDEF0123456789ABCDEF0123456789)


@pytest.fixture
def env(tmp_path, failures):
    clock = ManualClock()
    channel = DirFailureChannel(failures)
    def new(config=LogConfig(), topic="t", partition=0):
        return PartitionLog.create(str(tmp_path), topic, partition, TOPIC_ID, config, channel, clock.monotonic_ms)
    def reload(config=LogConfig(), name="t-0", *, recovery_point=0, hw=0, clean=False):
        return PartitionLog.load(str(tmp_path), name, config, channel, clock.monotonic_ms,
                                 recovery_point=recovery_point, high_watermark=hw, clean_shutdown=clean)
    class Env:
        pass
    e = Env()
    e.dir, e.clock, e.channel, e.new, e.reload, e.failures = str(tmp_path), clock, channel, new, reload, failures
    return e


def test_leader_append_assigns_offsets_and_epoch_in_place(env):
    log = env.new()
    assert log.append_as_leader(make_batch(3, base_offset=77, epoch=9), leader_epoch=4) == (0, 2)
    assert log.append_as_leader(make_batch(2) + make_batch(5), leader_epoch=4) == (3, 9)
    assert log.log_end_offset == 10
    data = log.read(0, 1 << 20)
    got = headers(data)  # iter_batches checks every CRC: the rewrite stayed outside it
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in got] == \
        [(0, 2, 4), (3, 4, 4), (5, 9, 4)]
    assert log.epoch_cache.entries == [(4, 0)]
    log.append_as_leader(make_batch(1), leader_epoch=6)
    assert log.epoch_cache.entries == [(4, 0), (6, 10)]
    # the file follows with the flush that makes those offsets durable (KAFKA-15046: no fsync
    # of it in front of the appends); a truncation writes it at once
    assert not os.path.exists(os.path.join(log.path, ckpt.EPOCH_CHECKPOINT))
    log.flush()
    assert ckpt.read_epochs(os.path.join(log.path, ckpt.EPOCH_CHECKPOINT)) == [(4, 0), (6, 10)]
    assert log.end_offset_for_epoch(4) == (4, 10)
    assert log.end_offset_for_epoch(5) == (4, 10)
    assert log.end_offset_for_epoch(6) == (6, 11)
    assert ckpt.read_partition_metadata(os.path.join(log.path, ckpt.PARTITION_METADATA)) == TOPIC_ID


def test_read_whole_batches_min_one_and_upper_bound(env):
    log = env.new()
    for _ in range(5):
        log.append_as_leader(make_batch(4, 50), leader_epoch=0)  # offsets 0..19
    size = len(make_batch(4, 50))
    # an offset inside a batch returns that whole batch
    assert [h.base_offset for h in headers(log.read(6, size))] == [4]
    # max_bytes below one batch: still one whole batch (min_one), or nothing without it
    assert [h.base_offset for h in headers(log.read(6, 10))] == [4]
    assert log.read(6, 10, min_one=False) == b""
    assert [h.base_offset for h in headers(log.read(0, 3 * size))] == [0, 4, 8]
    assert [h.base_offset for h in headers(log.read(0, 3 * size - 1))] == [0, 4]
    # consumers read below the high watermark only
    assert [h.base_offset for h in headers(log.read(0, 1 << 20, upper_offset=8))] == [0, 4]
    assert log.read(8, 1 << 20, upper_offset=8) == b""
    assert log.read(20, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)


def test_roll_by_size_names_segments_by_base_offset(env):
    batch = make_batch(2, 100)
    log = env.new(LogConfig(segment_bytes=3 * len(batch) + 10))
    for _ in range(10):
        log.append_as_leader(batch, leader_epoch=1)
    names = sorted(n for n in os.listdir(log.path) if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in (0, 6, 12, 18)]
    assert log.segment_count == 4
    # a read at a later segment's offset finds it; a read spanning a boundary stops at it
    assert [h.base_offset for h in headers(log.read(13, 1 << 20))] == [12, 14, 16]
    assert [h.base_offset for h in headers(log.read(2, 1 << 20))] == [2, 4]
    # the rolled segments were fsynced and the recovery point moved past them
    assert log.recovery_point == 18


def test_roll_by_time(env):
    log = env.new(LogConfig(roll_ms=1000))
    log.append_as_leader(make_batch(1), 0)
    env.clock.advance(999)
    log.append_as_leader(make_batch(1), 0)
    assert log.segment_count == 1
    env.clock.advance(1)
    log.append_as_leader(make_batch(1), 0)
    assert log.segment_count == 2
    log.truncate_fully_and_start_at(3)
    env.clock.advance(5000)  # an old but empty active segment does not roll
    log.append_as_leader(make_batch(1), 0)
    assert log.segment_count == 1
    assert sorted(n for n in os.listdir(log.path) if n.endswith(".log")) == [f"{3:020d}.log"]


def test_roll_jitter_spreads_the_rolls_of_partitions_created_together(env):
    """segment.jitter.ms: each segment rolls up to that much before segment.ms, by a jitter
    of its own (the partitions of a topic created at once must not all roll in one burst)."""
    jit = {p: roll_jitter_ms("t", p, 0, 1000, 1000) for p in range(40)}
    assert all(0 <= j < 1000 for j in jit.values())
    assert len(set(jit.values())) >= 35            # partition to partition
    assert len({roll_jitter_ms("t", 0, base, 1000, 1000) for base in range(0, 400, 10)}) >= 35  # segment to segment
    assert roll_jitter_ms("t", 0, 0, 1000, 0) == 0
    assert all(roll_jitter_ms("t", p, 0, 300, 5000) < 300 for p in range(40))  # within segment.ms
    cfg = LogConfig(roll_ms=1000, roll_jitter_ms=1000)
    logs = [env.new(cfg, partition=p) for p in range(40)]
    rolled_at = {}
    for step in range(0, 1001, 50):
        for p, log in enumerate(logs):
            log.append_as_leader(make_batch(1), 0)
            if log.segment_count == 2 and p not in rolled_at:
                rolled_at[p] = step
        env.clock.advance(50)
    assert set(rolled_at) == set(range(40))         # all rolled within segment.ms ...
    for p, at in rolled_at.items():                  # ... each at the first append past its own time
        assert at - 50 < 1000 - jit[p] <= at
    assert len(set(rolled_at.values())) >= 12        # spread over the second, not one burst
    # without jitter the same logs roll together
    plain = [env.new(LogConfig(roll_ms=1000), topic="u", partition=p) for p in range(10)]
    for log in plain:
        log.append_as_leader(make_batch(1), 0)
    env.clock.advance(999)
    for log in plain:
        log.append_as_leader(make_batch(1), 0)
    assert {log.segment_count for log in plain} == {1}


def test_sparse_index_written_and_reloaded(env):
    cfg = LogConfig(index_interval_bytes=300)
    log = env.new(cfg)
    batch = make_batch(1, 90)
    for _ in range(40):
        log.append_as_leader(batch, 0)
    seg = log._segments[0]
    expected_entries = seg.index_entries
    assert 1 < expected_entries < 40  # sparse, not one per batch
    assert os.path.getsize(seg.index_path) == expected_entries * INDEX_ENTRY_BYTES
    log.flush()
    log.close()
    again = env.reload(cfg, recovery_point=40, clean=True)
    assert again.recovery.recovered_segments == 0
    assert again._segments[0].index_entries == expected_entries
    assert [h.base_offset for h in headers(again.read(33, 1))] == [33]
    again.close()
    # a garbage index is detected and rebuilt from the log
    with open(seg.index_path, "r+b") as f:
        f.write(b"\xff" * 11)
    third = env.reload(cfg, recovery_point=40, clean=True)
    assert third.recovery.recovered_segments == 1 and third.recovery.truncated_bytes == 0
    assert third.log_end_offset == 40
    assert [h.base_offset for h in headers(third.read(17, 1))] == [17]
    third.close()
    os.unlink(seg.index_path)  # a lost index is rebuilt too
    fourth = env.reload(cfg, recovery_point=40, clean=True)
    assert fourth.recovery.recovered_segments == 1 and fourth._segments[0].index_entries == expected_entries


def test_invalid_input_is_rejected_and_dir_stays_online(env):
    log = env.new(LogConfig(segment_bytes=2048))
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidRecordBatch) as info:
        log.append_as_leader(bytes(bad), 0)
    assert info.value.error_code == CORRUPT_MESSAGE
    with pytest.raises(InvalidRecordBatch):
        log.append_as_leader(make_batch(1)[:-3], 0)  # torn
    with pytest.raises(InvalidRecordBatch):
        log.append_as_leader(b"", 0)
    with pytest.raises(InvalidRecordBatch) as info:
        log.append_as_leader(make_batch(1, 3000), 0)
    assert info.value.error_code == MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and env.failures.calls == [] and not log.is_offline


def test_follower_append_keeps_offsets_and_epochs(env):
    log = env.new()
    assert log.append_as_follower(make_batch(2, base_offset=0, epoch=1) + make_batch(3, base_offset=2, epoch=1)) == (0, 4)
    assert log.append_as_follower(make_batch(1, base_offset=5, epoch=3)) == (5, 5)
    assert log.append_as_follower(b"") is None
    assert log.epoch_cache.entries == [(1, 0), (3, 5)]
    with pytest.raises(InvalidRecordBatch, match="out of order"):
        log.append_as_follower(make_batch(1, base_offset=4, epoch=3))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers(log.read(0, 1 << 20))] == \
        [(0, 1), (2, 1), (5, 3)]


def test_truncate_divergent_tail_across_segments(env):
    batch = make_batch(2, 100)
    log = env.new(LogConfig(segment_bytes=2 * len(batch) + 10))
    for epoch in (1, 1, 1, 2, 2, 3, 3):
        log.append_as_leader(batch, epoch)  # offsets 0..13, segments at 0, 4, 8, 12
    log.high_watermark = 12
    assert log.segment_count == 4
    assert log.epoch_cache.entries == [(1, 0), (2, 6), (3, 10)]
    assert log.truncate_to(7)  # inside batch 6..7: that whole batch goes (Kafka's rule)
    assert log.log_end_offset == 6
    assert log.high_watermark == 6 and log.recovery_point <= 6
    assert log.epoch_cache.entries == [(1, 0)]
    assert sorted(n for n in os.listdir(log.path) if n.endswith(".log")) == [f"{b:020d}.log" for b in (0, 4)]
    assert not log.truncate_to(100)
    assert log.append_as_follower(make_batch(2, base_offset=6, epoch=4)) == (6, 7)
    assert log.epoch_cache.entries == [(1, 0), (4, 6)]
    assert [h.base_offset for h in headers(log.read(4, 1 << 20))] == [4, 6]


def test_truncate_fully_and_start_at(env):
    log = env.new()
    log.append_as_leader(make_batch(5), 1)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert sorted(n for n in os.listdir(log.path) if n.endswith(".log")) == ["00000000000000001000.log"]
    assert log.append_as_follower(make_batch(2, base_offset=1000, epoch=5)) == (1000, 1001)
    with pytest.raises(OffsetOutOfRange):
        log.read(999, 100)
    log.flush()
    log.close()
    again = env.reload()
    assert (again.log_start_offset, again.log_end_offset) == (1000, 1002)


def test_flush_policy_by_messages_and_time(env):
    log = env.new(LogConfig(flush_interval_messages=5, flush_interval_ms=1000))
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(2), 0)
    assert log.recovery_point == 5  # 5 messages → fsync
    log.append_as_leader(make_batch(1), 0)
    assert not log.maybe_flush(env.clock.monotonic_ms() + 999)
    assert log.maybe_flush(env.clock.monotonic_ms() + 1000)
    assert log.recovery_point == 6


def _record_dir_syncs(monkeypatch) -> list[str]:
    """The directories fsynced from now on, in order (a flush syncs dirs through duplicated
    descriptors, fsutil.fsync_dir and atomic writes through their own: all are an os.fsync)."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(target):
            synced.append(os.path.abspath(target))
        return real(fd)
    monkeypatch.setattr(os, "fsync", recording)
    return synced


def test_creation_syncs_the_partition_dir_and_the_first_flush_its_entry(env, monkeypatch):
    """A new log costs one dir sync (the partition dir, through the atomic partition.metadata
    write, after the segment files exist); the log dir's entry for it is synced by the first
    flush or roll (before anything in it is durable), once."""
    synced = _record_dir_syncs(monkeypatch)
    log = env.new(LogConfig(flush_interval_messages=2))
    part, parent = os.path.abspath(log.path), os.path.abspath(env.dir)
    assert synced == [part]
    assert sorted(os.listdir(log.path)) == sorted(["00000000000000000000.log", "00000000000000000000.index",
                                                   ckpt.PARTITION_METADATA])
    log.append_as_leader(make_batch(1), 0)        # epoch 0 starts: its checkpoint waits for the flush
    assert synced == [part]                       # nothing durable yet: the entry waits
    log.append_as_leader(make_batch(1), 0)        # 2 messages: flush
    assert log.recovery_point == 2 and synced.count(parent) == 1
    log.append_as_leader(make_batch(2), 0)        # a second flush: the entry is synced already
    assert log.recovery_point == 4 and synced.count(parent) == 1
    roll = env.new(LogConfig(segment_bytes=100), partition=1)
    roll.append_as_leader(make_batch(1), 0)
    synced.clear()
    roll.append_as_leader(make_batch(1), 0)       # rolls: the old segment flushed, then both dirs synced,
    assert len([f for f in os.listdir(roll.path) if f.endswith(".log")]) == 2
    # then the epoch checkpoint written (its atomic write syncs the partition dir again)
    assert synced == [os.path.abspath(roll.path), parent, os.path.abspath(roll.path)]


def _fill(env, cfg, batches, epoch=1):
    log = env.new(cfg)
    for _ in range(batches):
        log.append_as_leader(make_batch(2, 100), epoch)
    log.flush()
    log.close()
    return log


def test_recovery_truncates_a_torn_tail(env):
    cfg = LogConfig()
    log = _fill(env, cfg, 10)
    seg_path = log._segments[-1].log_path
    size = os.path.getsize(seg_path)
    os.truncate(seg_path, size - 7)  # the last write was torn by the crash
    again = env.reload(cfg, hw=20)
    assert again.log_end_offset == 18
    assert again.recovery.truncated_bytes == size - 7 - (size // 10) * 9
    assert os.path.getsize(seg_path) == (size // 10) * 9
    assert again.high_watermark == 18  # clamped to the log end
    assert again.log_end_offset == again.recovery_point
    assert again.append_as_leader(make_batch(1), 1) == (18, 18)


def test_recovery_truncates_garbage_and_crc_corruption_and_drops_later_segments(env):
    batch_len = len(make_batch(2, 100))
    cfg = LogConfig(segment_bytes=3 * batch_len + 1)
    log = _fill(env, cfg, 9)  # segments at 0, 6, 12
    bases = [s.base_offset for s in log._segments]
    assert bases == [0, 6, 12]
    middle = log._segments[1].log_path
    with open(middle, "r+b") as f:  # flip a byte inside the second batch's records (covered by CRC)
        f.seek(batch_len + 70)
        b = f.read(1)
        f.seek(batch_len + 70)
        f.write(bytes([b[0] ^ 0x01]))
    again = env.reload(cfg)
    assert again.log_end_offset == 8
    assert [s.base_offset for s in again._segments] == [0, 6]
    assert again.recovery.deleted_segments == 1
    assert "CRC mismatch" in again.recovery.reasons[0]
    assert not os.path.exists(os.path.join(again.path, f"{12:020d}.log"))
    assert all(h.base_offset < 8 for h in headers(again.read(0, 1 << 20)))
    again.close()
    with open(middle, "ab") as f:
        f.write(b"\x00" * 30)  # zero-filled tail (lost metadata after power loss)
    third = env.reload(cfg)
    assert third.log_end_offset == 8 and third.recovery.truncated_bytes == 30


def test_recovery_scans_only_from_the_recovery_point(env):
    batch_len = len(make_batch(2, 100))
    cfg = LogConfig(segment_bytes=3 * batch_len + 1)
    _fill(env, cfg, 9)  # segments 0, 6, 12
    assert env.reload(cfg, recovery_point=12).recovery.recovered_segments == 1
    assert env.reload(cfg, recovery_point=7).recovery.recovered_segments == 2
    assert env.reload(cfg, recovery_point=0).recovery.recovered_segments == 3
    assert env.reload(cfg, recovery_point=0, clean=True).recovery.recovered_segments == 0


def test_epoch_cache_rebuilt_from_batches_when_checkpoint_missing_or_bad(env):
    log = env.new()
    log.append_as_leader(make_batch(2), 3)
    log.append_as_leader(make_batch(2), 5)
    log.flush()
    log.close()
    path = os.path.join(log.path, ckpt.EPOCH_CHECKPOINT)
    os.unlink(path)
    assert env.reload().epoch_cache.entries == [(3, 0), (5, 2)]
    with open(path, "w") as f:
        f.write("0\n7\nnonsense\n")
    assert env.reload(clean=True).epoch_cache.entries == [(3, 0), (5, 2)]


def _read_all(log) -> bytes:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out.append(data)
        offset = headers(data)[-1].next_offset
    return b"".join(out)


_OPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 300)),
                          st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
                          st.tuples(st.just("flush"), st.just(0), st.just(0))), min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, cut=st.integers(0, 1500), epoch_step=st.integers(0, 2))
def test_crash_anywhere_recovers_a_batch_aligned_prefix(tmp_path_factory, ops, cut, epoch_step):
    """Any sequence of appends/truncations/flushes, then a crash that tears ``cut`` bytes off
    the active segment: recovery yields exactly the longest whole-batch prefix of what was
    there, and the log keeps working."""
    d = str(tmp_path_factory.mktemp("crash"))
    channel = DirFailureChannel(lambda *a: pytest.fail(f"unexpected I/O failure {a}"))
    cfg = LogConfig(segment_bytes=2048, index_interval_bytes=200)
    log = PartitionLog.create(d, "c", 0, TOPIC_ID, cfg, channel, lambda: 0)
    epoch = 0
    for kind, a, b in ops:
        if kind == "append":
            epoch += epoch_step
            log.append_as_leader(make_batch(a, b), epoch)
        elif kind == "truncate":
            log.truncate_to(a)
        else:
            log.flush()
    before = _read_all(log)
    recovery_point = log.recovery_point
    active = log._segments[-1]
    active_start = len(before) - active.size
    log.close()
    cut = min(cut, active.size)
    os.truncate(active.log_path, active.size - cut)
    ends = [0]
    for pos, h in bh.iter_batches(before):
        ends.append(pos + h.size_bytes)
    survivors = [e for e in ends if e <= len(before) - cut]
    assert active_start in ends  # a segment starts at a batch boundary
    expected = before[:max(survivors)]

    again = PartitionLog.load(d, "c-0", cfg, channel, lambda: 0, recovery_point=recovery_point,
                              high_watermark=10**6, clean_shutdown=False)
    assert _read_all(again) == expected
    assert again.high_watermark == again.log_end_offset
    assert all(s < again.log_end_offset for _, s in again.epoch_cache.entries)
    first, _ = again.append_as_leader(make_batch(1), epoch + 1)
    assert first == again.log_end_offset - 1
    after = _read_all(again)
    assert after[:len(expected)] == expected and [h.base_offset for h in headers(after[len(expected):])] == [first]
    assert sum(os.path.getsize(s.log_path) for s in again._segments) == len(after)  # no garbage left on disk
    again.flush()
    again.close()
    third = PartitionLog.load(d, "c-0", cfg, channel, lambda: 0, recovery_point=0, high_watermark=0,
                              clean_shutdown=False)
    assert _read_all(third) == after and third.recovery.truncated_bytes == 0
    third.close()


def test_concurrent_appends_and_reads_stay_consistent(env):
    log = env.new(LogConfig(segment_bytes=8192, index_interval_bytes=512))
    errors = []

    def writer():
        try:
            for _ in range(100):
                log.append_as_leader(make_batch(2, 40), 1)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader():
        try:
            for _ in range(200):
                if log.log_end_offset:
                    headers(log.read(log.log_end_offset // 2, 4096))
        except Exception as exc:  # pragma: no cover
            errors.append(exc)
    threads = [threading.Thread(target=writer) for _ in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert log.log_end_offset == 800
    assert [h.base_offset for h in headers(_read_all(log))] == list(range(0, 800, 2))


def test_offset_for_timestamp_scans_headers(env):
    log = env.new()
    log.append_as_leader(make_batch(3), 0)
    ts = headers(log.read(0, 100))[0].max_timestamp
    assert log.offset_for_timestamp(ts) == 0
    assert log.offset_for_timestamp(ts + 1) is None


def test_flush_by_count_inside_a_dir_job_is_left_to_the_worker(env):
    """Within ``flush_deferral.collecting()`` (a dir worker's job) the append reaching the
    count notes its log instead of fsyncing; ``flush`` is the worker's flush:
    it flushes an open log, skips one closed since, and refuses one whose dir went offline."""
    from broker_impl.storage import flush_deferral
    from broker_impl.storage.errors import KafkaStorageError
    log = env.new(LogConfig(flush_interval_messages=2))
    with flush_deferral.collecting() as noted:
        log.append_as_leader(make_batch(2), 0)
    assert noted.due == [log] and log.recovery_point == 0     # not flushed inside the job
    assert log.flush() and log.recovery_point == 2
    log.append_as_leader(make_batch(2), 0)             # outside a job: inline, as before
    assert log.recovery_point == 4
    log.close()
    assert log.flush() is False           # deleted / swapped out: nothing to do
    other = env.new(LogConfig(flush_interval_messages=2), partition=1)
    other.close()
    env.channel.report(env.dir, 5, "append")
    with pytest.raises(KafkaStorageError):
        other.flush()                    # its append must not be acked


def test_a_roll_inside_a_dir_job_leaves_its_fsyncs_to_a_background_flush(env, monkeypatch):
    """A roll in a dir job neither fsyncs the old segment nor syncs the partition dir inline:
    it notes the log for a flush nobody waits for (``soon``), and that flush does both (the new
    segment's entry included). An append due its count flush as well is awaited instead."""
    from broker_impl.storage import flush_deferral
    synced = _record_dir_syncs(monkeypatch)
    log = env.new(LogConfig(segment_bytes=100))
    log.append_as_leader(make_batch(1), 0)
    log.flush()
    synced.clear()
    with flush_deferral.collecting() as noted:
        log.append_as_leader(make_batch(1), 0)          # rolls
    assert log.segment_count == 2 and (noted.due, noted.soon) == ([], [log])
    assert synced == [] and log.recovery_point == 1      # nothing synced inside the job
    assert log.flush()
    assert synced == [os.path.abspath(log.path)] and log.recovery_point == 2
    counted = env.new(LogConfig(segment_bytes=100, flush_interval_messages=1), partition=1)
    counted.append_as_leader(make_batch(1), 0)
    with flush_deferral.collecting() as noted:
        counted.append_as_leader(make_batch(1), 0)      # rolls, and reaches its count
    assert (noted.due, noted.soon) == ([counted], [])


def test_a_time_based_flush_does_not_wait_for_a_busy_log(env):
    """``maybe_flush`` passes over a log whose lock another thread holds (a flush thread's
    fsync), instead of parking the dir's upkeep behind it; the next round flushes it."""
    log = env.new(LogConfig(flush_interval_ms=1000))
    log.append_as_leader(make_batch(1), 0)
    later = env.clock.monotonic_ms() + 1000
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with log._lock:
            held.set()
            release.wait(5)
    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(5)
    try:
        assert log.maybe_flush(later) is False and log.recovery_point == 0
    finally:
        release.set()
        t.join(5)
    assert log.maybe_flush(later) is True and log.recovery_point == 1


def test_new_epoch_entries_reach_the_file_before_the_recovery_point_passes_them(env):
    """An epoch assignment is written by the next flush, before that flush moves the recovery
    point; a load that recovers batches writes what it rebuilt at once (its recovery point is
    the log end); a truncation writes at once."""
    path = lambda log: os.path.join(log.path, ckpt.EPOCH_CHECKPOINT)  # noqa: E731
    log = env.new(LogConfig(flush_interval_messages=3))
    log.append_as_leader(make_batch(1), 1)
    log.append_as_leader(make_batch(1), 2)
    assert not os.path.exists(path(log)) and log.recovery_point == 0
    log.append_as_leader(make_batch(1), 2)        # the count: flush
    assert log.recovery_point == 3 and ckpt.read_epochs(path(log)) == [(1, 0), (2, 1)]
    log.append_as_leader(make_batch(1), 3)        # epoch 3, not flushed: an unclean stop now
    log.close()
    again = env.reload(LogConfig(flush_interval_messages=3), recovery_point=3)
    assert again.epoch_cache.entries == [(1, 0), (2, 1), (3, 3)]     # rebuilt from the batch
    assert ckpt.read_epochs(path(again)) == [(1, 0), (2, 1), (3, 3)]  # and written at the load
    again.append_as_leader(make_batch(1), 4)
    again.truncate_to(4)
    assert ckpt.read_epochs(path(again)) == [(1, 0), (2, 1), (3, 3)]
    again.close()


def test_with_a_flush_by_count_a_roll_leaves_its_fsyncs_to_the_next_one(env, monkeypatch):
    """No fsync of its own at a roll when a flush by count is configured: the next count flush
    syncs the old segment's tail, the new segment and the new file's dir entry."""
    from broker_impl.storage import flush_deferral
    synced = _record_dir_syncs(monkeypatch)
    log = env.new(LogConfig(segment_bytes=100, flush_interval_messages=3))
    log.append_as_leader(make_batch(1), 0)
    synced.clear()
    with flush_deferral.collecting() as noted:
        log.append_as_leader(make_batch(1), 0)          # rolls, 2 of 3 messages
    assert log.segment_count == 2 and (noted.due, noted.soon) == ([], [])
    assert synced == [] and log.recovery_point == 0
    log.append_as_leader(make_batch(1), 0)              # 3: the count flush (inline here)
    assert log.recovery_point == 3 and os.path.abspath(log.path) in synced


def test_a_flush_syncs_a_segment_index_only_when_it_changed(env, monkeypatch):
    """Small records add an index entry only every index interval (none for a segment's first
    batch, as in Kafka): the flushes in between fsync the .log alone (an fsync of a clean file
    still costs the device a cache flush), and a segment smaller than the interval — a roll
    by age of a small-record partition — never syncs its (empty) index."""
    synced: list[str] = []
    real = os.fsync

    def counting(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real(fd)
    monkeypatch.setattr(os, "fsync", counting)
    log = env.new(LogConfig(index_interval_bytes=200))
    for _ in range(2):
        log.append_as_leader(make_batch(1), leader_epoch=1)   # ~80 bytes each: no entry yet
        log.flush()
    assert not any(p.endswith(".index") for p in synced), synced
    assert os.path.getsize(log._segments[0].index_path) == 0
    synced.clear()
    for _ in range(3):
        log.append_as_leader(make_batch(1), leader_epoch=1)   # past 200 bytes: one entry
        log.flush()
    assert sum(p.endswith(".index") for p in synced) == 1, synced
    assert sum(p.endswith(".log") for p in synced) == 3
    synced.clear()
    log.truncate_to(2)                                      # a truncation rewrites the index
    log.append_as_leader(make_batch(1), leader_epoch=1)
    log.flush()
    assert any(p.endswith(".index") for p in synced)
