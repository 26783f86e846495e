"""The operator's tools around a disk failure (issue 37) with real clients against real
processes on loopback (1 kraft-controller + 4 kraft-brokers × 3 dirs):

- kafka-python's KafkaAdminClient moves a partition to another broker under acks=all load
  (AlterPartitionReassignments): the new replica joins the ISR, then the old one leaves and
  its log is deleted; nothing acked is lost; ListPartitionReassignments shows nothing left;
  bad requests get their errors;
- KafkaJS's admin client does the same (alterPartitionReassignments,
  listPartitionReassignments);
- confluent-kafka's AdminClient.elect_leaders: PREFERRED brings leadership back to a
  restarted broker (auto rebalance off), UNCLEAN elects a live replica outside the ISR when
  no ISR member is alive;
- the controller's auto rebalance does the PREFERRED election by itself
  (``leader.imbalance.check.interval.seconds``);
- the target's dir fails mid-move (a real ext4 on a loop device, shut down): the move stays
  pending, the original replicas serve, nothing acked is lost, cancel reverts; the target
  broker's other dirs are cordoned (KIP-1066: the new replica can only land on the failing
  dir, and DescribeLogDirs v5 says which are cordoned).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess

import pytest

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: F401  (fixtures)
from testkit.cluster import BackgroundProducer, Cluster, consume_all, running_cluster, wait_until
from testkit.protocol import RawConnection

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_TOOLS = os.path.join(ROOT, "tools", "node")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("ops"), n_brokers=4,
                         controller_extra={"auto.leader.rebalance.enable": "false"}) as c:
        yield c


def part(cluster, topic: str, pid: int = 0):
    im = cluster.image()
    return im.partition(im.topic_ids[topic], pid)


def settled(cluster, topic: str, assignment: dict[int, list[int]]) -> None:
    cluster.create_topic(topic, assignment)
    cluster.wait_image(lambda im: topic in im.topic_ids and all(
        len(im.partition(im.topic_ids[topic], p).isr) == len(rs) for p, rs in assignment.items()), 30,
        f"{topic} in sync")


def holds_log(broker, topic: str, pid: int = 0) -> bool:
    return any(os.path.isdir(os.path.join(d, f"{topic}-{pid}")) for d in broker.dirs)


def moved(cluster, topic: str, target: tuple[int, ...], pid: int = 0) -> None:
    cluster.wait_image(lambda im: (lambda p: p.replicas == target and not p.adding_replicas
                                   and not p.removing_replicas and set(p.isr) == set(target))(
        im.partition(im.topic_ids[topic], pid)), 60, f"{topic}-{pid} moved to {target}")


def kp_admin(cluster):
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)


def test_kafka_python_moves_a_partition_to_another_broker_under_load(cluster):
    from kafka import TopicPartition
    settled(cluster, "mv-kp", {0: [1, 2, 3]})
    prod = BackgroundProducer(cluster.bootstrap, "mv-kp", 1)
    prod.thread.start()
    admin = kp_admin(cluster)
    try:
        wait_until(lambda: len(prod.acked) > 300, 30, "load running")
        admin.alter_partition_reassignments({TopicPartition("mv-kp", 0): [4, 2, 3]})
        moved(cluster, "mv-kp", (4, 2, 3))
        assert admin.list_partition_reassignments() == {}
        b1, b4 = cluster.brokers[0], cluster.brokers[3]
        wait_until(lambda: not holds_log(b1, "mv-kp"), 30, "broker 1 deleted its log")
        assert holds_log(b4, "mv-kp")
        n = len(prod.acked)
        wait_until(lambda: len(prod.acked) > n + 200, 30, "load goes on after the move")
    finally:
        prod.finish()
        admin.close()
    assert not prod.errors, prod.errors[:3]
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(cluster.bootstrap, "mv-kp", 1, expected)


def test_kafka_python_errors_of_bad_reassignments(cluster):
    from kafka import TopicPartition
    settled(cluster, "mv-bad", {0: [1, 2]})
    admin = kp_admin(cluster)
    try:
        results = {}
        for name, target in (("cancel-none", None), ("unknown-broker", [1, 9]), ("twice", [2, 2])):
            try:
                got = admin.alter_partition_reassignments({TopicPartition("mv-bad", 0): target})
                results[name] = got[TopicPartition("mv-bad", 0)].__name__   # the partition's error class
            except Exception as exc:
                results[name] = type(exc).__name__ + ": " + str(exc)
        assert results == {"cancel-none": "NoReassignmentInProgressError",
                           "unknown-broker": "InvalidReplicationAssignmentError",   # kafka-python's name for 39
                           "twice": "InvalidReplicationAssignmentError"}, results
    finally:
        admin.close()
    assert part(cluster, "mv-bad").replicas == (1, 2)


def test_kafkajs_moves_a_partition(cluster):
    node = shutil.which("node")
    assert node is not None, "node not installed: run scripts/bootstrap.sh as root"
    assert os.path.isdir(os.path.join(NODE_TOOLS, "node_modules", "kafkajs")), "run scripts/bootstrap.sh (npm ci)"
    settled(cluster, "mv-js", {0: [1, 2, 3]})
    out = subprocess.run([node, os.path.join(NODE_TOOLS, "reassign.js"), cluster.bootstrap, "mv-js", "0=2,3,4"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["after"] == [], got
    moved(cluster, "mv-js", (2, 3, 4))


def test_confluent_elect_leaders_preferred_then_unclean(cluster):
    from confluent_kafka import TopicPartition
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    b1, b2, b3, _b4 = cluster.brokers
    settled(cluster, "el", {0: [1, 2, 3]})
    b1.stop()
    cluster.wait_image(lambda im: im.partition(im.topic_ids["el"], 0).leader in (2, 3), 30, "leader moved")
    b1.start()
    cluster.wait_image(lambda im: 1 in im.partition(im.topic_ids["el"], 0).isr, 60, "broker 1 back in the ISR")
    assert part(cluster, "el").leader != 1           # auto rebalance is off here
    res = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("el", 0)]).result(30)
    assert all(err is None for err in res.values()), res
    cluster.wait_image(lambda im: im.partition(im.topic_ids["el"], 0).leader == 1, 20, "preferred leader back")
    res = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("el", 0)]).result(30)
    assert [e.name() for e in res.values()] == ["ELECTION_NOT_NEEDED"], res

    settled(cluster, "uc", {0: [2, 3]})
    b3.stop()
    cluster.wait_image(lambda im: im.partition(im.topic_ids["uc"], 0).isr == (2,), 30, "ISR [2]")
    b2.stop()
    cluster.wait_image(lambda im: im.partition(im.topic_ids["uc"], 0).leader == -1, 30, "leaderless")
    b3.start()
    cluster.wait_image(lambda im: not im.brokers[3].fenced, 60, "broker 3 unfenced")
    res = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("uc", 0)]).result(30)
    assert [e.name() for e in res.values()] == ["PREFERRED_LEADER_NOT_AVAILABLE"], res
    res = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("uc", 0)]).result(30)
    assert all(err is None for err in res.values()), res
    cluster.wait_image(lambda im: (lambda p: p.leader == 3 and p.isr == (3,))(im.partition(im.topic_ids["uc"], 0)),
                       20, "unclean leader 3")
    b2.start()
    cluster.wait_image(lambda im: set(im.partition(im.topic_ids["uc"], 0).isr) == {2, 3}, 60, "broker 2 rejoined")


def test_auto_rebalance_returns_leadership(tmp_path):
    with running_cluster(tmp_path, n_brokers=3,
                         controller_extra={"leader.imbalance.check.interval.seconds": "2"}) as c:
        settled(c, "ar", {0: [1, 2, 3], 1: [1, 3, 2]})
        b1 = c.brokers[0]
        b1.stop()
        c.wait_image(lambda im: all(im.partition(im.topic_ids["ar"], p).leader != 1 for p in (0, 1)), 30,
                     "leaders moved")
        b1.start()
        c.wait_image(lambda im: all(im.partition(im.topic_ids["ar"], p).leader == 1 for p in (0, 1)), 60,
                     "the controller moved them back")
        events = [e for e in c.ctrl.events() if e["event"] == "leader_rebalance"]
        assert events and sum(e["moved"] for e in events) >= 2, events


async def _reassign_raw(port: int, topic: str, replicas: tuple[int, ...]):
    """AlterPartitionReassignments v1 over a plain connection to one broker (the admin clients
    may pick the stopped broker as their "controller")."""
    from datetime import timedelta
    from kio.schema.alter_partition_reassignments.v1 import request as apr
    conn = await RawConnection.open(port)
    try:
        resp = await conn.call(apr.AlterPartitionReassignmentsRequest(
            timeout=timedelta(seconds=30), allow_replication_factor_change=True, topics=(apr.ReassignableTopic(
                name=topic, partitions=(apr.ReassignablePartition(partition_index=0, replicas=replicas),)),)))
        return resp.responses[0].partitions[0].error_code
    finally:
        await conn.close()


async def _describe_log_dirs_v5(port: int):
    from kio.schema.describe_log_dirs.v5.request import DescribeLogDirsRequest
    from broker_impl.api.log_dirs import DescribeLogDirsResponseV5
    conn = await RawConnection.open(port)
    try:
        return await conn.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponseV5)
    finally:
        await conn.close()


def test_target_dir_fails_mid_move(tmp_path, request, loop_fs):
    """KAFKA-16297's window across brokers: the controller accepted the move, the target's
    dir fails before the target joined the ISR."""
    from kafka import TopicPartition
    c = Cluster(tmp_path, n_brokers=4, session_timeout_ms=9000)
    request.addfinalizer(c.kill)
    b4 = c.brokers[3]
    b4.dir_override = {0: loop_fs.mnt}
    b4.extra["cordoned.log.dirs"] = ",".join(b4.dirs[1:])      # only the loop fs takes new replicas
    # the new replica's creation is the first I/O to meet the failed dir: a probe or a checkpoint
    # meeting it first (right after SIGCONT) would leave only cordoned dirs online, and a broker
    # whose online dirs are all cordoned places the new replica there, so the move would complete
    b4.extra["log.dir.probe.interval.ms"] = "600000"
    b4.extra["replica.high.watermark.checkpoint.interval.ms"] = "600000"
    c.prepare()
    c.start()
    dirs = asyncio.run(_describe_log_dirs_v5(b4.port))
    assert {r.log_dir: r.is_cordoned for r in dirs.results} == {
        b4.dirs[0]: False, b4.dirs[1]: True, b4.dirs[2]: True}
    settled(c, "mid", {0: [1, 2, 3]})
    prod = BackgroundProducer(c.bootstrap, "mid", 1)
    prod.thread.start()
    admin = kp_admin(c)
    try:
        wait_until(lambda: len(prod.acked) > 300, 30, "load running")
        os.kill(b4.proc.pid, signal.SIGSTOP)        # the move is accepted while broker 4 cannot act
        try:
            assert asyncio.run(_reassign_raw(c.brokers[0].port, "mid", (4, 2, 3))).value == 0
            c.wait_image(lambda im: im.partition(im.topic_ids["mid"], 0).adding_replicas == (4,), 10,
                         "move accepted")
            loop_fs.shutdown()
        finally:
            os.kill(b4.proc.pid, signal.SIGCONT)
        c.wait_image(lambda im: im.brokers[4].log_dirs and len(im.brokers[4].log_dirs) == 2, 40,
                     "broker 4 reported the dir offline")
        n = len(prod.acked)
        wait_until(lambda: len(prod.acked) > n + 300, 30, "load goes on")
        p = part(c, "mid")
        assert p.adding_replicas == (4,) and 4 not in p.isr and p.leader in (1, 2, 3), p
        listed = admin.list_partition_reassignments()
        assert TopicPartition("mid", 0) in listed, listed
        admin.alter_partition_reassignments({TopicPartition("mid", 0): None})     # cancel
        c.wait_image(lambda im: (lambda q: set(q.replicas) == {1, 2, 3} and not q.adding_replicas)(
            im.partition(im.topic_ids["mid"], 0)), 20, "cancelled: the original replicas")
        assert b4.alive()
    finally:
        prod.finish()
        admin.close()
    assert not prod.errors, prod.errors[:3]
    expected = {(p, v) for p, v, _t in prod.acked}
    assert not expected - consume_all(c.bootstrap, "mid", 1, expected)
