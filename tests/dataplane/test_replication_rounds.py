"""Issue 36: several producers on one partition, 1 MB batches. What made the throughput
collapse, each a mechanism the fix changed and these tests pin down (never a speed):

- the appends queued behind a partition's lock go to its dir in ONE job
  (:mod:`broker_impl.api.append_queue`), not one job — one hop to the dir's worker and back —
  each;
- a follower's round at the default ``replica.fetch.max.bytes`` moves every batch it is
  behind by (up to 10 MiB), not one 1 MB batch per round, and the leader serves them from
  the log's in-memory tail (everything above the HW), not from a dir job queued behind the
  appends.

Real listener on loopback (the in-process broker), real Produce/Fetch frames.
"""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from broker_impl.api import append_queue
from kafka_common import batch_header as bh
from kafka_common import wire
from kafka_common.config import default_text
from tests.dataplane.inprocess_broker import Broker
from testkit.protocol import RawConnection, fetch_request, make_batch, produce_request

pytestmark = pytest.mark.integration


@pytest.fixture
def broker3(tmp_path, loop_thread):
    """Broker 1 with registered peers 2 and 3 (their Fetch requests are sent by the test)."""
    b = Broker(tmp_path, peers=(2, 3))
    b.loop = loop_thread
    loop_thread.run(b.start())
    yield b
    loop_thread.run(b.stop())
    assert b.server.stats["handler_errors"] == 0, b.server_log


def _perr(resp):
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def test_appends_queued_behind_a_partition_go_to_its_dir_in_one_job(broker):
    """12 acks=all requests from 3 connections arrive while the partition's first append is
    still on the dir (held here): the other 11 are appended by one job after it, each
    answered with its own offsets, every connection's in its request order."""
    jobs: list[int] = []
    gate = asyncio.Event()
    real_io = broker.view.replica_io

    async def gated_io(replica, fn, *args):
        if fn.__name__ == "_append_all":
            jobs.append(len(args[1]))
            if len(jobs) == 1:
                await gate.wait()
        return await real_io(replica, fn, *args)

    async def go():
        await broker.create_topic("q", 1)
        broker.view.replica_io = gated_io
        conns = [await RawConnection.open(broker.server.port) for _ in range(3)]
        try:
            def send(i: int, k: int) -> int:
                return conns[i].send(produce_request(9, "q", 0, make_batch([b"c%d-%d" % (i, k), b"x"])))

            sent: list[list[int]] = [[send(0, 0)], [], []]
            for _ in range(500):   # the first append is on the dir (held)
                if jobs:
                    break
                await asyncio.sleep(0.01)
            sent[0] += [send(0, k) for k in range(1, 4)]
            sent[1] += [send(1, k) for k in range(4)]
            sent[2] += [send(2, k) for k in range(4)]
            lock = broker.view.partition_lock("q", 0)
            for _ in range(500):   # every other request decoded and queued behind it
                q = append_queue._queues.get(lock)
                if q is not None and len(q.items) == 11:
                    break
                await asyncio.sleep(0.01)
            assert jobs == [1] and len(append_queue._queues[lock].items) == 11
            gate.set()
            offsets = []
            for c, cids in zip(conns, sent):
                mine = []
                for cid in cids:
                    got, resp = await c.receive(wire.response_class(0, 9))
                    err, base = _perr(resp)
                    assert got == cid and err is ErrorCode.none
                    mine.append(base)
                assert mine == sorted(mine)   # a connection's requests in order
                offsets += mine
            assert sorted(offsets) == list(range(0, 24, 2))
            assert jobs == [1, 11]            # one dir job for the 11 queued behind the first
        finally:
            broker.view.replica_io = real_io
            for c in conns:
                await c.close()
    broker.loop.run(go())


def test_a_waiter_that_goes_away_or_fails_leaves_the_others_of_its_batch(broker):
    """``append_queue.combined`` directly: a cancelled waiter's item still runs with its batch
    (the drain task holds the lock, not the request), an item whose entry is an exception
    raises only to its own caller."""
    async def go():
        lock = asyncio.Lock()
        ran: list[list[str]] = []

        async def run_batch(items):
            ran.append(list(items))
            await asyncio.sleep(0.05)
            return [ValueError(it) if it == "bad" else it.upper() for it in items]

        await lock.acquire()   # someone else (a follower's apply) holds the partition
        a = asyncio.ensure_future(append_queue.combined(lock, "a", run_batch))
        gone = asyncio.ensure_future(append_queue.combined(lock, "gone", run_batch))
        bad = asyncio.ensure_future(append_queue.combined(lock, "bad", run_batch))
        await asyncio.sleep(0.01)
        gone.cancel()
        lock.release()
        assert await a == "A"
        with pytest.raises(ValueError):
            await bad
        assert ran == [["a", "gone", "bad"]]
        assert await append_queue.combined(lock, "c", run_batch) == "C" and ran[-1] == ["c"]
    broker.loop.run(go())


def test_a_follower_round_moves_every_mb_batch_it_is_behind_by_from_memory(broker3):
    """Four 1 MB batches appended (acks=1) while the follower is behind: ONE follower fetch
    at the default ``replica.fetch.max.bytes`` gets all four (Kafka's 1 MiB default took one
    per round), and they are the log's in-memory tail (above the HW), the same bytes as the
    disk's."""
    b = broker3
    max_bytes = int(default_text("replica.fetch.max.bytes"))
    assert max_bytes >= 4 << 20

    async def go():
        tid = await b.create_topic("big", 1, replicas=(1, 2))
        c = await RawConnection.open(b.server.port)
        follower = await RawConnection.open(b.server.port)
        try:
            for i in range(4):
                resp = await c.call(produce_request(9, "big", 0, make_batch([bytes([65 + i]) * 1_000_000]), acks=1))
                assert _perr(resp) == (ErrorCode.none, i)
            log = b.lm.get_log("big", 0)
            assert log.high_watermark == 0
            tail = log.read_tail(0, max_bytes)
            assert tail is not None and tail == log.read(0, max_bytes)
            f = await follower.call(fetch_request(16, tid, 0, 0, replica_id=2, max_bytes=max_bytes))
            data = f.responses[0].partitions[0].records
            assert [h.base_offset for _p, h in bh.iter_batches(data)] == [0, 1, 2, 3]
            assert data == tail
            f = await follower.call(fetch_request(16, tid, 0, 4, replica_id=2, max_bytes=max_bytes))
            assert f.responses[0].partitions[0].high_watermark == 4
        finally:
            await c.close()
            await follower.close()
    b.loop.run(go())
