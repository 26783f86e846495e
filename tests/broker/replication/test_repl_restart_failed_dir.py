"""A broker restarted with a dead disk (issue 41; Kafka's log_dir_failure_test bounce variants,
KAFKA-16234): one data dir of broker X is an ext4 file system on a loop device, failed for
real (EXT4_IOC_SHUTDOWN: every I/O, ``meta.properties`` included, fails with EIO), then X is
restarted cleanly with the disk still dead, while a producer (acks=all, idempotent) writes.

Checked, for X the leader and X a follower of the failed partition:
- X starts, registers only its readable dirs and is unfenced;
- the partition whose replica on X was in the dead dir stays offline on X: its metadata dir
  for X stays the dead dir's id (no AssignReplicasToDirs moving it), X stays out of its ISR,
  and X never creates it in another dir (no log of it on X's healthy dirs);
- X's other partitions come back into their ISR; no acked record is lost;
- then the disk is "replaced" (a freshly formatted dir, new id, at the same path) and X
  restarted: the replica follows the KIP's path for a lost dir's replicas (created in an online
  dir, its assignment sent) and X rejoins its ISR.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: F401  (fixtures)
from testkit.cluster import BackgroundProducer, consume_all, running_cluster, wait_until
from harness.run.local_processes import REPO

pytestmark = pytest.mark.integration
TOPIC = "bounced"
PARTITIONS = 3
HOLD_S = 4.0   # how long the offline replica is watched after the restart (20 heartbeats)


@pytest.fixture(params=["leader", "follower"])
def role(request):
    return request.param


@pytest.fixture
def cluster(tmp_path, loop_fs, role):
    # broker 1 leads every partition ([1, 2, 3]); the dead disk is broker 1's (leader) or 2's
    with running_cluster(tmp_path, data_dir=loop_fs.mnt, data_dir_broker=0 if role == "leader" else 1) as c:
        yield c


def _format_ignoring_formatted(config_path: str, cluster_id: str) -> None:
    out = subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", "format", "-c", config_path,
                          "--cluster-id", cluster_id, "--ignore-formatted"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_restart_with_a_dead_disk_keeps_its_replica_offline_until_the_disk_is_replaced(cluster, loop_fs, role):
    x = cluster.brokers[0 if role == "leader" else 1]
    me = x.node_id
    dead_id = x.dir_ids()[loop_fs.mnt]
    cluster.create_topic(TOPIC, {p: [1, 2, 3] for p in range(PARTITIONS)})
    im = cluster.wait_image(lambda im: TOPIC in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[p.replicas.index(me)] in x.dir_ids().values()
        for p in im.partitions_of(im.topic_ids[TOPIC]).values()), 20, "topic placed, ISR 3")
    tid = im.topic_ids[TOPIC]
    victim = next(pid for pid, p in im.partitions_of(tid).items() if p.directories[p.replicas.index(me)] == dead_id)

    prod = BackgroundProducer(cluster.bootstrap, TOPIC, PARTITIONS)
    prod.thread.start()
    try:
        wait_until(lambda: prod.acked_after(0, victim) > 100, 20, "records acked before the failure")
        loop_fs.shutdown()
        cluster.wait_image(lambda im: me not in im.partition(tid, victim).isr
                           and im.partition(tid, victim).leader not in (me, -1), 30,
                           f"broker {me} out of the ISR (and not the leader) of {TOPIC}-{victim}")

        # a clean restart with the disk still dead
        assert x.stop() == 0, x.stderr()
        restarted_at = time.monotonic()
        x.start()
        cluster.wait_image(lambda im: me in im.brokers and not im.brokers[me].fenced
                           and dead_id not in im.brokers[me].log_dirs
                           and len(im.brokers[me].log_dirs) == len(x.dirs) - 1, 30,
                           f"broker {me} re-registered with its readable dirs only and unfenced")
        others = [p for p in range(PARTITIONS) if p != victim]
        cluster.wait_image(lambda im: all(me in im.partition(tid, p).isr for p in others), 30,
                           f"broker {me} back in the ISR of its healthy partitions")
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            p = cluster.image().partition(tid, victim)
            assert p.directories[p.replicas.index(me)] == dead_id, \
                f"{TOPIC}-{victim}'s replica on broker {me} was re-assigned to {p.directories} while its dir is dead"
            assert me not in p.isr, f"broker {me} rejoined the ISR {p.isr} of {TOPIC}-{victim} with a dead disk"
            time.sleep(0.2)
        t = time.monotonic()
        wait_until(lambda: prod.acked_after(t, victim) > 100, 30, f"acks go on for {TOPIC}-{victim}")
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    assert x.alive(), x.stderr()
    victim_dir = f"{TOPIC}-{victim}"
    for d in x.dirs:
        if d != loop_fs.mnt:
            assert victim_dir not in os.listdir(d), f"{victim_dir} was re-created in {d}"
    evs = x.events()   # both runs of broker X, in one file
    assert [e["event"] for e in evs].count("broker_starting") == 2
    second = evs[[e["event"] for e in evs].index("stopped") + 1:]   # the restarted run
    assert any(e["event"] == "dir_offline" and e.get("op") == "startup" for e in second)
    offline = [e for e in second if e["event"] == "replica_offline"]
    assert [(e["topic"], e["partition"]) for e in offline] == [(TOPIC, victim)], offline
    expected = {(p, v) for p, v, _t in prod.acked}
    missing = expected - consume_all(cluster.bootstrap, TOPIC, PARTITIONS, expected)
    assert not missing, f"{len(missing)} acked records lost, e.g. {sorted(missing)[:3]}"
    print(f"{role}: {len(expected)} acked, none lost; the replica stayed offline for "
          f"{time.monotonic() - restarted_at:.1f}s after the restart")

    # replace the disk: a freshly formatted dir (a new directory.id) at the same path
    assert x.stop() == 0, x.stderr()
    loop_fs.cleanup()
    os.makedirs(loop_fs.mnt, exist_ok=True)
    _format_ignoring_formatted(x.config_path, cluster.ctrl.cluster_id)
    new_id = x.dir_ids()[loop_fs.mnt]
    assert new_id != dead_id
    x.start()
    p = cluster.wait_image(lambda im: me in im.partition(tid, victim).isr, 40,
                           f"broker {me} back in the ISR of {TOPIC}-{victim} after the disk was replaced")\
        .partition(tid, victim)
    assert p.directories[p.replicas.index(me)] in x.dir_ids().values()
    assert any(os.path.isdir(os.path.join(d, victim_dir)) for d in x.dirs)
