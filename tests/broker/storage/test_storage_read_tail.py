"""``PartitionLog.read_tail``: the newest appended batches served from memory (the leader
answers a follower at the tail without a trip to the dir's worker) must be exactly what
``read`` returns from the disk, for every offset, limit and upper bound it accepts; and it
must step aside (None) after a truncation, a segment roll or a close. What it keeps: every
batch above the HW (what the followers have still to fetch, issue 36: 1 MB batches behind
several producers), at least the newest ``tail_cache_bytes``, at most
``tail_cache_max_bytes``."""

from __future__ import annotations

import os
import random
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from storage_batches import make_batch  # noqa: E402

from broker_impl.storage.failure import DirFailureChannel  # noqa: E402
from broker_impl.storage.log_config import LogConfig  # noqa: E402
from broker_impl.storage.partition_log import PartitionLog  # noqa: E402

pytestmark = pytest.mark.integration
TID = uuid.UUID(int=0x77)


def new_log(tmp_path, name: str, **cfg) -> PartitionLog:
    d = tmp_path / name
    d.mkdir()
    return PartitionLog.create(str(d), "t", 0, TID, LogConfig(**cfg), DirFailureChannel(lambda *a: None), lambda: 0)


def test_read_tail_equals_read_for_every_offset_and_limit(tmp_path):
    rng = random.Random(7)
    log = new_log(tmp_path, "d", tail_cache_bytes=1024, tail_cache_max_bytes=4096)
    served = 0
    for round_ in range(40):
        batches = b"".join(make_batch(rng.randint(1, 4), rng.randint(1, 300)) for _ in range(rng.randint(1, 3)))
        log.append_as_leader(batches, leader_epoch=1 + round_ // 10)
        leo = log.log_end_offset
        log.high_watermark = rng.randint(log.high_watermark, leo)   # the front trims as it moves
        for offset in range(max(0, leo - 30), leo + 1):
            for max_bytes in (1, 150, 700, 5000):
                for upper in (None, leo, max(0, leo - 3)):
                    for min_one in (True, False):
                        got = log.read_tail(offset, max_bytes, upper, min_one)
                        if got is None:
                            continue
                        served += 1
                        assert got == log.read(offset, max_bytes, upper, min_one), (offset, max_bytes, upper, min_one)
    assert served > 1000   # the cache did answer (not only fall back)
    assert log.read_tail(0, 1 << 20) is None or log.read(0, 1 << 20).endswith(log.read_tail(0, 1 << 20))


def test_follower_appends_fill_it_and_truncation_roll_and_close_clear_it(tmp_path):
    leader = new_log(tmp_path, "leader")
    for _ in range(5):
        leader.append_as_leader(make_batch(2), 3)
    follower = new_log(tmp_path, "follower", segment_bytes=2000)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.read_tail(0, 1 << 20) == follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    follower.truncate_to(4)
    assert follower.read_tail(0, 1 << 20) is None and follower.read_tail(2, 1 << 20) is None
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)[:len(follower.read(0, 1 << 20))]
    # a batch that rolls a new segment: read() does not cross segments, nor does read_tail()
    big = make_batch(1, 1800, base_offset=follower.log_end_offset, epoch=3)
    follower.append_as_follower(big)
    assert follower.segment_count == 2
    assert follower.read_tail(0, 1 << 20) is None
    assert follower.read_tail(4, 1 << 20) == follower.read(4, 1 << 20) == big
    # batches bigger than the cache's most are not kept
    small = new_log(tmp_path, "small", tail_cache_bytes=100, tail_cache_max_bytes=100)
    small.append_as_leader(make_batch(1, 500), 1)
    assert small.read_tail(0, 1 << 20) is None
    follower.close()
    assert follower.read_tail(4, 1 << 20) is None


def test_a_reader_beside_the_appending_thread_gets_whole_contiguous_batches(tmp_path):
    """The loop reads the tail while the dir's worker appends (the cache grows in place past
    the snapshot it published): every answer is whole batches, contiguous from the asked
    offset's batch — never a torn or shifted view."""
    import threading

    from kafka_common import batch_header as bh

    log = new_log(tmp_path, "race", tail_cache_bytes=1024, tail_cache_max_bytes=4096)
    log.append_as_leader(make_batch(1, 100), 1)
    done = threading.Event()
    rng = random.Random(11)

    def writer():
        for _ in range(10000):
            log.append_as_leader(make_batch(rng.randint(1, 3), rng.randint(1, 200)), 1)
        done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # interleave the threads as often as the interpreter can
    t = threading.Thread(target=writer)
    t.start()
    answers = 0
    try:
        while not done.is_set():
            leo = log.log_end_offset
            offset = max(0, leo - rng.randint(0, 40))
            got = log.read_tail(offset, rng.choice((1, 300, 4096)))
            if got is None:
                continue
            answers += 1
            batches = list(bh.iter_batches(got))   # whole batches, CRCs right
            assert batches and batches[0][1].base_offset <= offset < batches[0][1].next_offset
            for (_, a), (_, b) in zip(batches, batches[1:]):
                assert a.next_offset == b.base_offset
    finally:
        sys.setswitchinterval(old)
        t.join()
    assert answers > 100


def test_batches_above_the_hw_are_kept_those_below_it_trimmed_past_the_floor(tmp_path):
    """Issue 36's shape: appends of big batches (bigger than the 64 KiB floor) while the
    followers are several appends behind: all of them above the HW are served from memory,
    the same bytes as the disk; once the HW passes them they go, but the newest floor stays."""
    log = new_log(tmp_path, "big", tail_cache_bytes=3000, tail_cache_max_bytes=50_000)
    ends = []
    for _ in range(8):
        log.append_as_leader(make_batch(4, 1000), 1)   # ~4 KB each
        ends.append(log.log_end_offset)
    assert log.high_watermark == 0
    for offset in range(0, log.log_end_offset):     # everything above the HW: from memory
        got = log.read_tail(offset, 10_000_000)
        assert got is not None and got == log.read(offset, 10_000_000), offset
    assert log.read_tail(0, 1) == log.read(0, 1)      # one whole batch past max_bytes (min_one)
    log.high_watermark = ends[5]                      # the followers have the first six
    log.append_as_leader(make_batch(4, 1000), 1)
    assert log.read_tail(0, 10_000_000) is None       # below the HW: trimmed, read from the disk
    assert log.read_tail(ends[5], 10_000_000) == log.read(ends[5], 10_000_000)
    before = log.log_end_offset
    log.high_watermark = before
    log.append_as_leader(make_batch(1, 10), 1)
    kept = log.read_tail(ends[-1], 10_000_000)        # the newest floor (3000 B) stays: two batches
    assert kept is not None and kept == log.read(ends[-1], 10_000_000)
    assert log.read_tail(ends[-2], 10_000_000) is None


def test_a_stuck_hw_keeps_at_most_the_cap(tmp_path):
    """A follower that stops fetching holds the HW: the cache stays under its most (down to
    half of it when passed), whole batches up to the log end, still equal to the disk."""
    log = new_log(tmp_path, "stuck", tail_cache_bytes=1000, tail_cache_max_bytes=20_000)
    for _ in range(30):
        log.append_as_leader(make_batch(2, 1000), 1)   # ~2 KB each, 60 KB in all
        t = log.tail.batches
        assert t is not None and t[2][t[5]] - t[2][0] <= 20_000 + 2_200
    leo = log.log_end_offset
    assert log.read_tail(0, 1 << 20) is None
    newest = leo - 2 * 5
    assert log.read_tail(newest, 1 << 20) == log.read(newest, 1 << 20)
