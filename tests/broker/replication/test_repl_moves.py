"""Moving replicas between a broker's dirs (behaviour §4) with real processes and real disks.

- Under acks=all load, AlterReplicaLogDirs moves the leader's and a follower's replica to
  other dirs: future log, AssignReplicasToDirs(target), swap; metadata names the new dirs,
  each log lives only in its new dir, nothing acked is lost, replicas stay identical.
- The target dir (an ext4 loop fs) fails after the promotion assignment was sent (the
  controller is held with SIGSTOP so the move sits in QUEUED): the move is cancelled, the
  assignment reverted to the source dir, the replica stays where it was, nothing is lost.
- The source dir (loop fs) fails after the assignment was sent: the broker sends
  AssignReplicasToDirs(LOST) (D6), so the controller records LOST and moves ISR/leadership.
- The source dir fails unnoticed while the promotion waits for the controller, so the swap's
  own delete of the old log is the first I/O to hit EIO (the race campaign S9 hit in 2 of 10
  runs, stop 29): the replica lives on in the target dir, in the ISR and serving, while the
  source dir's other replicas go offline.
- The target dir fails the same way, unnoticed until the swap's flush of the future log: the
  swap fails, the assignment goes back to the source, the replica stays there, back in the
  ISR, and serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: E402,F401  (fixtures)
from testkit.cluster import BackgroundProducer, Cluster, consume_all, wait_until  # noqa: E402
from kafka_common import wire  # noqa: E402
from kafka_common.ids import LOST  # noqa: E402
from testkit.protocol import RawConnection  # noqa: E402

pytestmark = pytest.mark.integration


def alter_dir(broker, topic: str, partition: int, path: str) -> int:
    mod = wire.request_module(34, 2)

    async def run():
        c = await RawConnection.open(broker.port)
        try:
            resp = await c.call(wire.request_class(34, 2)(dirs=(mod.AlterReplicaLogDir(
                path=path, topics=(mod.AlterReplicaLogDirTopic(name=topic, partitions=(partition,)),)),)))
        finally:
            await c.close()
        return int(resp.results[0].partitions[0].error_code.value)
    return asyncio.run(run())


def holders(broker, topic: str, partition: int) -> list[str]:
    out = []
    for d in broker.dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        out += [os.path.join(d, n) for n in names if n == f"{topic}-{partition}" or
                (n.startswith(f"{topic}-{partition}.") and n.endswith("-future"))]
    return out


def count_events(broker, name: str, **match) -> int:
    return sum(1 for e in broker.events() if e["event"] == name and all(e.get(k) == v for k, v in match.items()))


def make_cluster(tmp_path, request, loop_fs=None) -> Cluster:
    c = Cluster(tmp_path, session_timeout_ms=9000)
    request.addfinalizer(c.kill)
    if loop_fs is not None:
        c.start_with_dir(loop_fs.mnt, dir_index=1)
    else:
        c.prepare()
        c.start()
    return c


def dir_of(im, topic: str, partition: int, broker_id: int):
    reg = im.partition(im.topic_ids[topic], partition)
    return reg.directories[reg.replicas.index(broker_id)]


def test_move_leader_and_follower_replicas_under_load(tmp_path, request):
    cluster = make_cluster(tmp_path, request)
    b1, b2, _b3 = cluster.brokers
    cluster.create_topic("mv", {0: [1, 2, 3]})
    im = cluster.wait_image(lambda im: "mv" in im.topic_ids and len(im.partition(im.topic_ids["mv"], 0).isr) == 3
                            and dir_of(im, "mv", 0, 1) in b1.dir_ids().values()
                            and dir_of(im, "mv", 0, 2) in b2.dir_ids().values(), 20, "mv placed")
    prod = BackgroundProducer(cluster.bootstrap, "mv", 1)
    prod.thread.start()
    targets = {}
    try:
        wait_until(lambda: len(prod.acked) > 300, 20, "load running")
        for b in (b1, b2):
            src = holders(b, "mv", 0)[0]
            target = next(d for d in b.dirs if d != os.path.dirname(src))
            targets[b.node_id] = target
            assert alter_dir(b, "mv", 0, target) == 0
        ids1, ids2 = b1.dir_ids(), b2.dir_ids()
        cluster.wait_image(lambda im: dir_of(im, "mv", 0, 1) == ids1[targets[1]]
                           and dir_of(im, "mv", 0, 2) == ids2[targets[2]], 30, "metadata names the target dirs")
        for b in (b1, b2):
            wait_until(lambda b=b: holders(b, "mv", 0) == [os.path.join(targets[b.node_id], "mv-0")], 15,
                       f"broker {b.node_id}: the log only in its target dir")
            assert count_events(b, "dir_move_done", topic="mv") == 1
        n_before = len(prod.acked)
        wait_until(lambda: len(prod.acked) > n_before + 200, 20, "load goes on after the swaps")
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(cluster.bootstrap, "mv", 1, expected)
    final = cluster.image()
    assert final.partition(final.topic_ids["mv"], 0).isr == (1, 2, 3)


@contextlib.contextmanager
def controller_held(cluster):
    """The controller stopped (SIGSTOP) inside the block, released however it ends."""
    os.kill(cluster.ctrl.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(cluster.ctrl.proc.pid, signal.SIGCONT)


def move_then_fail(b1, topic: str, partition: int, target: str, loop_fs) -> None:
    """With the controller held: move ``topic``-``partition`` of broker 1 to ``target``, wait
    until the promotion assignment is sent (not answered), then fail the loop fs."""
    sent_before = count_events(b1, "assignment_sent")
    assert alter_dir(b1, topic, partition, target) == 0
    wait_until(lambda: count_events(b1, "assignment_sent") > sent_before, 10,
               "the promotion assignment sent (the controller does not answer yet)")
    loop_fs.shutdown()


def fail_mid_move(cluster, b1, topic: str, partition: int, target: str, loop_fs, reason: str) -> None:
    """:func:`move_then_fail`; the move must be cancelled for ``reason`` before the controller
    answers."""
    with controller_held(cluster):
        move_then_fail(b1, topic, partition, target, loop_fs)
        wait_until(lambda: count_events(b1, "dir_move_cancelled", topic=topic, reason=reason) == 1,
                   10, "move cancelled")


def test_target_dir_fails_mid_move_cancels_and_reverts(tmp_path, request, loop_fs):
    cluster = make_cluster(tmp_path, request, loop_fs)
    b1 = cluster.brokers[0]
    ids1 = b1.dir_ids()
    cluster.create_topic("tg", {0: [1, 2, 3]})
    im = cluster.wait_image(lambda im: "tg" in im.topic_ids and len(im.partition(im.topic_ids["tg"], 0).isr) == 3
                            and dir_of(im, "tg", 0, 1) in ids1.values(), 20, "tg placed")
    source = next(p for p, i in ids1.items() if i == dir_of(im, "tg", 0, 1))
    assert source != loop_fs.mnt  # least loaded, ties in config order: data0
    prod = BackgroundProducer(cluster.bootstrap, "tg", 1)
    prod.thread.start()
    try:
        wait_until(lambda: len(prod.acked) > 300, 20, "load running")
        # the target fails before the swap
        fail_mid_move(cluster, b1, "tg", 0, loop_fs.mnt, loop_fs, "target dir offline")
        cluster.wait_image(lambda im: dir_of(im, "tg", 0, 1) == ids1[source], 30,
                           "the assignment reverted to the source dir")
        cluster.wait_image(lambda im: 1 in im.partition(im.topic_ids["tg"], 0).isr, 30, "broker 1 in the ISR")
        n_before = len(prod.acked)
        wait_until(lambda: len(prod.acked) > n_before + 200, 20, "load goes on")
    finally:
        prod.finish()
    # the replica stays in its source dir (the dead fs may still list the abandoned future log)
    assert [h for h in holders(b1, "tg", 0) if not h.startswith(loop_fs.mnt)] == [os.path.join(source, "tg-0")]
    assert count_events(b1, "dir_move_done") == 0
    assert not prod.errors, prod.errors[:3]
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(cluster.bootstrap, "tg", 1, expected)
    assert b1.alive()


def test_source_dir_fails_after_assignment_sent_assigns_lost(tmp_path, request, loop_fs):
    cluster = make_cluster(tmp_path, request, loop_fs)
    b1 = cluster.brokers[0]
    ids1 = b1.dir_ids()
    cluster.create_topic("src", {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    im = cluster.wait_image(lambda im: "src" in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[0] in ids1.values()
        for p in im.partitions_of(im.topic_ids["src"]).values()), 20, "src placed")
    tid = im.topic_ids["src"]
    victim = next(pid for pid in range(3) if dir_of(im, "src", pid, 1) == ids1[loop_fs.mnt])
    target = next(p for p in b1.dirs if p != loop_fs.mnt)
    prod = BackgroundProducer(cluster.bootstrap, "src", 3)
    prod.thread.start()
    try:
        wait_until(lambda: len(prod.acked) > 300, 20, "load running")
        # the source fails after the assignment was sent, before the swap
        fail_mid_move(cluster, b1, "src", victim, target, loop_fs, "source dir offline")
        after = cluster.wait_image(lambda im: dir_of(im, "src", victim, 1) == LOST, 30,
                                   "the controller recorded LOST for the replica (D6)")
        reg = after.partition(tid, victim)
        assert 1 not in reg.isr and reg.leader in (2, 3)
        t_moved = time.monotonic()
        wait_until(lambda: prod.acked_after(t_moved, victim) > 100, 30, "producer recovers on the moved partition")
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(cluster.bootstrap, "src", 3, expected)
    assert b1.alive()


QUIET_DIRS = {  # nothing but the test's own steps touches a dir: no probe, no checkpoint due
    "log.dir.probe.interval.ms": "0",
    "replica.high.watermark.checkpoint.interval.ms": "600000",
    "log.flush.offset.checkpoint.interval.ms": "600000",
}


def quiet_cluster(tmp_path, request, loop_fs) -> Cluster:
    cluster = Cluster(tmp_path, session_timeout_ms=12000, broker_extra=QUIET_DIRS)
    request.addfinalizer(cluster.kill)
    cluster.start_with_dir(loop_fs.mnt, dir_index=1)
    return cluster


def produce_then_stop(cluster, topic: str, partitions: int) -> set[tuple[int, bytes]]:
    """Some load, then none: acks=all acked everything on every replica, so no write is
    pending. Returns what was acked."""
    prod = BackgroundProducer(cluster.bootstrap, topic, partitions)
    prod.thread.start()
    try:
        wait_until(lambda: len(prod.acked) > 300, 20, "load running")
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    return {(p, v) for p, v, _t in prod.acked}


def serves_on(cluster, topic: str, partitions: int, partition: int, what: str) -> set[tuple[int, bytes]]:
    """Produce again until ``partition`` took 100 acks=all records, then on past
    ``replica.lag.time.max.ms`` (3 s: a stalled replica would leave the ISR). Returns what was acked."""
    prod = BackgroundProducer(cluster.bootstrap, topic, partitions)
    prod.thread.start()
    try:
        t0 = time.monotonic()
        wait_until(lambda: prod.acked_after(t0, partition) > 100, 30, what)
        time.sleep(3.5)
    finally:
        prod.finish()
    assert not prod.errors, prod.errors[:3]
    return {(p, v) for p, v, _t in prod.acked}


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_source_dir_fails_as_the_swap_deletes_the_old_log(tmp_path, request, loop_fs, role):
    cluster = quiet_cluster(tmp_path, request, loop_fs)
    b1 = cluster.brokers[0]
    ids1 = b1.dir_ids()
    replicas = [1, 2, 3] if role == "leader" else [2, 1, 3]
    cluster.create_topic("sw", {p: replicas for p in range(6)})
    im = cluster.wait_image(lambda im: "sw" in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[p.replicas.index(1)] in ids1.values()
        for p in im.partitions_of(im.topic_ids["sw"]).values()), 20, "sw placed")
    tid = im.topic_ids["sw"]
    in_loop = [p for p in range(6) if dir_of(im, "sw", p, 1) == ids1[loop_fs.mnt]]
    assert len(in_loop) == 2, in_loop           # least-loaded placement: two per dir
    victim, bystander = in_loop
    target = next(p for p in b1.dirs if p != loop_fs.mnt)
    first = produce_then_stop(cluster, "sw", 6)
    with controller_held(cluster):  # nothing reads or writes the source dir until the swap
        move_then_fail(b1, "sw", victim, target, loop_fs)
    wait_until(lambda: count_events(b1, "dir_move_done", topic="sw", partition=victim) == 1, 20,
               "the swap landed")
    wait_until(lambda: count_events(b1, "dir_offline") == 1, 10, "the source dir offline")
    offline = next(e for e in b1.events() if e["event"] == "dir_offline")
    assert offline["op"] == "delete_log" and offline["path"] == loop_fs.mnt, offline
    assert count_events(b1, "dir_move_cancelled") == 0
    assert count_events(b1, "storage_effect_failed") == 0

    loop_id = ids1[loop_fs.mnt]
    settled = cluster.wait_image(lambda im: loop_id not in im.brokers[1].log_dirs
                                 and 1 not in im.partition(tid, bystander).isr, 30,
                                 "the source dir dropped, its other replica out of the ISR")
    assert dir_of(settled, "sw", victim, 1) == ids1[target]
    # the moved replica serves on: acks=all through it (min.insync.replicas 2 of its ISR)
    second = serves_on(cluster, "sw", 6, victim, "the moved partition serves")
    final = cluster.image()
    reg = final.partition(tid, victim)
    assert sorted(reg.isr) == [1, 2, 3], reg
    assert reg.leader == replicas[0]
    # the dead fs may still list the old log (its delete failed): what counts is the live dirs
    assert [h for h in holders(b1, "sw", victim) if not h.startswith(loop_fs.mnt)] == \
        [os.path.join(target, f"sw-{victim}")]
    expected = first | second
    assert not expected - consume_all(cluster.bootstrap, "sw", 6, expected)
    assert b1.alive()


def test_target_dir_fails_as_the_swap_flushes_the_future_log(tmp_path, request, loop_fs):
    cluster = quiet_cluster(tmp_path, request, loop_fs)
    b1 = cluster.brokers[0]
    ids1 = b1.dir_ids()
    cluster.create_topic("tw", {p: [1, 2, 3] for p in range(3)})
    im = cluster.wait_image(lambda im: "tw" in im.topic_ids and all(
        len(p.isr) == 3 and p.directories[0] in ids1.values()
        for p in im.partitions_of(im.topic_ids["tw"]).values()), 20, "tw placed")
    tid = im.topic_ids["tw"]
    [bystander] = [p for p in range(3) if dir_of(im, "tw", p, 1) == ids1[loop_fs.mnt]]
    victim = next(p for p in range(3) if p != bystander)
    source = next(path for path, i in ids1.items() if i == dir_of(im, "tw", victim, 1))
    first = produce_then_stop(cluster, "tw", 3)
    with controller_held(cluster):  # the future log, caught up, is not written again until the swap
        move_then_fail(b1, "tw", victim, loop_fs.mnt, loop_fs)
    wait_until(lambda: count_events(b1, "dir_move_cancelled", topic="tw", partition=victim,
                                    reason="swap failed") == 1, 20, "the swap failed")
    wait_until(lambda: count_events(b1, "dir_offline") == 1, 10, "the target dir offline")
    offline = next(e for e in b1.events() if e["event"] == "dir_offline")
    assert offline["path"] == loop_fs.mnt and offline["op"] == "fsync", offline
    assert count_events(b1, "dir_move_done") == 0

    loop_id = ids1[loop_fs.mnt]
    settled = cluster.wait_image(lambda im: loop_id not in im.brokers[1].log_dirs
                                 and 1 not in im.partition(tid, bystander).isr
                                 and dir_of(im, "tw", victim, 1) == ids1[source], 30,
                                 "the target dir dropped, the assignment back at the source")
    assert 1 in settled.partition(tid, victim).isr
    second = serves_on(cluster, "tw", 3, victim, "the partition serves from its source")
    # the controller may take the dir failure while its assignment still names the target and
    # move the leadership away (as Kafka's would: the heartbeat with the offline dir goes out
    # before the swap's revert); the revert brings broker 1 back into the ISR
    reg = cluster.image().partition(tid, victim)
    assert sorted(reg.isr) == [1, 2, 3], reg
    assert [h for h in holders(b1, "tw", victim) if not h.startswith(loop_fs.mnt)] == \
        [os.path.join(source, f"tw-{victim}")]
    expected = first | second
    assert not expected - consume_all(cluster.bootstrap, "tw", 3, expected)
    assert b1.alive()
