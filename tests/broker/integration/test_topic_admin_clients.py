"""DeleteTopics and CreatePartitions through every admin client of the suite that offers them
— confluent-kafka's AdminClient (librdkafka 2.16), kafka-python's KafkaAdminClient, KafkaJS
(tools/node) — against 1 kraft-controller + 3 kraft-brokers × 3 data dirs (real processes):

- create_partitions grows a topic: the new partitions are placed over the brokers, each
  replica's metadata dir becomes the real dir holding its log (UNASSIGNED → the broker's
  AssignReplicasToDirs), and they take records; not-an-increase and an unknown topic are
  refused with Kafka's codes, validate_only changes nothing;
- delete_topics removes the topic from the metadata and every replica's log from the disks
  (renamed ``-delete``, then removed: both seen in the brokers' events), after which a topic
  of the same name is a new one (new id, empty); an unknown topic is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from kafka_common.ids import UNASSIGNED
from testkit.cluster import check_real_dirs, running_cluster, wait_until

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NODE_TOOLS = os.path.join(ROOT, "tools", "node")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("topic-admin")) as c:
        yield c


def admin(cluster):
    from confluent_kafka.admin import AdminClient
    if getattr(cluster, "admin_client", None) is None:
        cluster.admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return cluster.admin_client


def create(cluster, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic
    admin(cluster).create_topics([NewTopic(name, partitions, 3)], request_timeout=30)[name].result(30)
    settled(cluster, name, partitions)


def settled(cluster, name: str, partitions: int):
    im = cluster.wait_image(lambda im: name in im.topic_ids and len(im.partitions_of(im.topic_ids[name])) == partitions
                            and all(UNASSIGNED not in p.directories and len(p.isr) == 3
                                    for p in im.partitions_of(im.topic_ids[name]).values()),
                            30, f"{name}: {partitions} partitions, dirs assigned, ISR 3")
    check_real_dirs(im, cluster.brokers, name)
    return im


def produce(cluster, name: str, partitions: range, per_partition: int = 5) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    errors = []
    for part in partitions:
        for i in range(per_partition):
            p.produce(name, f"{name}-{part}-{i}".encode(), partition=part,
                      on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors


def high_watermarks(cluster, name: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw"})
    try:
        return [c.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def logs_on_disk(cluster, name: str) -> list[str]:
    """Every dir of a partition of ``name`` (live or ``-delete``) on any broker's data dirs."""
    out = []
    for b in cluster.brokers:
        for d in b.dirs:
            out += [os.path.join(d, n) for n in os.listdir(d) if n.rsplit("-", 1)[0] == name
                    or (n.startswith(name + "-") and n.endswith("-delete"))]
    return out


def assert_deleted_everywhere(cluster, name: str, partitions: int, tid) -> None:
    cluster.wait_image(lambda im: name not in im.topic_ids and tid not in im.topics, 20, f"{name} gone from metadata")
    wait_until(lambda: not logs_on_disk(cluster, name), 20, f"every log of {name} removed from the disks")
    for b in cluster.brokers:
        evs = [e for e in b.events() if e.get("topic") == name]
        deleted = sorted(e["partition"] for e in evs if e["event"] == "log_deleted" and not e["stray"])
        removed = sorted(e["partition"] for e in evs if e["event"] == "log_removed")
        assert deleted == removed == list(range(partitions)), (b.node_id, deleted, removed)
        assert all(e["path"].endswith("-delete") for e in evs if e["event"] in ("log_deleted", "log_removed"))


def test_confluent_kafka_create_partitions_and_delete_topics(cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions
    a = admin(cluster)
    create(cluster, "ck", 2)
    produce(cluster, "ck", range(2))
    a.create_partitions([NewPartitions("ck", 6)], validate_only=True, request_timeout=30)["ck"].result(30)
    assert len(cluster.image().partitions_of(cluster.image().topic_ids["ck"])) == 2   # validate_only: nothing
    a.create_partitions([NewPartitions("ck", 5)], request_timeout=30)["ck"].result(30)
    im = settled(cluster, "ck", 5)
    leaders = {p.leader for p in im.partitions_of(im.topic_ids["ck"]).values()}
    assert leaders == {1, 2, 3}
    produce(cluster, "ck", range(5))
    assert high_watermarks(cluster, "ck", 5) == [10, 10, 5, 5, 5]
    for bad, code in ((NewPartitions("ck", 5), "INVALID_PARTITIONS"), (NewPartitions("ck", 3), "INVALID_PARTITIONS"),
                      (NewPartitions("ck-none", 3), "UNKNOWN_TOPIC_OR_PART")):
        with pytest.raises(KafkaException) as err:
            a.create_partitions([bad], request_timeout=30)[bad.topic].result(30)
        assert err.value.args[0].name() == code, err.value
    tid = cluster.image().topic_ids["ck"]
    a.delete_topics(["ck"], request_timeout=30)["ck"].result(30)
    assert_deleted_everywhere(cluster, "ck", 5, tid)
    with pytest.raises(KafkaException) as err:
        a.delete_topics(["ck"], request_timeout=30)["ck"].result(30)
    assert err.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    create(cluster, "ck", 2)                        # the same name again: a new topic, empty
    assert cluster.image().topic_ids["ck"] != tid and high_watermarks(cluster, "ck", 2) == [0, 0]


def test_kafka_python_create_partitions_and_delete_topics(cluster):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        a.create_topics([NewTopic("kp", 1, 3)])
        settled(cluster, "kp", 1)
        a.create_partitions({"kp": 3})
        settled(cluster, "kp", 3)
        a.create_partitions({"kp": {"count": 4, "assignments": [[3, 1, 2]]}})
        im = settled(cluster, "kp", 4)
        assert im.partition(im.topic_ids["kp"], 3).replicas == (3, 1, 2)
        produce(cluster, "kp", range(4))
        with pytest.raises(InvalidPartitionsError):
            a.create_partitions({"kp": 2})
        tid = im.topic_ids["kp"]
        out = a.delete_topics(["kp"])
        assert [(t["name"], t["error_code"]) for t in out["topics"]] == [("kp", 0)]
        assert_deleted_everywhere(cluster, "kp", 4, tid)
        with pytest.raises(UnknownTopicOrPartitionError):
            a.delete_topics(["kp"])
        a.create_topics([NewTopic("kp-id", 1, 3)])
        tid = settled(cluster, "kp-id", 1).topic_ids["kp-id"]
        out = a.delete_topics([tid])                 # by topic id (DeleteTopics v6)
        assert [(t["name"], t["error_code"]) for t in out["topics"]] == [("kp-id", 0)]
        assert_deleted_everywhere(cluster, "kp-id", 1, tid)
    finally:
        a.close()


def test_kafkajs_create_partitions_and_delete_topics(cluster):
    node = shutil.which("node")
    assert node is not None, "node not installed: run scripts/bootstrap.sh as root"
    assert os.path.isdir(os.path.join(NODE_TOOLS, "node_modules", "kafkajs")), "run scripts/bootstrap.sh (npm ci)"
    t0 = time.monotonic()
    out = subprocess.run([node, os.path.join(NODE_TOOLS, "topic_admin.js"), cluster.bootstrap, "js", "2", "4"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["created"] is True and got["grown"] == 4 and got["highs"] == [[0, 1], [1, 1], [2, 1], [3, 1]]
    assert got["notAnIncrease"] == "INVALID_PARTITIONS" and got["unknown"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert got["stillListed"] is False
    wait_until(lambda: not logs_on_disk(cluster, "js"), 20, "every log of js removed from the disks")
    assert time.monotonic() - t0 < 180


def test_delete_topics_v0_forwarded_to_the_controller(cluster):
    """DeleteTopics v0 (Kafka 3.9's floor; its schema from kafka_common.legacy_schemas, kio
    has v1–6) through a broker to the controller process and back."""
    import asyncio
    from datetime import timedelta

    from kafka_common import wire
    from testkit.protocol import RawConnection
    create(cluster, "v0", 1)
    tid = cluster.image().topic_ids["v0"]

    async def go():
        c = await RawConnection.open(cluster.brokers[1].port)
        try:
            return await c.call(wire.make(wire.request_class(20, 0), topic_names=("v0", "v0-never"),
                                          timeout=timedelta(seconds=10)))
        finally:
            await c.close()
    resp = asyncio.run(go())
    assert [(r.name, r.error_code.name) for r in resp.responses] == [("v0", "none"),
                                                                     ("v0-never", "unknown_topic_or_partition")]
    assert_deleted_everywhere(cluster, "v0", 1, tid)
