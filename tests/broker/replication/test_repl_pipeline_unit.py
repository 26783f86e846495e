"""Pure parts of the replication pipeline (issue 10): the follower's round planning
(``plan_round``), which answers need the dir (``needs_storage``), and the purgatory ``Watch``
a long-polling fetch holds (which partitions changed)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker_impl.api.purgatory import Purgatory
from broker_impl.replication.follow_round import MIN_STRAGGLER_POLL_MS, FollowState, needs_storage, plan_round
from broker_impl.state.effects import TopicPartition
from kafka_common import wire
from kafka_common.wire import ErrorCode

pytestmark = pytest.mark.unit
TID = uuid.UUID(int=7)


def st(p: int, *, applying_since: float | None = None, backoff_until: float = 0.0) -> FollowState:
    s = FollowState(TopicPartition("t", p), TID, 1, backoff_until=backoff_until)
    if applying_since is not None:
        s.applying, s.applying_since = object(), applying_since  # type: ignore[assignment]
    return s


def test_every_idle_partition_rides_the_full_long_poll():
    states = [st(p) for p in range(100)]
    ready, wait_ms = plan_round(states, now=10.0, wait_max_ms=30000)
    assert ready == states and wait_ms == 30000


def test_a_partition_in_its_storage_step_sits_out_and_shortens_the_poll():
    busy = st(0, applying_since=9.990)   # its step has run 10 ms
    idle = [st(p) for p in range(1, 5)]
    ready, wait_ms = plan_round([busy, *idle], now=10.0, wait_max_ms=30000)
    assert ready == idle
    assert wait_ms == 10     # it rejoins about when a step that old would be done


def test_a_hung_step_grows_the_poll_up_to_the_configured_wait():
    young = plan_round([st(0, applying_since=10.0), st(1)], now=10.0, wait_max_ms=500)[1]
    old = plan_round([st(0, applying_since=7.0), st(1)], now=10.0, wait_max_ms=500)[1]
    assert young == MIN_STRAGGLER_POLL_MS and old == 500


def test_a_partition_backing_off_limits_the_poll_to_its_backoff():
    backing = st(0, backoff_until=10.2)
    ready, wait_ms = plan_round([backing, st(1)], now=10.0, wait_max_ms=30000)
    assert [s.tp.partition for s in ready] == [1]
    assert 200 <= wait_ms <= 201
    ready, _ = plan_round([backing, st(1)], now=10.25, wait_max_ms=30000)
    assert len(ready) == 2


def part(**kw):
    mod = wire.response_module(1, 12)
    return wire.make(mod.PartitionData, partition_index=0, error_code=kw.pop("error_code", ErrorCode.none),
                     high_watermark=5, log_start_offset=0, aborted_transactions=None,
                     records=kw.pop("records", None),
                     diverging_epoch=mod.EpochEndOffset(**kw.pop("diverging", {"epoch": -1, "end_offset": -1})))


def test_only_records_divergence_and_out_of_range_need_the_dir():
    assert not needs_storage(part())                                    # only the HW: on the loop
    assert needs_storage(part(records=b"x" * 70))
    assert needs_storage(part(diverging={"epoch": 3, "end_offset": 4}))
    assert needs_storage(part(error_code=ErrorCode.offset_out_of_range))
    assert not needs_storage(part(error_code=ErrorCode.not_leader_or_follower))


def test_watch_reports_which_keys_changed_and_unregisters():
    async def go():
        pg = Purgatory()
        with pg.watch([("a", 0), ("a", 1), ("a", 2)]) as w:
            assert await w.wait(0.01) == set()          # nothing yet: timeout
            pg.notify(("a", 1))
            pg.notify(("b", 9))                          # not watched
            assert await w.wait(5) == {("a", 1)}
            waiter = asyncio.ensure_future(w.wait(5))
            await asyncio.sleep(0)
            pg.notify(("a", 2))
            pg.notify(("a", 0))
            assert await waiter == {("a", 0), ("a", 2)}
            assert pg.waiting == 3
        assert pg.waiting == 0
        pg.notify(("a", 1))                              # after close: harmless
    asyncio.run(go())


class _NoLeader:
    node_id = 2

    def broker_epoch(self):
        return 1

    def leader_address(self, leader_id):
        return None   # the fetch loop just backs off

    def get_log(self, tp):
        return None

    def sasl(self):
        return None


def test_fetcher_close_is_bounded_even_when_its_task_swallows_the_cancel():
    """Python 3.11's ``wait_for`` returns a result instead of raising when a cancel races a
    completing request, so a fetch loop can survive its cancel; closing the fetchers (part of
    the broker's stop) must not wait for it forever (it once did, and a controlled shutdown
    ran into the test's 20 s kill)."""
    from broker_impl.replication.fetcher_manager import FetcherManager

    async def go():
        mgr = FetcherManager(_NoLeader(), wait_max_ms=100, max_bytes=1)
        mgr.add(TopicPartition("t", 0), TID, 1, 5)
        f = mgr.fetchers[1]
        f.task.cancel()
        swallowed = []

        async def stubborn():
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if len(swallowed) >= 1:
                        raise
                    swallowed.append(1)   # the first cancel is lost, as with 3.11's wait_for
        f.task = asyncio.ensure_future(stubborn())
        await asyncio.sleep(0)
        await asyncio.wait_for(mgr.close(), 20)
        assert swallowed == [1] and not f.task.done()
        f.task.cancel()
    asyncio.run(go())


class _Log:
    def __init__(self, leo: int) -> None:
        self.log_end_offset, self.latest_epoch, self.log_start_offset = leo, 5, 0


class _Logs(_NoLeader):
    def __init__(self, n: int) -> None:
        self.logs = {TopicPartition("t", p): _Log(10) for p in range(n)}

    def get_log(self, tp):
        return self.logs.get(tp)


class _Client:
    @staticmethod
    def pick_version(api_key, lo, hi):
        return hi


def _named(req) -> list[int]:
    return sorted(p.partition for t in req.topics for p in t.partitions)


def _hand_driven(host, n: int, **kw):
    """A FetcherManager following partitions 0..n-1 of "t" from leader 1, its fetch loop
    cancelled so the test drives the rounds by hand: (manager, fetcher)."""
    from broker_impl.replication import fetcher_manager as fmod
    mgr = fmod.FetcherManager(host, max_bytes=1 << 20, **kw)
    for p in range(n):
        mgr.add(TopicPartition("t", p), TID, 1, 5)
    f = mgr.fetchers[1]
    f.task.cancel()
    return mgr, f


def _forgotten(req) -> list[int]:
    return sorted(p for t in req.forgotten_topics_data for p in t.partitions)


def test_an_incremental_fetch_looks_only_at_what_changed():
    """With 100 partitions followed from one leader, a round names (and looks at) only the
    partitions whose fetch state moved: a step ended (a new log end), a step started or a
    back-off began (forgotten: they sit out), a back-off ended (named again)."""

    async def go():
        host = _Logs(100)
        mgr, f = _hand_driven(host, 100, wait_max_ms=500)
        now = 10.0
        req, _v, sent, members = f._request(_Client(), 500, now)
        assert req.session_id == 0 and _named(req) == list(range(100))     # full: asks for a session
        f.session_id, f.session_epoch, f.sent, f.members = 77, 1, sent, members
        req, _v, sent, members = f._request(_Client(), 500, now)
        assert (req.session_id, _named(req), _forgotten(req)) == (77, [], [])   # nothing moved
        f.sent, f.members = sent, members
        tp3, tp5, tp8 = (TopicPartition("t", p) for p in (3, 5, 8))
        host.logs[tp3].log_end_offset = 11
        f.step_started(f.partitions[tp3], asyncio.get_running_loop().create_future(), now)
        f.step_started(f.partitions[tp5], asyncio.get_running_loop().create_future(), now)
        f.back_off(f.partitions[tp8], now + 0.2)
        req, _v, sent, members = f._request(_Client(), 500, now)
        assert _named(req) == [] and _forgotten(req) == [3, 5, 8]              # they sit out
        assert len(sent) == 97
        f.sent, f.members = sent, members
        f.step_ended(f.partitions[tp3])        # appended: its new log end goes to the leader
        req, _v, sent, members = f._request(_Client(), 500, now)
        assert _named(req) == [3] and req.topics[0].partitions[0].fetch_offset == 11
        f.sent, f.members = sent, members
        f._expire_backoffs(now + 0.25)         # the back-off is over: 8 rejoins
        req, _v, sent, members = f._request(_Client(), 500, now + 0.25)
        assert _named(req) == [8] and _forgotten(req) == []
        f.sent, f.members = sent, members
        mgr.remove([tp5])                       # no longer followed (it was out already)
        req, _v, sent, _m = f._request(_Client(), 500, now + 0.25)
        assert _named(req) == [] and tp5 not in sent and len(sent) == 99
        await mgr.close()
    asyncio.run(go())


class _Polling(_Logs):
    """Two followed partitions; the storage step (``run_io``) takes 5 ms."""

    async def run_io(self, _plog, _fn, items):
        await asyncio.sleep(0.005)
        return [("appended", True) for _ in items]


class _LongPoll(_Client):
    """A leader that answers the first fetch after a long poll (data for partition 0 only)
    and records the fetches after it."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s, self.seen = poll_s, []

    async def request(self, req, timeout_s):
        from types import SimpleNamespace as NS
        self.seen.append(req)
        if len(self.seen) > 1:
            return NS(error_code=ErrorCode.none, session_id=0, responses=())
        await asyncio.sleep(self.poll_s)
        data = NS(partition_index=0, error_code=ErrorCode.none, high_watermark=10, log_start_offset=0,
                  records=b"x" * 70, diverging_epoch=None)
        return NS(error_code=ErrorCode.none, session_id=0, responses=(NS(topic_id=TID, partitions=(data,)),))


def test_after_a_long_poll_the_next_round_waits_for_the_new_step():
    """A partition's first data after an idle spell arrives at the end of a long poll. Its
    storage step starts then; the next round must wait for it (it is young) and carry the
    partition at its new log end. It once took the step's age from the time the previous
    request was SENT: after a poll longer than ``step_wait_ms`` the step looked old (a slow
    dir), the partition sat out, and the fetch long-polled the idle partitions for as long as
    the poll had lasted — the leader's HW and its acks=all producers waited (the lab's S1
    saw 70 ms acks on partitions whose leader was idle for 160 ms between appends)."""

    async def go():
        host = _Polling(2)
        mgr, f = _hand_driven(host, 2, wait_max_ms=30000, step_wait_ms=50)
        f.joined_at = -1e9                       # past the join settle time: full polls
        client = _LongPoll(poll_s=0.2)
        assert await f._round(client) is True    # the long poll ends with data for partition 0
        await f._round(client)
        nxt = client.seen[1]
        assert _named(nxt) == [0, 1], "partition 0 sat out of the fetch after its step"
        assert nxt.max_wait.total_seconds() == 30.0
        await mgr.close()
    asyncio.run(go())


class _FailingDir(_Logs):
    """The dir's job fails after the steps (its flush by count hit EIO)."""

    async def run_io(self, plog, _fn, _items):
        from broker_impl.storage.errors import KafkaStorageError
        raise KafkaStorageError("/d1", 5, "fsync", "Input/output error")


def test_a_dir_failing_in_the_steps_flush_drops_its_partitions_without_a_traceback(caplog):
    """A follower's job on a dir whose flush fails (KafkaStorageError out of the job, not one
    step's outcome): the batch's partitions leave the fetcher, as a failed step's would (the
    dir is reported through the failure channel); it is not logged as a bug (the lab's S10
    once printed a traceback for it)."""
    import logging

    async def go():
        host = _FailingDir(2)
        mgr, f = _hand_driven(host, 2, wait_max_ms=500)
        items = [(f.partitions[TopicPartition("t", p)], host.logs[TopicPartition("t", p)], part(records=b"x" * 70))
                 for p in range(2)]
        with caplog.at_level(logging.WARNING):
            await f.steps.apply_batch(items)
        assert not f.partitions and not f.running
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        await mgr.close()
    asyncio.run(go())
