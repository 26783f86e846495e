"""A log dir failing with a REAL EIO under a running kraft-broker (issue 3).

One broker's ``data2`` (``d2``) is an ext4 file system on a small loop device; while the
cluster runs, the file system is shut down with ``EXT4_IOC_SHUTDOWN`` (NOLOGFLUSH), so every
later I/O on it fails with EIO in the kernel — no fault is simulated in Python. The broker's
next I/O there (the health probe, every 100 ms here) hits the EIO and takes the one failure
path. Checked against the controller's committed metadata (read back through Fetch of
``__cluster_metadata``) and both event logs:

* the broker logs one ``dir_offline`` with errno 5 and d2's directory id, reports it, stays
  up and unfenced;
* exactly the partitions whose replica on that broker lives in d2 get a PartitionChangeRecord
  (one each): ISR without the broker, leadership moved off it where it led, untouched where
  it followed; no other partition changes; one BrokerRegistrationChangeRecord without d2;
* a resent heartbeat with the same OfflineLogDirs (the broker's own, and one sent by the
  test) commits nothing;
* the other dirs keep working: the probe keeps writing+fsyncing them, a new topic's replicas
  on that broker land in them (real directory ids in the metadata, logs on disk);
* the metadata dir failing with EIO halts the broker (exit 1, a one-line reason with errno 5).

D5 (failure timer with the controller stopped) and ENOTDIR failures are covered in
``test_broker_dir_failure.py``; this file reuses its cluster helpers.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from testkit.cluster import create_and_settle, reader_for, unfenced, until, wait_unfenced, wait_until  # noqa: E402
from kafka_runtime.controller_client import SimBroker, create_topic  # noqa: E402
from kafka_common import ids, wire  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402
from kafka_common.metadata import records as r  # noqa: E402
from kafka_runtime.client import ClientError, KafkaClient  # noqa: E402
from loopdev import loop_fs_factory  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.integration
FAST = {"log.dir.probe.interval.ms": "100"}
PROBE_FILE = ".jbodlab-probe"
# partitions of the "eio" topic: broker 1 leads p0-p2, follows p3-p8 (second / third replica)
EIO_ASSIGNMENTS = {**{p: [1, 2, 3] for p in range(3)}, **{p: [2, 1, 3] for p in range(3, 6)},
                   **{p: [3, 2, 1] for p in range(6, 9)}}


def b64(dir_id) -> str:
    return ids.to_base64(dir_id)


def replicas_in_dir(image, broker_id: int, dir_id) -> set[tuple[str, int]]:
    """(topic, partition) whose replica on ``broker_id`` the metadata places in ``dir_id``."""
    out = set()
    for name, tid in image.topic_ids.items():
        for pid, p in image.partitions_of(tid).items():
            if broker_id in p.replicas and p.directory(broker_id) == dir_id:
                out.add((name, pid))
    return out


def snapshot(image) -> dict[tuple[str, int], tuple]:
    return {(name, pid): (p.leader, tuple(p.isr), tuple(p.replicas), tuple(p.directories), p.partition_epoch)
            for name, tid in image.topic_ids.items() for pid, p in image.partitions_of(tid).items()}


def probe_mtimes(paths) -> dict[str, int]:
    return {p: os.stat(os.path.join(p, PROBE_FILE)).st_mtime_ns for p in paths}


def test_eio_on_a_data_dir_moves_exactly_its_partitions(loop_fs_factory, make_cluster, tmp_path):
    # d2 of broker 1 is the loop file system, mounted where BrokerProcess puts data2 (before
    # the format, so meta.properties lands on it). loop_fs_factory comes first: its
    # finaliser (umount, losetup -d) runs after make_cluster's (kill the processes).
    d2 = str(tmp_path / "broker1" / "data2")
    fs = loop_fs_factory(mountpoint=d2, size_mb=32)
    ctrl, brokers = make_cluster(n_brokers=3, broker_extra=FAST)
    b1 = brokers[0]
    assert b1.dirs[2] == d2 and os.path.ismount(d2)
    dir_ids = b1.dir_ids()
    d2_id = dir_ids[d2]
    healthy = [d for d in b1.dirs if d != d2]
    found: dict = {}

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1, 2, 3)), 30, "brokers unfenced", brokers)
            assert set(reader.image.brokers[1].log_dirs) == set(dir_ids.values())
            await create_and_settle(client, reader, brokers, "eio", EIO_ASSIGNMENTS)
            # a topic without broker 1: must stay untouched
            await create_and_settle(client, reader, brokers, "bystander", {0: [2, 3], 1: [3, 2]})
            hit = replicas_in_dir(reader.image, 1, d2_id)
            tid = reader.image.topic_ids["eio"]
            led = {k for k in hit if reader.image.partition(tid, k[1]).leader == 1}
            assert led and hit - led, f"placement must put a leader and a follower of broker 1 in d2: {hit}"
            assert all(os.path.isdir(os.path.join(d2, f"{t}-{p}")) for t, p in hit)  # logs really on the fs
            before = snapshot(reader.image)
            mark = reader.next_offset
            wait_until(lambda: all(os.path.exists(os.path.join(d, PROBE_FILE)) for d in b1.dirs), 5,
                       "the probe to have written every dir")
            mtimes = probe_mtimes(healthy)

            inject_ns = fs.shutdown()  # the real failure: ext4 returns EIO from now on

            await until(reader, lambda im: d2_id not in im.brokers[1].log_dirs and all(
                1 not in im.partition(tid, p).isr and im.partition(tid, p).leader != 1 for _, p in hit),
                20, "controller dropped d2, shrank ISRs and moved leadership", brokers)
            commit_offset = reader.next_offset

            # a resent heartbeat with the same OfflineLogDirs commits nothing: the broker
            # resends it every 200 ms; the test also sends one with the broker's epoch
            hb = SimBroker(1, [], cluster_id=ctrl.cluster_id)
            await hb.connect("127.0.0.1", ctrl.port)
            try:
                hb.epoch = reader.image.brokers[1].epoch
                hb.offline = [d2_id]
                resp = await hb.heartbeat(reader.next_offset - 1)
                assert resp.error_code == wire.ErrorCode.none and not resp.is_fenced, resp
            finally:
                await hb.close()
            await asyncio.sleep(1.0)  # ~5 of the broker's own heartbeats
            await reader.catch_up()
            assert reader.next_offset == commit_offset, \
                f"resent heartbeats committed {[type(x).__name__ for _, x in reader.records if _ >= commit_offset]}"

            after = snapshot(reader.image)
            changed = {k for k in after if after[k] != before[k]}
            assert changed == hit, f"changed {sorted(changed)} but d2 held {sorted(hit)}"
            for k in hit:
                leader, isr, replicas, dirs, epoch = after[k]
                old_leader, old_isr, old_replicas, old_dirs, old_epoch = before[k]
                assert isr == tuple(b for b in old_isr if b != 1), (k, before[k], after[k])
                assert (replicas, dirs) == (old_replicas, old_dirs)  # the assignment to d2 stays
                assert epoch == old_epoch + 1                       # exactly one change each
                if k in led:
                    assert leader != 1 and leader in isr, (k, after[k])
                else:
                    assert leader == old_leader
            new = [rec for off, rec in reader.records if off >= mark]
            pcs = [x for x in new if isinstance(x, r.PartitionChangeRecord)]
            assert sorted((reader.image.topics[x.topic_id].name, x.partition_id) for x in pcs) == sorted(hit)
            regs = [x for x in new if isinstance(x, r.BrokerRegistrationChangeRecord)]
            assert len(regs) == 1 and regs[0].broker_id == 1, regs
            assert set(regs[0].log_dirs) == {dir_ids[d] for d in healthy}
            others = [type(x).__name__ for x in new if not isinstance(
                x, (r.PartitionChangeRecord, r.BrokerRegistrationChangeRecord, r.NoOpRecord))]
            assert not others, others
            assert not reader.image.brokers[1].fenced
            assert all(b.alive() for b in brokers), [b.stderr() for b in brokers if not b.alive()]

            # the other dirs keep working: the probe still writes + fsyncs them …
            wait_until(lambda: all(probe_mtimes(healthy)[d] > mtimes[d] for d in healthy), 5,
                       "the probe to keep writing the healthy dirs")
            # … and new replicas on broker 1 are created in them, with real ids in the metadata
            resp = await create_topic(client, "after", 0, 0, assignments={p: [1] for p in range(4)})
            assert resp.topics[0].error_code.value == 0, resp
            await until(reader, lambda im: "after" in im.topic_ids and all(
                UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids["after"]).values()),
                20, "the new replicas assigned", brokers)
            by_id = {v: k for k, v in dir_ids.items()}
            for p, part in reader.image.partitions_of(reader.image.topic_ids["after"]).items():
                path = by_id.get(part.directory(1))
                assert path in healthy, f"after-{p} placed in {part.directory(1)} (d2 is {d2_id})"
                wait_until(lambda: os.path.isdir(os.path.join(path, f"after-{p}")), 10, f"the log of after-{p}")
            found.update(hit=hit, inject_ns=inject_ns)
        finally:
            await client.close()

    asyncio.run(run())
    inject_ns, hit = found["inject_ns"], found["hit"]

    # the broker's own account: one dir_offline (errno EIO, d2's id), reported and acked
    ev = b1.events()
    offline = [e for e in ev if e["event"] == "dir_offline"]
    assert len(offline) == 1, offline
    assert offline[0]["errno"] == errno.EIO and offline[0]["dir_id"] == b64(d2_id) and offline[0]["path"] == d2
    assert offline[0]["ts_ns"] >= inject_ns
    names = [e["event"] for e in ev]
    assert "dir_failure_reported" in names and "dir_failure_acked" in names, names
    assert "halt" not in names and "failure_timeout_shutdown" not in names
    for b in brokers[1:]:
        assert not [e for e in b.events() if e["event"] in ("dir_offline", "probe_failed", "halt")]

    # the controller's account: partition_change events after the injection = d2's partitions
    cev = [e for e in ctrl_events(ctrl) if e["ts_ns"] >= inject_ns]
    moved = sorted((e["topic"], e["partition"]) for e in cev if e["event"] == "partition_change"
                   and e["topic"] != "after")
    assert moved == sorted(hit), moved
    dirs_changed = [e for e in cev if e["event"] == "broker_log_dirs_changed"]
    assert len(dirs_changed) == 1 and dirs_changed[0]["broker_id"] == 1 and dirs_changed[0]["removed"] == [b64(d2_id)]
    assert b1.alive(), b1.stderr()
    assert b1.stop() == 0, b1.stderr()   # a clean controlled shutdown with d2 dead


def ctrl_events(ctrl) -> list[dict]:
    from kafka_runtime.events import read_events
    return read_events(ctrl.events_path) if os.path.exists(ctrl.events_path) else []


def test_eio_on_the_metadata_dir_halts(loop_fs_factory, make_cluster, tmp_path):
    d0 = str(tmp_path / "broker1" / "data0")   # metadata.log.dir defaults to the first of log.dirs
    fs = loop_fs_factory(mountpoint=d0, size_mb=16)
    ctrl, brokers = make_cluster(n_brokers=1, broker_extra=FAST)
    [b1] = brokers
    md_id = b1.dir_ids()[d0]

    wait_unfenced(ctrl, brokers)
    inject_ns = fs.shutdown()
    assert b1.wait_exit(20) == 1, b1.stderr()
    err = b1.stderr()
    reason = [line for line in err.splitlines() if line.startswith("kraft-broker: halted:")]
    assert len(reason) == 1, err
    assert f"the metadata log dir {d0} failed" in reason[0] and "errno 5" in reason[0], reason
    offline = [e for e in b1.events() if e["event"] == "dir_offline"]
    assert [(e["errno"], e["dir_id"]) for e in offline] == [(errno.EIO, b64(md_id))], offline
    halts = [e for e in b1.events() if e["event"] == "halt"]
    assert len(halts) == 1 and halts[0]["dir_id"] == b64(md_id) and halts[0]["ts_ns"] >= inject_ns, halts
    assert ctrl.alive()


def test_surviving_dirs_serve_produce_and_fetch(loop_fs_factory, make_cluster, tmp_path):
    """Over the broker's own listener: after d2 fails, a partition it leads in another dir
    accepts a Produce (acks=1) and serves it back by Fetch; the one in d2 refuses."""
    from testkit.protocol import fetch_request, make_batch, produce_request

    d2 = str(tmp_path / "broker1" / "data2")
    fs = loop_fs_factory(mountpoint=d2, size_mb=16)
    ctrl, brokers = make_cluster(n_brokers=2, broker_extra=FAST)
    b1 = brokers[0]
    d2_id = b1.dir_ids()[d2]

    async def produce(c, p, value):
        v = c.pick_version(0, 3, 9)
        resp = await c.request(produce_request(v, "live", p, make_batch([value]), acks=1))
        return resp.responses[0].partition_responses[0]

    async def fetch(c, p, offset):
        v = c.pick_version(1, 4, 12)
        resp = await c.request(fetch_request(v, "live", p, offset))
        return resp.responses[0].partitions[0]

    async def run():
        client, reader = await reader_for(ctrl)
        data = None
        try:
            await until(reader, lambda im: unfenced(im, (1, 2)), 30, "brokers unfenced", brokers)
            await create_and_settle(client, reader, brokers, "live", {p: [1] for p in range(3)})
            tid = reader.image.topic_ids["live"]
            dead = [p for p in range(3) if reader.image.partition(tid, p).directory(1) == d2_id]
            alive = [p for p in range(3) if p not in dead]
            assert len(dead) == 1 and len(alive) == 2, (dead, alive)
            data = await wait_connect(b1.port)
            for p in range(3):   # all three work before
                assert (await produce(data, p, b"before")).error_code.value == 0
            fs.shutdown()
            await until(reader, lambda im: d2_id not in im.brokers[1].log_dirs, 20, "d2 dropped", brokers)
            for p in alive:
                pr = await produce(data, p, b"after")
                assert pr.error_code.value == 0 and pr.base_offset == 1, pr
                fr = await fetch(data, p, 0)
                assert fr.error_code.value == 0 and fr.high_watermark == 2, fr
                assert b"before" in bytes(fr.records) and b"after" in bytes(fr.records)
            pr = await produce(data, dead[0], b"after")
            assert pr.error_code.value in (56, 6), pr   # KAFKA_STORAGE_ERROR / NOT_LEADER_OR_FOLLOWER
        finally:
            if data is not None:
                await data.close()
            await client.close()

    asyncio.run(run())
    assert b1.alive(), b1.stderr()


async def wait_connect(port: int) -> KafkaClient:
    deadline = time.monotonic() + 10
    while True:
        try:
            return await KafkaClient.connect("127.0.0.1", port, client_id="eio-test", timeout_s=2)
        except ClientError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_loop_fs_fails_with_eio_and_cleanup_leaves_nothing(loop_fs_factory):
    """The fixture itself: after the shutdown ioctl the kernel answers EIO (reads, writes,
    creates); cleanup with a file still open in this process unmounts, detaches the loop
    device and removes the image."""
    fs = loop_fs_factory(size_mb=8)
    assert os.path.ismount(fs.mnt) and not os.listdir(fs.mnt)   # lost+found removed
    path = os.path.join(fs.mnt, "f")
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    held = os.open(path, os.O_RDWR)
    t = fs.shutdown()
    assert fs.shutdown_ns == t and abs(time.time_ns() - t) < 60 * 10**9
    for op in (lambda: os.open(os.path.join(fs.mnt, "g"), os.O_CREAT | os.O_WRONLY),
               lambda: os.pwrite(held, b"y", 0), lambda: os.fsync(held), lambda: os.open(path, os.O_RDONLY)):
        with pytest.raises(OSError) as info:
            op()
        assert info.value.errno == errno.EIO
    root, mnt = fs.root, fs.mnt
    fs.cleanup()   # closes `held` itself
    with pytest.raises(OSError):
        os.fstat(held)
    assert not os.path.exists(root) and not os.path.ismount(mnt)
    listing = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert root not in listing, listing   # the device may be reused at once: look for our image
    fs.cleanup()   # idempotent
