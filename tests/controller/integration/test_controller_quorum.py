"""Three real controller processes on loopback as one Raft quorum: elections, failover
under kill -9, a minority that cannot commit, snapshots and FetchSnapshot, DescribeQuorum
and ``kraft-controller quorum-status``."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys

import pytest

from controller_impl.log import MetadataLog
from controller_impl.runtime.status import describe_quorum
from loopdev import fill_up
from testkit.quorum import QuorumCluster
from kafka_runtime.controller_client import MetadataReader, SimBroker
from harness.run.local_processes import REPO
from kafka_common import ids
from kafka_common.metadata.batches import decode_batches
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.events import read_events

from tests.controller.integration.conftest import run

pytestmark = pytest.mark.integration
RNG = random.Random(858)


@pytest.fixture
def quorum(tmp_path):
    clusters: list[QuorumCluster] = []

    def make(n: int = 3, **extra: str) -> QuorumCluster:
        q = QuorumCluster(str(tmp_path / f"q{len(clusters)}"), n,
                          extra={k.replace("_", "."): v for k, v in extra.items()})
        clusters.append(q)
        q.start()
        return q
    yield make
    for q in clusters:
        for p in q.procs.values():
            p.kill()


def broker(q: QuorumCluster, broker_id: int) -> SimBroker:
    return SimBroker(broker_id, [ids.random_directory_id(RNG) for _ in range(2)], cluster_id=q.cluster_id)


async def register_at_leader(q: QuorumCluster, b: SimBroker, timeout_s: float = 30.0):
    """Register through whichever controller leads (a broker's retry loop, simplified)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        try:
            leader = await q.leader(timeout_s=max(0.1, deadline - loop.time()))
            await b.connect("127.0.0.1", q.port(leader))
            resp = await b.register()
            if resp.error_code == ErrorCode.none:
                return resp
        except (ClientError, OSError, TimeoutError):
            pass
        finally:
            await b.close()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"broker {b.broker_id} not registered within {timeout_s}s")


async def committed_image(q: QuorumCluster, timeout_s: float = 10.0):
    """The image of everything the leader has committed, read once the leader has committed all
    it holds. A leader just elected — after a restart, or a kill of the old one — answers with
    the high watermark it had (a restarted one: its snapshot's end) until it commits its epoch's
    first record; a read in that window sees the committed past but not yet the tail, which is
    right for Raft and not what these tests ask about. A record really lost stays missing after
    the wait, and the caller's assertion fails."""
    leader = await q.leader()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        try:
            d = await describe_quorum("127.0.0.1", q.port(leader))
        except (ClientError, OSError, asyncio.TimeoutError):
            d = {"error": "unreachable"}
        ends = {v["id"]: v["log_end_offset"] for v in d.get("voters", [])}
        if d["error"] == "none" and d["high_watermark"] >= ends.get(leader, 0) > 0:
            break
        await asyncio.sleep(0.05)
    client = await KafkaClient.connect("127.0.0.1", q.port(leader))
    reader = MetadataReader(client)
    await reader.catch_up()
    await client.close()
    return reader


def log_records(proc) -> list[tuple[int, int, object]]:
    """(offset, epoch, record) of everything in a stopped controller's metadata log."""
    log = MetadataLog.open(proc.metadata_dir)
    try:
        data = log.read(log.start_offset, 1 << 30, limit=log.end_offset)
    finally:
        log.close()
    return [(h.base_offset + i, h.partition_leader_epoch, rec)
            for h, recs in decode_batches(data) for i, rec in enumerate(recs)]


def test_three_voters_elect_one_leader_and_answer_describe_quorum(quorum):
    q = quorum()

    async def body():
        leader = await q.leader()
        for _ in range(100):  # the followers learn the leader from BeginQuorumEpoch
            answers = {n: await describe_quorum("127.0.0.1", q.port(n)) for n in q.procs}
            if all(d["leader_id"] == leader for d in answers.values()):
                break
            await asyncio.sleep(0.05)
        assert answers[leader]["error"] == "none"
        assert sorted(v["id"] for v in answers[leader]["voters"]) == [1, 2, 3]
        for n, d in answers.items():
            assert d["leader_id"] == leader  # every voter knows the leader
            if n != leader:
                assert d["error"] == "not_leader_or_follower"
        follower = next(n for n in q.procs if n != leader)
        b = broker(q, 1)
        await b.connect("127.0.0.1", q.port(follower))
        assert (await b.register()).error_code == ErrorCode.not_controller
        await b.close()
        admin = await KafkaClient.connect("127.0.0.1", q.port(follower))
        resp = await admin.request(MetadataReader(admin).fetch_request(0))
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.not_leader_or_follower and part.current_leader.leader_id == leader
        await admin.close()
        assert (await register_at_leader(q, b)).error_code == ErrorCode.none
        return leader
    leader = run(body())
    out = subprocess.run([sys.executable, "-m", "controller_impl", "quorum-status", "-c",
                          q.procs[1].config_path], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"LeaderId:               {leader}" in out.stdout and "CurrentVoters:          [1, 2, 3]" in out.stdout


@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_kill_9_of_any_controller_loses_no_acknowledged_record(quorum, victim):
    q = quorum()

    async def body():
        acked: list[int] = []
        leader = await q.leader()
        killed = None
        for broker_id in range(1, 31):
            if broker_id == 8:  # mid-stream: requests are in flight on the leader
                killed = leader if victim == "leader" else next(n for n in q.procs if n != leader)
                q.procs[killed].kill()
            resp = await register_at_leader(q, broker(q, broker_id))
            assert resp.error_code == ErrorCode.none
            acked.append(broker_id)
        image = (await committed_image(q)).image
        assert sorted(image.brokers) == acked
        return killed
    killed = run(body(), timeout_s=120)
    q.procs[killed].start()  # it rejoins and catches up

    async def caught_up():
        leader = await q.leader()
        for _ in range(200):
            d = await describe_quorum("127.0.0.1", q.port(leader))
            ends = {v["id"]: v["log_end_offset"] for v in d["voters"]}
            if ends[killed] >= d["high_watermark"] > 0:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"controller {killed} did not catch up: {d}")
    run(caught_up())
    q.stop()
    logs = {n: log_records(p) for n, p in q.procs.items()}
    shortest = min(len(v) for v in logs.values())
    first = logs[1][:shortest]
    assert all(v[:shortest] == first for v in logs.values())  # the committed prefixes agree


def test_a_minority_never_commits(quorum):
    q = quorum()

    async def body():
        leader = await q.leader()
        assert (await register_at_leader(q, broker(q, 1))).error_code == ErrorCode.none
        lone = leader
        for n in q.procs:
            if n != lone:
                q.procs[n].kill()
        b = broker(q, 2)
        await b.connect("127.0.0.1", q.port(lone))
        try:
            resp = await asyncio.wait_for(b.register(), 3.0)
            acked = resp.error_code == ErrorCode.none
        except (asyncio.TimeoutError, ClientError):
            acked = False
        await b.close()
        assert not acked  # one of three cannot commit
        d = await describe_quorum("127.0.0.1", q.port(lone))
        return lone, d["high_watermark"] if d["error"] == "none" else None
    lone, hw = run(body())
    others = [n for n in q.procs if n != lone]
    q.procs[others[0]].start()  # a majority again: the quorum goes on

    async def after():
        assert (await register_at_leader(q, broker(q, 3))).error_code == ErrorCode.none
        image = (await committed_image(q)).image
        assert {1, 3} <= set(image.brokers)
    run(after(), timeout_s=90)


def test_lagging_follower_catches_up_from_a_snapshot(quorum):
    q = quorum(metadata_log_max_record_count_between_snapshots="20", log_segment_bytes="1024")

    async def body():
        leader = await q.leader()
        follower = next(n for n in q.procs if n != leader)
        q.procs[follower].kill()
        for broker_id in range(1, 41):
            await register_at_leader(q, broker(q, broker_id))
        return leader, follower
    leader, follower = run(body(), timeout_s=120)
    leader_events = read_events(q.procs[leader].events_path)
    snaps = [e for e in leader_events if e["event"] == "snapshot_written"]
    assert snaps and snaps[-1]["log_start_offset"] > 0  # segments below the snapshot were dropped
    q.procs[follower].start()

    async def caught_up():
        for _ in range(300):
            d = await describe_quorum("127.0.0.1", q.port(leader))
            ends = {v["id"]: v["log_end_offset"] for v in d["voters"]}
            if ends[follower] >= d["high_watermark"]:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"follower {follower} did not catch up: {d}")
    run(caught_up())
    installed = [e for e in read_events(q.procs[follower].events_path) if e["event"] == "snapshot_installed"]
    assert installed and installed[0]["end_offset"] > 0
    # the follower can lead with what it got: kill the leader, it (or the third) takes over
    q.procs[leader].kill()

    async def after():
        image = (await committed_image(q)).image
        assert sorted(image.brokers) == list(range(1, 41))
    run(after(), timeout_s=60)


def test_restart_loads_the_snapshot_then_the_tail(quorum):
    q = quorum(1, metadata_log_max_record_count_between_snapshots="10")

    async def body():
        for broker_id in range(1, 26):
            await register_at_leader(q, broker(q, broker_id))
    run(body())
    q.procs[1].stop()
    q.procs[1].start()

    async def again():
        image = (await committed_image(q)).image
        assert sorted(image.brokers) == list(range(1, 26))
    run(again())
    events = read_events(q.procs[1].events_path)
    assert any(e["event"] == "snapshot_written" for e in events)
    started = [e for e in events if e["event"] == "controller_active"]
    assert started[-1]["replayed"] < 25  # only the tail after the snapshot was replayed
    assert os.listdir(os.path.join(q.procs[1].metadata_dir, "__cluster_metadata-0"))



def test_a_controller_whose_metadata_dir_fails_halts_and_the_quorum_goes_on(tmp_path, small_tmpfs):
    q = QuorumCluster(str(tmp_path / "q"), 3, node_extra={1: {"metadata.log.dir": str(small_tmpfs / "meta")}})
    try:
        q.start()

        async def body():
            await q.leader()
            fill_up(small_tmpfs / "filler")  # node 1's disk is now full
            acked = []
            for broker_id in range(1, 80):
                await register_at_leader(q, broker(q, broker_id), timeout_s=30)
                acked.append(broker_id)
                if not q.procs[1].alive():
                    break
            assert q.procs[1].wait_exit(20) == 1  # it halted, whatever its role was
            await register_at_leader(q, broker(q, 100))  # the other two go on
            image = (await committed_image(q)).image
            assert set(acked) | {100} <= set(image.brokers)
        run(body(), timeout_s=150)
        halts = [e for e in read_events(q.procs[1].events_path) if e["event"] == "halt"]
        # whichever write of the metadata dir hits the full disk first: the log, or the
        # quorum-state file an election rewrites
        assert len(halts) == 1 and ("metadata log" in halts[0]["reason"] or "quorum-state" in halts[0]["reason"])
        assert "halted:" in q.procs[1].stderr() and len(q.procs[1].stderr().strip().splitlines()[-1]) < 400
    finally:
        for p in q.procs.values():
            p.kill()
