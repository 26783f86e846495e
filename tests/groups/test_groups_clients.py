"""Consumer groups with real clients against 1 kraft-controller + 3 kraft-brokers (real
processes on loopback): kafka-python, confluent-kafka (librdkafka 2.16) and kcat -G
(librdkafka 2.0.2) subscribe, consume and commit; two members split the partitions and one
takes over when the other leaves; a static member rejoins without a rebalance; the admin
APIs list, describe and delete groups; committed offsets survive the coordinator's death
(its ``__consumer_offsets`` partition moves to another broker, which loads it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

from testkit.cluster import running_cluster, wait_until  # noqa: E402
from tests.dataplane.clients import KCAT  # noqa: E402

pytestmark = pytest.mark.integration

GROUP_KEYS = {"offsets.topic.num.partitions": "5", "offsets.topic.replication.factor": "3",
              "group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("groups"), broker_extra=GROUP_KEYS) as c:
        yield c


def make_topic(cluster, name: str, partitions: int) -> None:
    cluster.create_topic(name, {p: [1 + (p + i) % 3 for i in range(3)] for p in range(partitions)})
    cluster.wait_image(lambda im: name in im.topic_ids and all(
        len(im.partition(im.topic_ids[name], p).isr) == 3 for p in range(partitions)), 20, f"{name} ISR 3")


def produce(cluster, topic: str, values: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def committed_kafka_python(cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets through kafka-python's admin (OffsetFetch v8+: groups form)."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        offsets = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}


def confluent_admin(cluster):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def kp_consumer(cluster, group: str, topic: str | None = None, **kw):
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                      request_timeout_ms=30000, **kw)
    if topic is not None:
        c.subscribe([topic])
    return c


def drain(consumer, want: int, timeout_s: float = 40) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for msgs in consumer.poll(500).values():
            got += msgs
    return got


def produce_and_consume(cluster, group: str, topic: str, prefix: str, n: int):
    """Produce ``prefix0`` … ``prefix<n-1>`` over the 3 partitions; a new kafka-python member
    of ``group`` must consume exactly those (nothing older). Returns it, still open."""
    values = [f"{prefix}{i}".encode() for i in range(n)]
    produce(cluster, topic, values, 3)
    c = kp_consumer(cluster, group, topic)
    got = drain(c, n)
    assert sorted(m.value for m in got) == sorted(values)
    return c


def test_kafka_python_group_consumes_commits_and_resumes(cluster):
    topic, group = "kp-group", "kp-g"
    make_topic(cluster, topic, 3)
    c = produce_and_consume(cluster, group, topic, "a", 60)
    c.commit()
    c.close()
    assert committed_kafka_python(cluster, group, topic, 3) == {0: 20, 1: 20, 2: 20}
    c = produce_and_consume(cluster, group, topic, "b", 30)   # resumed, nothing old
    c.close()


def test_confluent_group_commit_and_committed(cluster):
    from confluent_kafka import Consumer, TopicPartition
    topic, group = "ck-group", "ck-g"
    make_topic(cluster, topic, 2)
    produce(cluster, topic, [f"c{i}".encode() for i in range(40)], 2)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 40
    while len(got) < 40 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert sorted(got) == sorted(f"c{i}".encode() for i in range(40))
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 20), (1, 20)]
    c.close()


@pytest.mark.skipif(KCAT is None, reason="kcat (/usr/bin/kcat) not installed")
def test_kcat_balanced_consumer_commits(cluster):
    topic, group = "kcat-group", "kcat-g"
    make_topic(cluster, topic, 1)
    produce(cluster, topic, [f"k{i}".encode() for i in range(25)], 1)
    out = subprocess.run([KCAT, "-b", cluster.bootstrap, "-G", group, "-o", "beginning", "-c", "25",
                          "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic],
                         capture_output=True, timeout=90)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert sorted(out.stdout.split()) == sorted(f"k{i}".encode() for i in range(25))
    # kcat commits as it goes and on close (librdkafka's auto commit + final commit)
    wait_until(lambda: committed_kafka_python(cluster, group, topic, 1) == {0: 25}, 30, "kcat's committed offset")


def test_two_members_split_partitions_and_one_takes_over(cluster):
    topic, group = "two-members", "two-g"
    make_topic(cluster, topic, 4)
    a = kp_consumer(cluster, group, topic)
    b = kp_consumer(cluster, group, topic)
    stop = threading.Event()

    def poll_b():
        while not stop.is_set():
            b.poll(200)
    t = threading.Thread(target=poll_b, daemon=True)
    t.start()
    try:
        def split() -> bool:
            a.poll(200)
            pa, pb = {p.partition for p in a.assignment()}, {p.partition for p in b.assignment()}
            return len(pa) == 2 and len(pb) == 2 and pa | pb == {0, 1, 2, 3}
        wait_until(split, 60, "two members with two partitions each")
    finally:
        stop.set()
        t.join(10)
    b.close()                                  # LeaveGroup: a rebalances to all four
    wait_until(lambda: (a.poll(200), {p.partition for p in a.assignment()})[1] == {0, 1, 2, 3}, 60,
               "the remaining member owns every partition")
    a.close()


def describe(cluster, group: str):
    admin = confluent_admin(cluster)   # kept alive until the answer is in (else: _DESTROY)
    return admin.describe_consumer_groups([group])[group].result(30)


def test_static_member_rejoins_without_rebalance(cluster):
    from confluent_kafka import Consumer
    topic, group = "static-t", "static-g"
    make_topic(cluster, topic, 2)

    def member():
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.instance.id": "inst-1",
                      "session.timeout.ms": 10000, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        wait_until(lambda: (c.poll(0.2), len(c.assignment()))[1] == 2, 60, "static member assigned")
        return c
    first = member()
    before = describe(cluster, group)
    assert before.state.name == "STABLE" and [m.group_instance_id for m in before.members] == ["inst-1"]
    first.close()                          # a static member does not leave the group on close
    still = describe(cluster, group)
    assert still.state.name == "STABLE" and [m.member_id for m in still.members] == [before.members[0].member_id]
    second = member()
    after = describe(cluster, group)
    assert after.state.name == "STABLE" and after.members[0].member_id != before.members[0].member_id
    assert after.members[0].group_instance_id == "inst-1"
    second.close()


def test_admin_list_describe_delete_groups(cluster):
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata
    topic, group = "admin-t", "admin-g"
    make_topic(cluster, topic, 1)
    produce(cluster, topic, [b"x"] * 5, 1)
    c = kp_consumer(cluster, group, topic)
    assert len(drain(c, 5)) == 5
    c.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, "meta", -1)})
    admin = confluent_admin(cluster)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        listed = admin.list_consumer_groups().result(30)
        assert group in {g.group_id for g in listed.valid} and not listed.errors
        assert group in {g["group_id"] for g in kp.list_groups()}
        d = describe(cluster, group)
        assert d.state.name == "STABLE" and len(d.members) == 1 and d.coordinator.id in (1, 2, 3)
        assert kp.describe_groups([group])[group]["group_state"] == "Stable"
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
        assert [(tp.topic, tp.partition, tp.offset) for tp in got.topic_partitions] == [(topic, 0, 5)]
        fetched = kp.list_group_offsets({group: None})[group][TopicPartition(topic, 0)]
        assert (fetched.offset, fetched.metadata) == (5, "meta")
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups([group])[group].result(30)
        c.close()
        wait_until(lambda: describe(cluster, group).state.name == "EMPTY", 30, "group empty")
        admin.delete_consumer_groups([group])[group].result(30)
        assert kp.list_group_offsets({group: None})[group] == {}
        assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    finally:
        kp.close()


ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NODE_TOOLS = os.path.join(ROOT, "tools", "node")


def test_kafkajs_group_consumes_commits_and_describes(cluster):
    """A client outside Python and librdkafka: KafkaJS (Node.js, installed by
    scripts/bootstrap.sh) consumes in a group, commits, describes the group, fetches the
    offsets (and describes the topic's configs when the broker serves DescribeConfigs)."""
    from broker_impl.api.request_table import REQUESTS
    from kafka_common.wire import ApiKey
    node = shutil.which("node")
    assert node is not None, "node not installed: run scripts/bootstrap.sh as root"
    assert os.path.isdir(os.path.join(NODE_TOOLS, "node_modules", "kafkajs")), "run scripts/bootstrap.sh (npm ci)"
    topic, group = "kafkajs-t", "kafkajs-g"
    make_topic(cluster, topic, 3)
    produce(cluster, topic, [f"j{i}".encode() for i in range(30)], 3)
    describe_configs = ApiKey.DESCRIBE_CONFIGS in REQUESTS
    out = subprocess.run([node, os.path.join(NODE_TOOLS, "group_consume.js"), cluster.bootstrap, topic, group, "30",
                          *(["--describe-configs"] if describe_configs else [])],
                         capture_output=True, timeout=120, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(res["values"]) == sorted(f"j{i}" for i in range(30))
    assert res["group"] == {"state": "Stable", "protocolType": "consumer", "protocol": "RoundRobinAssigner",
                            "members": ["jbodlab-kafkajs"]}
    assert res["offsets"] == [[0, 10], [1, 10], [2, 10]] and res["stateAfterLeave"] == "Empty"
    assert committed_kafka_python(cluster, group, topic, 3) == {0: 10, 1: 10, 2: 10}
    if describe_configs:
        assert "retention.ms" in res["configs"] and "min.insync.replicas" in res["configs"]


def coordinator_of(cluster, group: str) -> int:
    return describe(cluster, group).coordinator.id


def test_committed_offsets_survive_coordinator_kill(cluster):
    """Last: it kills a broker. The group's offsets partition (RF 3) gets a new leader,
    which loads it from its replica; the commits made before are all there."""
    topic, group = "failover-t", "failover-g"
    make_topic(cluster, topic, 3)
    produce(cluster, topic, [f"f{i}".encode() for i in range(30)], 3)
    c = kp_consumer(cluster, group, topic)
    assert len(drain(c, 30)) == 30
    c.commit()
    c.close()
    assert committed_kafka_python(cluster, group, topic, 3) == {0: 10, 1: 10, 2: 10}
    old = coordinator_of(cluster, group)
    victim = next(b for b in cluster.brokers if b.node_id == old)
    victim.kill()
    survivors = [b for b in cluster.brokers if b is not victim]
    saved = cluster.brokers
    cluster.brokers = survivors                  # bootstrap and liveness checks: the living ones
    try:
        wait_until(lambda: coordinator_of(cluster, group) != old, 60, "a new coordinator")
        assert committed_kafka_python(cluster, group, topic, 3) == {0: 10, 1: 10, 2: 10}
        c = produce_and_consume(cluster, group, topic, "g", 9)
        c.commit()
        c.close()
        assert committed_kafka_python(cluster, group, topic, 3) == {0: 13, 1: 13, 2: 13}
    finally:
        cluster.brokers = saved
