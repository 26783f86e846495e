"""Retention meets a real disk failure: broker 1's first data dir is ext4 on a loop device,
its health probe is off (so retention and the checkpoints are the only I/O on an idle dir).
Its partitions have small segments; the file system is shut down (EXT4_IOC_SHUTDOWN → EIO)
and retention.bytes is lowered, so broker 1's next retention round deletes segments in the
failed dir. The error goes through the broker's one failure path: the dir goes offline
(one ``dir_offline`` event), the partition's leadership moves, broker 1 keeps running and
keeps enforcing retention in its healthy dirs."""

from __future__ import annotations

import glob
import os
import sys
import time

import pytest

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: E402,F401  (fixtures)
from testkit.cluster import Cluster, wait_until  # noqa: E402

pytestmark = pytest.mark.integration
TOPIC = "ret-eio"


@pytest.fixture
def cluster(tmp_path, loop_fs, request):
    # the recovery-point checkpoint every 300 ms shows when the rolls' background flushes are done
    c = Cluster(tmp_path, broker_extra={"log.retention.check.interval.ms": "200",
                                        "log.flush.offset.checkpoint.interval.ms": "300"})
    request.addfinalizer(c.kill)  # before the loop fs is unmounted (finalizers run in reverse)
    c.brokers[0].extra["log.dir.probe.interval.ms"] = "0"
    c.start_with_dir(loop_fs.mnt)
    return c


def _segments(path: str) -> list[str]:
    return glob.glob(os.path.join(path, f"{TOPIC}-*", "*.log"))


def _rolls_flushed(path: str) -> bool:
    """Every partition dir's newest segment starts at or below its checkpointed recovery point:
    the flush each roll left to the dir's flush threads (nothing waits for it) has run, so no
    fsync of this idle dir is still pending (CI once saw one land after the shutdown)."""
    try:
        with open(os.path.join(path, "recovery-point-offset-checkpoint")) as f:
            lines = f.read().split("\n")[2:]
    except FileNotFoundError:
        return False
    rp = {f"{t}-{p}": int(o) for t, p, o in (l.split() for l in lines if l.strip())}
    pdirs = glob.glob(os.path.join(path, f"{TOPIC}-*"))
    for pdir in pdirs:
        newest = max((int(os.path.basename(f)[:-4]) for f in glob.glob(os.path.join(pdir, "*.log"))), default=0)
        if rp.get(os.path.basename(pdir), -1) < newest:
            return False
    return bool(pdirs)


def test_eio_during_retention_takes_the_dir_offline_not_the_broker(cluster, loop_fs):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    b1 = cluster.brokers[0]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    cluster.create_topic(TOPIC, {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    res = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET)])
    wait_until(lambda: TOPIC in cluster.image().topic_ids, 20, "topic created")
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)
    desc = ConfigResource(ResourceType.TOPIC, TOPIC)
    wait_until(lambda: admin.describe_configs([desc], request_timeout=30)[desc].result(30)["segment.bytes"].value
               == "4096", 20, "segment.bytes in force")
    failing_dir_id = b1.dir_ids()[loop_fs.mnt]
    im = cluster.wait_image(lambda im: TOPIC in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[0] in b1.dir_ids().values()
        for p in im.partitions_of(im.topic_ids[TOPIC]).values()), 30, "placed in real dirs, ISR 3")
    tid = im.topic_ids[TOPIC]
    victims = [pid for pid, p in im.partitions_of(tid).items() if p.directories[0] == failing_dir_id]
    assert len(victims) == 1

    time.sleep(1.5)  # the logs take the new segment.bytes within a second
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 1})
    for i in range(150):
        p.produce(TOPIC, value=b"%06d" % i + b"v" * 494, partition=i % 3)
        p.poll(0)
    assert p.flush(30) == 0
    wait_until(lambda: _rolls_flushed(loop_fs.mnt), 20, "the rolls' flushes in the failing dir done")
    healthy = [d for d in b1.dirs if d != loop_fs.mnt]
    before_healthy = sum(len(_segments(d)) for d in healthy)
    assert len(_segments(loop_fs.mnt)) > 3 and before_healthy > 6

    loop_fs.shutdown()  # EIO from now on
    res = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.bytes", "4096", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)

    wait_until(lambda: any(e["event"] == "dir_offline" for e in b1.events()), 30, "broker 1's failed dir offline")
    offline = [e for e in b1.events() if e["event"] == "dir_offline"]
    assert len(offline) == 1 and offline[0]["path"] == loop_fs.mnt and offline[0]["errno"] == 5
    # retention's own ops (measured: "retention" every time); the HW checkpoint, every 5 s,
    # is the only other I/O of this idle dir and may come first
    assert offline[0]["op"] in ("retention", "delete_segments", "roll", "checkpoint"), offline[0]
    after = cluster.wait_image(lambda im: 1 not in im.partition(tid, victims[0]).isr
                               and im.partition(tid, victims[0]).leader not in (1, -1), 30,
                               "the failed dir's partition left broker 1")
    assert len(after.partition(tid, victims[0]).isr) == 2
    # broker 1 goes on: retention still deletes segments in its two healthy dirs
    wait_until(lambda: sum(len(_segments(d)) for d in healthy) < before_healthy, 30, "retention in healthy dirs")
    wait_until(lambda: any(e["event"] == "retention_deleted" and e["path"] in healthy for e in b1.events()), 10,
               "retention_deleted event of a healthy dir")
    assert b1.alive()
    assert "halt" not in [e["event"] for e in b1.events()]
