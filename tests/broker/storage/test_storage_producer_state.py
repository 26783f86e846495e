"""A partition log's producer state on real files: fed by leader AND follower appends,
checked atomically with the leader append, rebuilt from the log at load and truncation
(bounded by ``LogConfig.producer_state_scan_bytes``)."""

from __future__ import annotations

import uuid

import pytest

from kafka_common.clock import ManualClock
from broker_impl.storage.errors import (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        ProducerSequenceError)
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from testkit.protocol import make_batch

pytestmark = pytest.mark.integration
TOPIC_ID = uuid.UUID(int=0x1234)
PID = 4242


def idem(seq: int, n: int = 2, pid: int = PID, epoch: int = 0, tag: bytes = b"r") -> bytes:
    return make_batch([tag + b"%d" % (seq + i) for i in range(n)], producer_id=pid, epoch=epoch, base_seq=seq)


@pytest.fixture
def env(tmp_path, failures):
    clock = ManualClock()
    channel = DirFailureChannel(failures)

    class Env:
        def new(self, name="t", config=LogConfig()):
            return PartitionLog.create(str(tmp_path), name, 0, TOPIC_ID, config, channel, clock.monotonic_ms)

        def reload(self, log, config=LogConfig(), *, clean=False):
            log.flush()
            log.close()
            return PartitionLog.load(str(tmp_path), f"{log.topic}-0", config, channel, clock.monotonic_ms,
                                     recovery_point=0, high_watermark=0, clean_shutdown=clean)
    e = Env()
    e.failures = failures
    return e


def test_leader_retry_is_answered_with_the_original_offsets_and_not_appended(env):
    log = env.new()
    assert log.append_as_leader(make_batch([b"plain"]), 1) == (0, 0)
    assert log.append_as_leader(idem(0), 1) == (1, 2)
    assert log.append_as_leader(idem(2, 3), 1) == (3, 5)
    assert log.append_as_leader(idem(0), 1) == (1, 2)     # retried: original offsets
    assert log.append_as_leader(idem(2, 3), 1) == (3, 5)
    assert log.log_end_offset == 6
    with pytest.raises(ProducerSequenceError) as info:
        log.append_as_leader(idem(7), 1)
    assert info.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER and "expected sequence 5, got 7" in str(info.value)
    assert log.append_as_leader(idem(0, 1, epoch=1), 1) == (6, 6)   # epoch bump at 0
    with pytest.raises(ProducerSequenceError) as info:
        log.append_as_leader(idem(5, 1, epoch=0), 1)
    assert info.value.error_code == INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 7 and not env.failures.calls


def test_follower_appends_feed_the_state_so_the_new_leader_detects_the_retry(env):
    leader, follower = env.new("lead"), env.new("follow")
    for seq in (0, 2, 4):
        leader.append_as_leader(idem(seq), 3)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.producer_state.entry(PID) == leader.producer_state.entry(PID)
    # the follower becomes leader (epoch 4); the producer retries its last batch there
    follower.assign_epoch_start_offset(4, follower.log_end_offset)
    assert follower.append_as_leader(idem(4), 4) == (4, 5)
    assert follower.log_end_offset == 6
    assert follower.append_as_leader(idem(6), 4) == (6, 7)        # and continues in order
    with pytest.raises(ProducerSequenceError):
        follower.append_as_leader(idem(10), 4)                     # a known producer: gaps are refused


@pytest.mark.parametrize("clean", [False, True])
def test_load_rebuilds_the_state_from_the_log(env, clean):
    log = env.new()
    for seq in range(0, 14, 2):
        log.append_as_leader(idem(seq), 1)
    before = log.producer_state.entry(PID)
    log = env.reload(log, clean=clean)
    assert log.producer_state.entry(PID) == before
    assert [b.first_seq for b in before.batches] == [4, 6, 8, 10, 12]
    assert log.append_as_leader(idem(8), 1) == (8, 9)
    assert log.log_end_offset == 14


def test_truncation_drops_the_state_above_the_truncation_point(env):
    log = env.new()
    for seq in (0, 2, 4):
        log.append_as_leader(idem(seq), 1)
    log.append_as_leader(idem(0, 1, pid=77), 1)                    # offset 6: only above the point
    assert log.truncate_to(4)
    assert log.producer_state.entry(PID).last_seq == 3 and log.producer_state.entry(77) is None
    assert log.append_as_leader(idem(4), 2) == (4, 5)              # appended again, not a duplicate
    assert log.append_as_leader(idem(9, 1, pid=77), 2) == (6, 6)   # unknown again: any sequence
    log.truncate_fully_and_start_at(100)
    assert len(log.producer_state) == 0


def test_rebuild_scans_only_the_bounded_tail(env):
    """With producer_state_scan_bytes below one segment, a producer whose batches are only in
    older segments is unknown after a reload (lenient), one in the tail is known."""
    cfg = LogConfig(segment_bytes=2048, index_interval_bytes=1, producer_state_scan_bytes=600)
    log = env.new(config=cfg)
    log.append_as_leader(idem(0, 1, pid=1, tag=b"x" * 200), 1)     # old producer, first segment
    seq = 0
    while log.segment_count < 4:
        log.append_as_leader(idem(seq, 1, pid=2, tag=b"y" * 200), 1)
        seq += 1
    assert log.producer_state.entry(1) is not None                 # incremental state knows both
    log = env.reload(log, config=LogConfig(segment_bytes=2048, index_interval_bytes=1))   # default bound
    assert log.producer_state.entry(1).last_seq == 0 and log.producer_state.entry(2).last_seq == seq - 1
    log = env.reload(log, config=cfg)
    assert log.producer_state.entry(1) is None                     # beyond the scanned tail
    entry = log.producer_state.entry(2)
    assert entry is not None and entry.last_seq == seq - 1
    assert 1 <= len(entry.batches) <= 5
    assert log.append_as_leader(idem(50, 1, pid=1), 1)[0] == log.log_end_offset - 1   # accepted: unknown
