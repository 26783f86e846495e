"""The replication pieces on real partition logs (temp dirs), without processes:

- the follower's handling of a leader's Fetch answer (``LeaderFetcher.steps.apply``): append as
  the leader wrote it, HW = min(leader HW, LEO), truncation on ``diverging_epoch`` (capped
  by the local end of that epoch), OFFSET_OUT_OF_RANGE (leader's log starts after us →
  start over there; else truncate to the leader's HW), retriable errors back off and keep
  the partition, a local storage failure drops it;
- the dir mover's copy step: copies whole batches, follows truncation of the current log,
  starts at the current log's start offset."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "storage"))
from storage_batches import make_batch  # noqa: E402

from broker_impl.replication.fetcher_manager import FetcherManager  # noqa: E402
from broker_impl.replication.follow_round import FollowState  # noqa: E402
from broker_impl.replication.mover import copy_step  # noqa: E402
from broker_impl.state.effects import TopicPartition  # noqa: E402
from broker_impl.storage.failure import DirFailureChannel  # noqa: E402
from broker_impl.storage.log_config import LogConfig  # noqa: E402
from broker_impl.storage.partition_log import PartitionLog  # noqa: E402
from kafka_common import batch_header as bh  # noqa: E402
from kafka_common import wire  # noqa: E402
from kafka_common.wire import ErrorCode  # noqa: E402

pytestmark = pytest.mark.integration
TID = uuid.UUID(int=0x1111_2222_3333_4444_5555_6666_7777_8888)
TP = TopicPartition("t", 0)


@pytest.fixture
def new_log(tmp_path):
    failures: list = []
    channel = DirFailureChannel(lambda *a: failures.append(a))

    def make(name: str = "d0") -> PartitionLog:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        return PartitionLog.create(str(d), "t", 0, TID, LogConfig(), channel, lambda: 0)
    make.failures = failures  # type: ignore[attr-defined]
    make.channel = channel  # type: ignore[attr-defined]
    return make


def leader_log(new_log, epochs: list[tuple[int, int]], name: str = "leader") -> PartitionLog:
    """A leader log with batches of 2 records: (leader epoch, number of batches)."""
    log = new_log(name)
    for epoch, n in epochs:
        for _ in range(n):
            log.append_as_leader(make_batch(2), epoch)
    return log


class Host:
    node_id = 2

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def get_log(self, tp):
        return self.log

    def broker_epoch(self):
        return 1

    def leader_address(self, leader_id):
        return None

    def sasl(self):
        return None


def part(**kw):
    mod = wire.response_module(1, 12)
    return wire.make(mod.PartitionData, partition_index=0, error_code=kw.pop("error_code", ErrorCode.none),
                     high_watermark=kw.pop("hw", -1), log_start_offset=kw.pop("start", 0),
                     aborted_transactions=None, records=kw.pop("records", None),
                     diverging_epoch=mod.EpochEndOffset(**kw.pop("diverging", {"epoch": -1, "end_offset": -1})))


def run_apply(follower: PartitionLog, partitions: list) -> tuple[list[bool], FetcherManager, list]:
    truncations: list = []

    async def go():
        mgr = FetcherManager(Host(follower), wait_max_ms=100, max_bytes=1 << 20,
                             on_truncated=lambda tp, off: truncations.append(off))
        mgr.add(TP, TID, 1, 5)
        f = mgr.fetchers[1]
        st = f.partitions[TP]
        out = [f.steps.apply(st, p) for p in partitions]
        await mgr.close()
        return out, mgr
    out, mgr = asyncio.run(go())
    return out, mgr, truncations


def test_follower_appends_leader_batches_as_written_and_takes_min_hw(new_log):
    leader = leader_log(new_log, [(3, 4)])
    follower = new_log("follower")
    data = leader.read(0, 1 << 20, leader.log_end_offset)
    out, _mgr, _ = run_apply(follower, [part(records=data, hw=6)])
    assert out == [True]
    assert follower.log_end_offset == 8 and follower.high_watermark == 6
    assert follower.read(0, 1 << 20) == data  # byte for byte: offsets, epochs, CRCs
    assert follower.epoch_cache.entries == [(3, 0)]
    out, _mgr, _ = run_apply(follower, [part(records=None, hw=50)])
    assert out == [False] and follower.high_watermark == 8  # never past the local LEO


def test_diverging_epoch_truncates_the_divergent_tail(new_log):
    follower = leader_log(new_log, [(3, 2), (4, 3)], "follower")  # epoch 4 starts at 4, LEO 10
    # the leader says: epoch 4 ends at offset 6 on my side → keep [0, 6)
    out, _mgr, truncs = run_apply(follower, [part(diverging={"epoch": 4, "end_offset": 6}, hw=4)])
    assert out == [True] and follower.log_end_offset == 6 and truncs == [6]
    # the leader never had epoch 4; its answer for it is its epoch 3 ending at 5: our epoch-3
    # end (4) caps it
    follower2 = leader_log(new_log, [(3, 2), (4, 3)], "follower2")
    run_apply(follower2, [part(diverging={"epoch": 3, "end_offset": 5}, hw=4)])
    assert follower2.log_end_offset == 4
    assert follower2.epoch_cache.entries == [(3, 0)]


def test_offset_out_of_range_restarts_or_truncates(new_log):
    behind = leader_log(new_log, [(1, 2)], "behind")  # LEO 4; the leader's log starts at 40
    out, _mgr, _ = run_apply(behind, [part(error_code=ErrorCode.offset_out_of_range, start=40, hw=45)])
    assert out == [True] and behind.log_start_offset == 40 and behind.log_end_offset == 40
    ahead = leader_log(new_log, [(1, 5)], "ahead")  # LEO 10, no epoch the leader knows; leader HW 6
    run_apply(ahead, [part(error_code=ErrorCode.offset_out_of_range, start=0, hw=6)])
    assert ahead.log_end_offset == 6


def test_leader_errors_back_off_and_keep_the_partition(new_log):
    follower = new_log("f")
    out, mgr, _ = run_apply(follower, [part(error_code=ErrorCode.not_leader_or_follower),
                                       part(error_code=ErrorCode.fenced_leader_epoch)])
    assert out == [False, False]
    assert mgr.errors == {"not_leader_or_follower": 1, "fenced_leader_epoch": 1}


def test_local_storage_failure_drops_the_partition(new_log):
    leader = leader_log(new_log, [(1, 1)])
    follower = new_log("f")
    new_log.channel.report(follower.log_dir, 5, "append")  # its dir failed (EIO)  # type: ignore[attr-defined]

    async def go():
        mgr = FetcherManager(Host(follower), wait_max_ms=100, max_bytes=1 << 20)
        mgr.add(TP, TID, 1, 5)
        f = mgr.fetchers[1]
        got = f.steps.apply(f.partitions[TP], part(records=leader.read(0, 1 << 20), hw=2))
        left = dict(f.partitions)
        await mgr.close()
        return got, left
    got, left = asyncio.run(go())
    assert got is False and left == {}


def test_mover_copy_step_follows_the_current_log(new_log):
    current = leader_log(new_log, [(2, 3)], "cur")
    future = new_log("fut")
    assert copy_step(current, future) is True
    assert future.read(0, 1 << 20) == current.read(0, 1 << 20)
    current.append_as_leader(make_batch(2), 3)
    assert copy_step(current, future, max_bytes=1) is True  # one whole batch even past max_bytes
    assert future.log_end_offset == current.log_end_offset == 8
    current.truncate_to(4)  # the current log (a follower) was truncated
    assert copy_step(current, future) is True and future.log_end_offset == 4
    # a current log that starts later (prefix gone): the future starts there
    late = new_log("late")
    late.truncate_fully_and_start_at(100)
    late.append_as_leader(make_batch(2), 7)
    fut2 = new_log("fut2")
    assert copy_step(late, fut2) is True
    assert (fut2.log_start_offset, fut2.log_end_offset) == (100, 102)
    assert [h.base_offset for _p, h in bh.iter_batches(fut2.read(100, 1 << 20))] == [100]


def test_leader_counts_no_progress_from_a_divergent_follower(new_log):
    """The one position rule (Kafka updates a follower's fetch state only for a valid
    fetch): an offset past the leader's end, or a last fetched epoch that ends earlier here
    or is unknown here, is not progress — else a divergent replica could join the ISR and
    move the high watermark over records it does not have. The Fetch handler answers from
    the same rule (diverging epoch / OFFSET_OUT_OF_RANGE)."""
    from broker_impl.state.fetch_position import Position, follower_position

    def diverged(log, offset, epoch):
        return not follower_position(log, offset, epoch).valid

    leader = leader_log(new_log, [(0, 2), (2, 1)])  # epoch 0: [0, 4), epoch 2: [4, 6)
    assert not diverged(leader, 6, 2) and not diverged(leader, 4, 0) and not diverged(leader, 3, -1)
    assert diverged(leader, 7, 2)       # beyond the leader's end
    assert diverged(leader, 6, 1)       # epoch 1 unknown here: ends (as epoch 0) at 4 < 6
    assert diverged(leader, 5, 0)       # epoch 0 ends at 4 here
    assert follower_position(leader, 5, 0).position is Position.DIVERGING
    assert follower_position(leader, 5, 0).diverging == (0, 4)
    assert follower_position(leader, 7, 2).diverging == (2, 6)   # the leader ends epoch 2 at 6
    late = leader_log(new_log, [(5, 1)], "late")
    assert diverged(late, 2, 3)         # an epoch older than everything the leader knows         # an epoch older than everything the leader knows
