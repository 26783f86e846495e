"""The group coordinator across a log-dir failure (real EIO): 1 kraft-controller + 3
kraft-brokers; broker 1's data dir 0 is ext4 on a loop device. ``__consumer_offsets`` (3
partitions, replicas 1,2,3, led by broker 1) gets one partition in each of broker 1's dirs;
a group whose partition lives in the loop dir commits, then the dir fails
(``EXT4_IOC_SHUTDOWN``). Broker 1 stops coordinating the group at once (its partition is
offline there), the controller moves the partition's leadership, the new leader loads it
from its replica and answers for the group: every committed offset is there, the consumer
rejoins and commits again."""

from __future__ import annotations

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

from loopdev import loop_fs_64mb as loop_fs, loop_fs_factory  # noqa: E402,F401  (fixtures)
from testkit.cluster import running_cluster, wait_until  # noqa: E402
from broker_impl.groups.state.records import partition_for  # noqa: E402
from tests.groups.test_groups_clients import committed_kafka_python, drain, kp_consumer, produce  # noqa: E402

pytestmark = pytest.mark.integration
OFFSETS = "__consumer_offsets"


@pytest.fixture
def cluster(tmp_path, loop_fs):
    # torn down before the loop fs is unmounted (it depends on loop_fs)
    with running_cluster(tmp_path, data_dir=loop_fs.mnt,
                         broker_extra={"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
                                       "group.initial.rebalance.delay.ms": "0"}) as c:
        yield c


def test_coordinator_moves_when_its_offsets_dir_fails(cluster, loop_fs):
    b1 = cluster.brokers[0]
    failing_dir = b1.dir_ids()[loop_fs.mnt]
    # created ahead of the first group request (as an operator may): broker 1 leads every partition
    cluster.create_topic(OFFSETS, {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    im = cluster.wait_image(lambda im: OFFSETS in im.topic_ids and all(
        p.leader == 1 and len(p.isr) == 3 and p.directories[0] in b1.dir_ids().values()
        for p in im.partitions_of(im.topic_ids[OFFSETS]).values()), 20, "offsets topic placed, ISR 3")
    tid = im.topic_ids[OFFSETS]
    (victim,) = [pid for pid, p in im.partitions_of(tid).items() if p.directories[0] == failing_dir]
    group = next(f"dirfail-{i}" for i in range(1000) if partition_for(f"dirfail-{i}", 3) == victim)
    topic = "dirfail-data"
    cluster.create_topic(topic, {0: [2, 3, 1], 1: [3, 1, 2]})     # data led elsewhere: only the coordinator moves
    cluster.wait_image(lambda im: topic in im.topic_ids and all(
        len(p.isr) == 3 for p in im.partitions_of(im.topic_ids[topic]).values()), 20, "data topic ISR 3")
    produce(cluster, topic, [f"d{i}".encode() for i in range(40)], 2)
    c = kp_consumer(cluster, group, topic)
    assert len(drain(c, 40)) == 40
    c.commit()
    c.close()
    assert committed_kafka_python(cluster, group, topic, 2) == {0: 20, 1: 20}

    failed_at = time.monotonic()
    loop_fs.shutdown()                                   # EIO on broker 1's dir holding the group's partition
    wait_until(lambda: any(e["event"] == "dir_offline" for e in b1.events()), 30, "broker 1 sees the dir fail")
    moved = cluster.wait_image(lambda im: im.partition(tid, victim).leader in (2, 3), 30,
                               "the offsets partition's leadership moved")
    new_leader = moved.partition(tid, victim).leader
    assert committed_kafka_python(cluster, group, topic, 2) == {0: 20, 1: 20}   # loaded from the replica
    failover_s = time.monotonic() - failed_at
    assert b1.alive(), "broker 1 keeps running with its other dirs"

    produce(cluster, topic, [f"e{i}".encode() for i in range(10)], 2)
    c = kp_consumer(cluster, group, topic)
    got = drain(c, 10)
    assert sorted(m.value for m in got) == sorted(f"e{i}".encode() for i in range(10))   # resumed at 20
    c.commit()
    c.close()
    assert committed_kafka_python(cluster, group, topic, 2) == {0: 25, 1: 25}
    print(f"coordinator of {group} moved 1 → {new_leader}; offsets readable {failover_s:.2f} s after the EIO")
