"""Brokers following a 3-controller Raft quorum (real processes on loopback): they find the
active controller themselves, move on when it dies, are never fenced by a failover, and a
dir-failure report in flight when the active controller is killed reaches the next one
(KIP-858 across a controller failover)."""

from __future__ import annotations

import asyncio
import os

import pytest

from testkit.cluster import check_real_dirs, unfenced, wait_until

from testkit.processes import BrokerProcess
from testkit.quorum import QuorumCluster, register_many
from kafka_runtime.controller_client import MetadataReader, create_topic
from kafka_common.ids import UNASSIGNED
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.events import read_events

pytestmark = pytest.mark.integration
FAST = {"log.dir.probe.interval.ms": "100"}


@pytest.fixture
def quorum_cluster(tmp_path):
    made: list = []
    quorums: list[QuorumCluster] = []

    def make(n_brokers: int = 2, broker_extra: dict | None = None):
        q = QuorumCluster(str(tmp_path / "quorum"), 3, extra={"broker.session.timeout.ms": "4000"})
        quorums.append(q)
        q.start()
        brokers = [BrokerProcess(str(tmp_path / f"broker{i}"), i, q.procs[1],
                                 extra={"controller.quorum.voters": q.voters, **FAST, **(broker_extra or {})})
                   for i in range(1, n_brokers + 1)]
        made.extend(brokers)
        for b in brokers:
            b.format()
            b.start()
        return q, brokers

    yield make
    for p in reversed(made):
        p.kill()
    for q in quorums:
        for p in q.procs.values():
            p.kill()


async def image_of(q: QuorumCluster):
    leader = await q.leader()
    client = await KafkaClient.connect("127.0.0.1", q.port(leader))
    try:
        reader = MetadataReader(client)
        await reader.catch_up()
        return reader.image, client
    except BaseException:
        await client.close()
        raise


async def until(q: QuorumCluster, pred, timeout_s: float, what: str, brokers=()):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            image, client = await image_of(q)
            await client.close()
            if pred(image):
                return image
        except (ClientError, OSError, TimeoutError):
            pass
        for b in brokers:
            assert b.alive(), f"broker {b.node_id} died: {b.stderr()}"
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.2)


async def create(q: QuorumCluster, topic: str, assignments) -> None:
    leader = await q.leader()
    client = await KafkaClient.connect("127.0.0.1", q.port(leader))
    try:
        resp = await create_topic(client, topic, 0, 0, assignments=assignments)
        assert resp.topics[0].error_code.value == 0, resp
    finally:
        await client.close()


def break_dir(path: str) -> None:
    os.rename(path, path + ".broken")
    with open(path, "w", encoding="utf-8") as f:
        f.write("not a directory\n")


def test_brokers_survive_the_active_controller_killed_during_a_dir_failure_report(quorum_cluster):
    q, brokers = quorum_cluster()
    b1, b2 = brokers

    async def body():
        await until(q, lambda im: unfenced(im, (1, 2)), 40, "brokers unfenced", brokers)
        await create(q, "t", {p: [1, 2] for p in range(3)})
        image = await until(q, lambda im: "t" in im.topic_ids and all(
            UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids["t"]).values()),
            30, "t assigned", brokers)
        check_real_dirs(image, brokers, "t")
        tid = image.topic_ids["t"]
        victim = next(d for d in b1.dirs[1:] if any(n.startswith("t-") for n in os.listdir(d)))  # not the metadata dir
        victim_id = b1.dir_ids()[victim]
        hit = [p for p in range(3) if b1.dir_ids()[victim] == image.partition(tid, p).directory(1)]
        leader = await q.leader()
        break_dir(victim)      # the probe sees it within 100 ms and the broker reports it ...
        await asyncio.sleep(0.05)
        q.procs[leader].kill()  # ... to a controller that dies now
        image = await until(q, lambda im: victim_id not in im.brokers[1].log_dirs and all(
            1 not in im.partition(tid, p).isr for p in hit), 40,
            "the next controller committed the dir failure", brokers)
        assert not image.brokers[1].fenced and not image.brokers[2].fenced
        return leader
    old_leader = asyncio.run(asyncio.wait_for(body(), 150))
    # the failover itself fenced nobody: no fence event on any controller
    for n, proc in q.procs.items():
        fenced = [e for e in read_events(proc.events_path) if e["event"] == "fenced"]
        assert not fenced, (n, fenced)
    wait_until(lambda: "dir_failure_acked" in [e["event"] for e in b1.events()], 20,
               "broker 1 saw its report acknowledged")
    events = [e["event"] for e in b1.events()]
    assert "dir_failure_reported" in events and "failure_timeout_shutdown" not in events
    assert b1.alive() and b2.alive()
    assert old_leader in q.procs


def test_a_broker_behind_the_log_start_loads_the_snapshot(tmp_path):
    q = QuorumCluster(str(tmp_path / "q"), 1, extra={"metadata.log.max.record.count.between.snapshots": "10",
                                                     "log.segment.bytes": "1024",
                                                     "broker.session.timeout.ms": "4000"})
    b = BrokerProcess(str(tmp_path / "broker1"), 1, q.procs[1], extra={"controller.quorum.voters": q.voters, **FAST})
    try:
        q.start()

        # other brokers' registrations: the log rolls and is dropped below snapshots
        asyncio.run(register_many(q, range(10, 50), seed=3))
        starts = [e for e in read_events(q.procs[1].events_path) if e["event"] == "snapshot_written"]
        assert starts and starts[-1]["log_start_offset"] > 0
        b.format()
        b.start()

        async def ready():
            await until(q, lambda im: 1 in im.brokers and not im.brokers[1].fenced, 40, "broker 1 unfenced", [b])
        asyncio.run(ready())
        loaded = [e for e in b.events() if e["event"] == "metadata_snapshot_loaded"]
        assert loaded and loaded[0]["end_offset"] > 0
    finally:
        b.kill()
        for p in q.procs.values():
            p.kill()


def test_a_broker_leaves_a_silent_active_controller_after_the_fetch_timeout(quorum_cluster):
    """The active controller stops answering without closing its connections (SIGSTOP: what a
    network cut looks like from the broker): the broker's metadata long-poll to it gives up
    after max wait + ``controller.quorum.fetch.timeout.ms`` and follows the new leader, so a
    topic created there reaches the broker while the old one is still silent (it used to
    wait 10 s more before moving on)."""
    import signal
    import time

    q, brokers = quorum_cluster(1, {"controller.quorum.fetch.timeout.ms": "1000"})
    b1 = brokers[0]

    async def body():
        await until(q, lambda im: unfenced(im, (1,)), 40, "broker unfenced", brokers)
        old = await q.leader()
        # the broker's long-poll is parked on the active controller: freeze it there
        q.procs[old].proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            new = await q.leader(30, exclude=(old,))
            client = await KafkaClient.connect("127.0.0.1", q.port(new))
            try:
                resp = await create_topic(client, "t", 0, 0, assignments={0: [1]})
                assert resp.topics[0].error_code.value == 0, resp
            finally:
                await client.close()
            # fetch timeout 1 s (+ 0.5 s max wait) here; the old bound was max wait + 10 s
            left = 8.5 - (time.monotonic() - stopped)
            assert left > 0, "the election took the whole budget"
            await asyncio.to_thread(wait_until, lambda: any(
                e["event"] == "leader_change" and e.get("topic") == "t" for e in b1.events()),
                left, "the broker leading t while the old controller is silent")
            assert b1.alive()
        finally:
            q.procs[old].proc.send_signal(signal.SIGCONT)
    asyncio.run(asyncio.wait_for(body(), 120))
