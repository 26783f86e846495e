"""One SLOW or HUNG log dir must stay in that dir (KIP-858's point; scenario S10).

A real kraft-controller and a real kraft-broker (host processes, loopback) whose three log
dirs ``d1 d2 d3`` are ext4 file systems on loop devices served by the lab's FUSE fault
daemon (``infra.lab``, backend ``fuse``); the metadata dir is a plain temp dir. ``d2`` is
made slow for real with the daemon's ``delay(ms)`` mode — every block I/O of that device
sleeps, so one append+fsync there (``log.flush.interval.messages=1``) costs several delays —
or hung (a delay of 600 s: its I/O never completes within the test).

(a) d2 slow (200 ms per I/O), for three session timeouts: produces and fetches on a d1
    partition (own connection) complete, many of them *while* a d2 produce sent earlier is
    still waiting for its append (with storage on the event loop none could: the loop sits
    in the d2 append); d2 produces complete, slowly; the controller's metadata shows no
    fencing, no ISR change, no dir failure; the broker stays unfenced.
(b) d2 hung: a d2 produce never completes, yet d1 produces keep completing and the broker
    stays unfenced (heartbeats flow) for three session timeouts; the broker holds separate
    controller connections (heartbeats never queue behind the metadata long-poll or the
    data requests); SIGTERM still completes the controlled shutdown (every stop step is
    bounded; the process exits once the FUSE abort frees the thread stuck in d2's I/O).

Cleanup (finalisers): abort the FUSE connection (frees threads stuck in d2's I/O), kill the
processes, destroy the lab (unmount, detach the loop devices, stop the daemon).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from testkit.cluster import reader_for, unfenced, until, wait_until  # noqa: E402

from testkit.processes import BrokerProcess  # noqa: E402
from kafka_runtime.controller_client import create_topic  # noqa: E402
from harness.run.local_processes import ControllerProcess  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402
from kafka_common.metadata import records as r  # noqa: E402
from testkit.protocol import RawConnection, fetch_request, make_batch, produce_request  # noqa: E402

pytestmark = pytest.mark.integration
SESSION_MS = 3000
TOPIC = "iso"
PARTITIONS = 6


from loopdev import lab_disk_skip_reason as _skip_reason  # noqa: E402


class LabBroker(BrokerProcess):
    """A broker whose data dirs are the lab's FUSE-backed disks."""
    lab_dirs: list[str] = []

    @property
    def dirs(self) -> list[str]:
        return list(self.lab_dirs)


@pytest.fixture
def slow_lab(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from infra import host
    from infra.lab import Lab, NodeSpec, Topology
    host.ensure_fusectl()
    lab = Lab.create(Topology(nodes=(NodeSpec("b1", ("d1", "d2", "d3")),), disk_size_mb=64, fstype="ext4",
                              backend="fuse", network=False))
    procs: list = []
    try:
        ctrl = ControllerProcess(str(tmp_path / "controller"), extra={"broker.session.timeout.ms": str(SESSION_MS)})
        procs.append(ctrl)
        broker = LabBroker(str(tmp_path / "broker1"), 1, ctrl, extra={
            "metadata.log.dir": str(tmp_path / "broker1" / "meta"),
            "broker.session.timeout.ms": str(SESSION_MS),
            "log.flush.interval.messages": "1",          # every append is fsynced (kafkatest-like)
            "log.dir.probe.interval.ms": "200",
            "min.insync.replicas": "1", "default.replication.factor": "1"})
        broker.lab_dirs = [str(lab.disk("b1", d).data_path) for d in ("d1", "d2", "d3")]
        procs.append(broker)
        ctrl.format()
        ctrl.start()
        broker.format()
        broker.start()
        yield lab, ctrl, broker
    finally:
        if lab.daemon is not None:
            lab.daemon.abort()  # threads stuck in d2's I/O get EIO, so the broker can die
        for p in reversed(procs):
            p.kill()
        lab.destroy()


async def _setup_topic(ctrl, broker) -> tuple[dict[str, list[int]], int]:
    """Create the topic (RF 1 on broker 1); return {dir name: partitions there} and the
    metadata offset after the set-up."""
    client, reader = await reader_for(ctrl)
    try:
        await until(reader, lambda im: unfenced(im, [1]), 40, "broker 1 unfenced", [broker])
        resp = await create_topic(client, TOPIC, 0, 0, assignments={p: [1] for p in range(PARTITIONS)})
        assert resp.topics[0].error_code.value == 0, resp
        await until(reader, lambda im: TOPIC in im.topic_ids and all(
            UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids[TOPIC]).values()),
            30, "replicas assigned to dirs", [broker])
        ids_by_path = broker.dir_ids()
        name_of = {ids_by_path[path]: os.path.basename(os.path.dirname(path)) for path in broker.dirs}
        by_dir: dict[str, list[int]] = {"d1": [], "d2": [], "d3": []}
        for pid, p in reader.image.partitions_of(reader.image.topic_ids[TOPIC]).items():
            by_dir[name_of[p.directory(1)]].append(pid)
        return by_dir, reader.next_offset
    finally:
        await client.close()


async def _metadata_since(ctrl, offset: int):
    client, reader = await reader_for(ctrl)
    try:
        await reader.catch_up()
        return reader.image, [rec for off, rec in reader.records if off >= offset]
    finally:
        await client.close()


def _assert_no_failover(image, records, broker) -> None:
    fences = [rec for rec in records if isinstance(rec, r.FenceBrokerRecord)
              or (isinstance(rec, r.BrokerRegistrationChangeRecord) and rec.fenced == 1)]
    assert not fences, f"the broker was fenced: {fences}"
    changes = [rec for rec in records if isinstance(rec, r.PartitionChangeRecord)]
    assert not changes, f"partition changes (ISR/leader) while d2 was only slow: {changes}"
    assert unfenced(image, [1])
    offline = [e for e in broker.events() if e["event"] in ("dir_offline", "probe_failed")]
    assert not offline, offline
    assert broker.alive(), broker.stderr()


async def _produce(conn: RawConnection, partition: int, i: int) -> tuple[int, float, float]:
    """One acks=1 Produce v9 → (error code, sent at, answered at) in loop time."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await conn.call(produce_request(9, TOPIC, partition, make_batch([f"v{i}".encode()]), acks=1))
    return int(resp.responses[0].partition_responses[0].error_code.value), t0, loop.time()


async def _prepare(broker, by_dir) -> tuple[int, int]:
    p1, p2 = by_dir["d1"][0], by_dir["d2"][0]
    for p in (p1, p2):  # the first append of each partition before the fault
        c = await RawConnection.open(broker.port)
        try:
            code, _s, _r = await _produce(c, p, 0)
            assert code == 0
        finally:
            await c.close()
    return p1, p2


def _connections_to(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to ``port`` (from /proc, no tools)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


def _summary(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50_ms": round(statistics.median(xs) * 1000, 1) if xs else -1,
            "max_ms": round(max(xs) * 1000, 1) if xs else -1}


def test_slow_dir_does_not_stall_other_dirs_or_heartbeats(slow_lab):
    lab, ctrl, broker = slow_lab
    by_dir, offset0 = asyncio.run(_setup_topic(ctrl, broker))
    assert by_dir["d1"] and by_dir["d2"], f"placement left a dir without partitions: {by_dir}"
    wait_until(lambda: any(e["event"] == "listener_started" for e in broker.events()), 20, "listener")

    async def run() -> dict:
        p1, p2 = await _prepare(broker, by_dir)
        c1, c2, c3 = [await RawConnection.open(broker.port) for _ in range(3)]
        baseline = []
        for i in range(10):
            code, s, e = await _produce(c1, p1, i)
            assert code == 0
            baseline.append(e - s)
        fault = lab.disk_fault("b1", "d2", "delay", delay_ms=200)
        rec = await asyncio.to_thread(fault.inject)
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + 3 * SESSION_MS / 1000
        d1: list[tuple[int, float, float]] = []
        d2: list[tuple[int, float, float]] = []
        fetched: list[tuple[int, int]] = []

        async def d2_loop():
            i = 0
            while loop.time() < stop_at:
                d2.append(await _produce(c2, p2, i))
                i += 1

        async def d1_loop():
            i = 0
            while loop.time() < stop_at:
                d1.append(await _produce(c1, p1, 1000 + i))
                if i % 5 == 0:
                    resp = await c3.call(fetch_request(12, TOPIC, p1, 0, max_wait_ms=0))
                    part = resp.responses[0].partitions[0]
                    fetched.append((int(part.error_code.value), len(part.records or b"")))
                i += 1
                await asyncio.sleep(0.02)

        await asyncio.gather(d2_loop(), d1_loop())
        await asyncio.to_thread(fault.heal)
        for c in (c1, c2, c3):
            await c.close()
        return {"baseline": baseline, "d1": d1, "d2": d2, "fetched": fetched, "probe_ms": rec.probe_latency_ms}

    out = asyncio.run(run())
    d1, d2 = out["d1"], out["d2"]
    # liveness across dirs: d1 produces sent after a d2 produce and answered before it
    overlapped = sum(1 for _c, s1, e1 in d1 if any(s2 < s1 and e1 < e2 for _c2, s2, e2 in d2))
    figures = {"probe_latency_ms": out["probe_ms"], "d1_before_fault": _summary(out["baseline"]),
               "d1_while_d2_slow": _summary([e - s for _c, s, e in d1]),
               "d2_while_slow": _summary([e - s for _c, s, e in d2]), "d1_overlapping_a_d2_append": overlapped,
               "d2_error_codes": sorted({c for c, _s, _e in d2}), "d1_error_codes": sorted({c for c, _s, _e in d1})}
    print("slow-dir figures:", json.dumps(figures))
    assert d1 and all(code == 0 for code, _s, _e in d1), d1
    assert d2 and all(code == 0 for code, _s, _e in d2), d2
    assert out["fetched"] and all(code == 0 and n > 0 for code, n in out["fetched"]), out["fetched"]
    assert overlapped >= 3, f"d1 produces waited for d2's appends: {figures}"
    image, records = asyncio.run(_metadata_since(ctrl, offset0))
    _assert_no_failover(image, records, broker)


def test_hung_dir_does_not_freeze_heartbeats_or_other_dirs(slow_lab):
    lab, ctrl, broker = slow_lab
    by_dir, offset0 = asyncio.run(_setup_topic(ctrl, broker))
    assert by_dir["d1"] and by_dir["d2"], f"placement left a dir without partitions: {by_dir}"
    wait_until(lambda: any(e["event"] == "listener_started" for e in broker.events()), 20, "listener")

    async def run() -> dict:
        p1, p2 = await _prepare(broker, by_dir)
        c1, c2 = await RawConnection.open(broker.port), await RawConnection.open(broker.port)
        fault = lab.disk_fault("b1", "d2", "delay", delay_ms=600_000, probe=False)  # never completes here
        await asyncio.to_thread(fault.inject)
        loop = asyncio.get_running_loop()
        hung = asyncio.ensure_future(_produce(c2, p2, 1))
        await asyncio.sleep(0.5)
        assert not hung.done(), "the d2 produce completed although d2 is hung"
        stop_at = loop.time() + 3 * SESSION_MS / 1000
        d1 = []
        while loop.time() < stop_at:
            # generous liveness bound: one session timeout per d1 produce
            d1.append(await asyncio.wait_for(_produce(c1, p1, 2000 + len(d1)), SESSION_MS / 1000))
            await asyncio.sleep(0.05)
        still_hung = not hung.done()
        hung.cancel()
        return {"d1": d1, "still_hung": still_hung}

    out = asyncio.run(run())
    # registration/heartbeats, the metadata long-poll and the data requests (assignments,
    # AlterPartition, CreateTopics) each have their own connection to the controller
    assert _connections_to(broker.proc.pid, ctrl.port) >= 3
    assert out["still_hung"], "d2 was not hung (the d2 produce completed)"
    assert len(out["d1"]) >= 10 and all(code == 0 for code, _s, _e in out["d1"]), out["d1"]
    image, records = asyncio.run(_metadata_since(ctrl, offset0))
    _assert_no_failover(image, records, broker)
    # a hung dir does not keep the broker from stopping: SIGTERM → controlled shutdown, every
    # stop step bounded (d2's logs are left unflushed, without a clean-shutdown marker). The
    # process itself can only exit once the kernel lets go of the thread stuck in d2's I/O
    # (uninterruptible): the finaliser's FUSE abort does that.
    t0 = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopped: controlled shutdown" in broker.stderr() or not broker.alive(), 60,
               "the broker's controlled shutdown with d2 hung")
    print("hung-dir figures:", json.dumps({"d1_while_d2_hung": _summary([e - s for _c, s, e in out["d1"]]),
                                           "stop_with_d2_hung_s": round(time.monotonic() - t0, 1)}))
    assert "closing the logs timed out" in broker.stderr()


def test_hung_dir_does_not_hold_up_log_creation_in_other_dirs(slow_lab):
    """A new topic's logs are created in the healthy dirs while a create hangs in d2: each dir
    has its own storage worker and no disk I/O runs under the log manager's table lock (with
    one worker, every create queued after the hung one waited for it)."""
    lab, ctrl, broker = slow_lab
    asyncio.run(_setup_topic(ctrl, broker))
    wait_until(lambda: any(e["event"] == "listener_started" for e in broker.events()), 20, "listener")
    late, n = "late", 9
    fault = lab.disk_fault("b1", "d2", "delay", delay_ms=600_000, probe=False)  # never completes here
    fault.inject()

    async def run() -> dict:
        client, reader = await reader_for(ctrl)
        try:
            resp = await create_topic(client, late, 0, 0, assignments={p: [1] for p in range(n)})
            assert resp.topics[0].error_code.value == 0, resp
            await until(reader, lambda im: late in im.topic_ids, 20, "topic created", [broker])
            ids_by_path = broker.dir_ids()
            name_of = {ids_by_path[path]: os.path.basename(os.path.dirname(path)) for path in broker.dirs}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while True:   # the broker assigns each replica a dir (AssignReplicasToDirs) as it creates it
                await reader.catch_up()
                parts = reader.image.partitions_of(reader.image.topic_ids[late])
                placed = {pid: name_of.get(p.directory(1)) for pid, p in parts.items()}
                healthy = [pid for pid, d in placed.items() if d in ("d1", "d3")]
                if len(healthy) + sum(1 for d in placed.values() if d == "d2") == n or loop.time() > deadline:
                    break
                await reader.fetch_once(200)
        finally:
            await client.close()
        conn = await RawConnection.open(broker.port)
        codes: dict[int, int] = {}
        try:
            for pid in healthy:   # each must take a produce within the deadline (its log exists)
                while True:
                    resp = await asyncio.wait_for(conn.call(produce_request(
                        9, late, pid, make_batch([b"after-the-hang"]), acks=1)), SESSION_MS / 1000)
                    codes[pid] = int(resp.responses[0].partition_responses[0].error_code.value)
                    if codes[pid] == 0 or loop.time() > deadline:
                        break
                    await asyncio.sleep(0.1)
        finally:
            await conn.close()
        return {"placed": placed, "codes": codes}

    out = asyncio.run(run())
    print("hung-dir creation:", json.dumps(out))
    placed = out["placed"]
    assert sum(1 for d in placed.values() if d == "d2") >= 1, f"no replica of the new topic went to d2: {placed}"
    assert sum(1 for d in placed.values() if d in ("d1", "d3")) >= 2, placed
    assert all(code == 0 for code in out["codes"].values()), \
        f"partitions in healthy dirs not writable while a create hangs in d2: {out}"
    assert broker.alive(), broker.stderr()
