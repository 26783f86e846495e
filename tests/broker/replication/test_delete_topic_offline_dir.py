"""A topic deleted and re-created while a replica's dir is offline, then the dir comes back
(KIP-858's rule for offline dirs; KAFKA-16157, KAFKA-16234, KAFKA-16814), on real processes:
broker X's first data dir is an ext4 file system on a loop device, failed for real
(EXT4_IOC_SHUTDOWN), then mounted again before X's restart (the disk "comes back" with its
data) or replaced by a freshly formatted disk.

- the delete is accepted with the dir offline: every log the brokers can reach is deleted,
  the one in the dead dir cannot be (it stays there);
- the topic re-created under the same name (a new topic id) gets its replica on X in an
  online dir (KAFKA-16157) and X joins its ISR, while nothing of the old incarnation comes back;
- X restarted with the dir back (``back``) finds both incarnations of that partition on its disks: the
  old one (a topic id the image does not have) is a stray, deleted at start-up; the new one
  is kept and in use; a log whose ``partition.metadata`` is gone is a stray too, deleted
  without blocking the start (KAFKA-16814), and re-created from the leader;
- the re-created topic is intact: every acked record of it is consumed, none of the old one.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker_impl.storage import checkpoint as ckpt
from kafka_common.ids import UNASSIGNED, to_base64
from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: F401  (fixtures)
from testkit.cluster import check_real_dirs, consume_all, running_cluster, wait_until
from harness.run.local_processes import REPO

pytestmark = pytest.mark.integration
TOPIC = "doomed"
PARTITIONS = 3
ME = 2   # broker X: follows every partition (leader 1), its first data dir on the loop device


@pytest.fixture
def cluster(tmp_path, loop_fs):
    with running_cluster(tmp_path, data_dir=loop_fs.mnt, data_dir_broker=ME - 1) as c:
        yield c


def _admin(cluster):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _produce(cluster, prefix: str) -> set[tuple[int, bytes]]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    acked: set[tuple[int, bytes]] = set()
    for part in range(PARTITIONS):
        for i in range(20):
            p.produce(TOPIC, f"{prefix}-{part}-{i}".encode(), partition=part,
                      on_delivery=lambda err, m: acked.add((m.partition(), m.value())) if not err else None)
    assert p.flush(60) == 0
    assert len(acked) == 20 * PARTITIONS
    return acked


def _placed(cluster, x):
    return cluster.wait_image(lambda im: TOPIC in im.topic_ids and all(
        len(p.isr) == 3 and UNASSIGNED not in p.directories
        for p in im.partitions_of(im.topic_ids[TOPIC]).values()), 30, f"{TOPIC} placed, ISR 3")


def _partition_dirs(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith(TOPIC + "-"))


@pytest.fixture(params=["back", "replaced"])
def disk(request):
    """What becomes of the failed disk: it comes back with its data (mounted again), or it is
    replaced by a freshly formatted one (a new directory.id, the stray gone with the old disk)."""
    return request.param


def test_delete_while_dir_offline_then_the_dir_comes_back(cluster, loop_fs, disk):
    x = cluster.brokers[ME - 1]
    ids_before = x.dir_ids()
    dead_id = ids_before[loop_fs.mnt]
    admin = _admin(cluster)
    cluster.create_topic(TOPIC, {p: [1, 2, 3] for p in range(PARTITIONS)})
    im = _placed(cluster, x)
    old_tid = im.topic_ids[TOPIC]
    victim = next(pid for pid, p in im.partitions_of(old_tid).items() if p.directories[p.replicas.index(ME)] == dead_id)
    old_values = _produce(cluster, "old")
    wait_until(lambda: os.path.isdir(os.path.join(loop_fs.mnt, f"{TOPIC}-{victim}")), 10, "the victim's log on X")
    os.sync()   # what X wrote there is on the disk when it comes back

    loop_fs.shutdown()
    cluster.wait_image(lambda im: ME not in im.partition(old_tid, victim).isr, 30, f"X out of the ISR of {victim}")

    admin.delete_topics([TOPIC], request_timeout=30)[TOPIC].result(30)
    cluster.wait_image(lambda im: TOPIC not in im.topic_ids, 20, f"{TOPIC} gone from the metadata")
    healthy = [d for b in cluster.brokers for d in b.dirs if d != loop_fs.mnt]
    wait_until(lambda: not any(_partition_dirs(d) for d in healthy), 20, f"every reachable log of {TOPIC} removed")

    # re-created under the same name: a new topic id, X's replica of the victim in an online dir
    cluster.create_topic(TOPIC, {p: [1, 2, 3] for p in range(PARTITIONS)})
    im = _placed(cluster, x)
    new_tid = im.topic_ids[TOPIC]
    assert new_tid != old_tid
    reg = im.partition(new_tid, victim)
    assert reg.directories[reg.replicas.index(ME)] in {v for k, v in ids_before.items() if k != loop_fs.mnt}
    new_values = _produce(cluster, "new")
    # KAFKA-16814 at the next start: another partition's log on X loses its partition.metadata
    other = next(p for p in range(PARTITIONS) if p != victim)
    other_dir = next(d for d in x.dirs if d != loop_fs.mnt and os.path.isdir(os.path.join(d, f"{TOPIC}-{other}")))
    wait_until(lambda: all(ME in p.isr for p in cluster.image().partitions_of(new_tid).values()), 30,
               "X in the ISR of the re-created topic")

    # the disk comes back: X stopped, the file system mounted again, X started
    assert x.stop() == 0, x.stderr()
    before = len(x.events())
    if disk == "back":
        subprocess.run(["umount", loop_fs.mnt], check=True, capture_output=True)
        subprocess.run(["mount", "-t", "ext4", loop_fs.dev, loop_fs.mnt], check=True, capture_output=True)
        stray_path = os.path.join(loop_fs.mnt, f"{TOPIC}-{victim}")
        assert os.path.isdir(stray_path), f"the old incarnation's log is back: {os.listdir(loop_fs.mnt)}"
        assert ckpt.read_partition_metadata(os.path.join(stray_path, ckpt.PARTITION_METADATA)) == old_tid
        back_id = dead_id
    else:
        loop_fs.cleanup()
        os.makedirs(loop_fs.mnt, exist_ok=True)
        out = subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", "format", "-c", x.config_path,
                              "--cluster-id", cluster.ctrl.cluster_id, "--ignore-formatted"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        back_id = x.dir_ids()[loop_fs.mnt]
        assert back_id != dead_id
    os.unlink(os.path.join(other_dir, f"{TOPIC}-{other}", ckpt.PARTITION_METADATA))
    x.start()
    cluster.wait_image(lambda im: ME in im.brokers and not im.brokers[ME].fenced
                       and back_id in im.brokers[ME].log_dirs, 30, "X registered with the dir back, unfenced")
    wait_until(lambda: all(ME in p.isr for p in cluster.image().partitions_of(new_tid).values()), 40,
               "X back in the ISR of every partition of the re-created topic")
    run2 = x.events()[before:]
    deleted = {(e["partition"], e["topic_id"], e["dir_id"]) for e in run2 if e["event"] == "log_deleted"}
    strays = {(other, None, to_base64(ids_before[other_dir]))}
    if disk == "back":   # replaced: the old incarnation's log went with the old disk
        strays.add((victim, to_base64(old_tid), to_base64(dead_id)))
    assert deleted == strays, run2
    assert all(e["stray"] for e in run2 if e["event"] == "log_deleted")
    wait_until(lambda: len([e for e in x.events()[before:] if e["event"] == "log_removed"]) == len(strays), 20,
               "the strays removed")
    assert not any(e["event"] == "dir_offline" for e in run2), "start-up took a dir offline"
    assert not _partition_dirs(loop_fs.mnt), os.listdir(loop_fs.mnt)    # the stray is gone from the disk
    check_real_dirs(cluster.image(), cluster.brokers, TOPIC)            # one log per replica, where the metadata says
    got = consume_all(cluster.bootstrap, TOPIC, PARTITIONS, new_values)
    assert got == new_values, (f"missing {sorted(new_values - got)[:3]}, foreign {sorted(got - new_values)[:3]}")
    assert not got & old_values
