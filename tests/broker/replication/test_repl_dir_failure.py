"""Produce/consume validation in the style of Kafka's log_dir_failure_test, with a REAL disk
failure: broker 1's first data dir is an ext4 file system on a loop device; while a
confluent producer (acks=all, idempotent) writes to an RF=3 topic with
min.insync.replicas=2 whose partitions broker 1 leads, that file system is shut down
(EXT4_IOC_SHUTDOWN → every I/O fails with EIO). Checked: the partition in the failed dir
gets a new leader, broker 1 leaves its ISR, broker 1 keeps running, the producer recovers by
itself (records acked after the failure), and every acked record is consumed."""

from __future__ import annotations

import time

import pytest

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: E402,F401  (fixtures)
from testkit.cluster import BackgroundProducer, consume_all, running_cluster, wait_until  # noqa: E402

pytestmark = pytest.mark.integration
TOPIC = "validated"


@pytest.fixture
def cluster(tmp_path, loop_fs):
    # torn down before the loop fs is unmounted (it depends on loop_fs)
    with running_cluster(tmp_path, data_dir=loop_fs.mnt) as c:
        yield c


def test_acks_all_survives_real_eio_on_a_leader_dir(cluster, loop_fs):
    b1 = cluster.brokers[0]
    failing_dir_id = b1.dir_ids()[loop_fs.mnt]
    cluster.create_topic(TOPIC, {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    im = cluster.wait_image(lambda im: TOPIC in im.topic_ids and all(
        p.leader == 1 and len(p.isr) == 3 and p.directories[0] in b1.dir_ids().values()
        for p in im.partitions_of(im.topic_ids[TOPIC]).values()), 20, "topic placed in real dirs, ISR 3")
    tid = im.topic_ids[TOPIC]
    victims = [pid for pid, p in im.partitions_of(tid).items() if p.directories[0] == failing_dir_id]
    assert len(victims) == 1, "least-loaded placement puts one of the 3 partitions in each dir"
    victim = victims[0]
    assert im.partition(tid, victim).leader == 1

    prod = BackgroundProducer(cluster.bootstrap, TOPIC, 3)
    prod.thread.start()
    try:
        wait_until(lambda: prod.acked_after(0, victim) > 200, 20, "records acked before the failure")
        failed_at = time.monotonic()
        loop_fs.shutdown()  # EIO from now on
        after = cluster.wait_image(lambda im: im.partition(tid, victim).leader not in (1, -1)
                                   and 1 not in im.partition(tid, victim).isr, 30,
                                   "leadership of the failed partition moved and broker 1 left its ISR")
        moved_at = time.monotonic()
        assert len(after.partition(tid, victim).isr) == 2
        # the producer recovers by itself: new acks for the victim partition after the move
        wait_until(lambda: prod.acked_after(moved_at, victim) > 100, 30,
                   "producer acks again on the moved partition")
        recovered_in = time.monotonic() - failed_at
    finally:
        prod.stop.set()
        prod.thread.join(90)
    assert not prod.thread.is_alive()
    assert not prod.errors, prod.errors[:3]
    assert b1.alive(), "broker 1 must keep running (its metadata dir and two data dirs are fine)"
    events = [e["event"] for e in b1.events()]
    assert "dir_offline" in events and "halt" not in events
    expected = {(p, v) for p, v, _t in prod.acked}
    got = consume_all(cluster.bootstrap, TOPIC, 3, expected)
    missing = expected - got
    assert not missing, f"{len(missing)} acked records lost, e.g. {sorted(missing)[:3]}"
    # the other partitions (broker 1's healthy dirs) kept their leader
    final = cluster.image()
    for pid, p in final.partitions_of(tid).items():
        if pid != victim:
            assert p.leader == 1 and len(p.isr) == 3
    print(f"acked {len(expected)} records; leader moved {moved_at - failed_at:.2f}s and the producer "
          f"recovered {recovered_in:.2f}s after EIO")


@pytest.fixture
def follower_fs_cluster(tmp_path, loop_fs):
    with running_cluster(tmp_path, data_dir=loop_fs.mnt, data_dir_broker=1) as c:
        yield c


def test_follower_dir_eio_leaves_isr_and_acks_all_goes_on(follower_fs_cluster, loop_fs):
    """A follower's dir fails for real: it stops fetching those partitions, the controller
    drops it from their ISR, the leader's HW follows the smaller ISR (= min.insync.replicas)
    and acks=all goes on without a single error; every acked record is consumed."""
    cluster = follower_fs_cluster
    b2 = cluster.brokers[1]
    failing = b2.dir_ids()[loop_fs.mnt]
    cluster.create_topic(TOPIC, {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    im = cluster.wait_image(lambda im: TOPIC in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[1] in b2.dir_ids().values()
        for p in im.partitions_of(im.topic_ids[TOPIC]).values()), 20, "topic placed, ISR 3")
    tid = im.topic_ids[TOPIC]
    victim = next(pid for pid, p in im.partitions_of(tid).items() if p.directories[1] == failing)
    prod = BackgroundProducer(cluster.bootstrap, TOPIC, 3)
    prod.thread.start()
    try:
        wait_until(lambda: prod.acked_after(0, victim) > 200, 20, "load running")
        loop_fs.shutdown()
        cluster.wait_image(lambda im: im.partition(tid, victim).isr == (1, 3), 30, "broker 2 out of the ISR")
        t = time.monotonic()
        wait_until(lambda: prod.acked_after(t, victim) > 200, 30, "acks=all goes on with ISR 1,3")
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    assert b2.alive()
    final = cluster.image()
    assert final.partition(tid, victim).leader == 1
    for pid in range(3):
        if pid != victim:
            assert len(final.partition(tid, pid).isr) == 3
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(cluster.bootstrap, TOPIC, 3, expected)
