"""Real clients against 1 kraft-controller + 3 kraft-brokers × 3 dirs (real processes, loopback):
topics with RF=3 created through the brokers (CreateTopics forwarded to the controller),
produced with acks=all by kafka-python, confluent-kafka (librdkafka 2.16) and kcat (librdkafka
2.0.2) with keys, headers and codecs, consumed back by every client by assigned partition,
byte for byte; the three replicas' segment files end up byte-identical (replication is real)
and DescribeLogDirs answers the ids the meta.properties files hold. The brokers advertise
``localhost`` while bound to 127.0.0.1 (advertised.listeners is what Metadata returns)."""

from __future__ import annotations

import asyncio
import glob
import os
import time

import pytest

from testkit.cluster import running_cluster, wait_until
from broker_impl.api.log_dirs import DescribeLogDirsResponseV4
from kafka_common import wire
from tests.dataplane.clients import CONSUMERS, KCAT, KCAT_HEADERS, PRODUCERS, make_records
from testkit.protocol import RawConnection

pytestmark = pytest.mark.integration

CASES = [("confluent", "gzip"), ("confluent", "snappy"), ("confluent", "lz4"), ("confluent", "zstd"),
         ("kafka-python", "gzip"), ("kafka-python", "zstd"), ("kcat", "gzip"), ("kcat", "none")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # bound to 127.0.0.1, advertised as "localhost": clients and followers must use the
    # advertised endpoint the brokers registered
    with running_cluster(tmp_path_factory.mktemp("dp"), advertise_host="localhost") as c:
        yield c


def create_topic_kafka_python(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)])
    finally:
        admin.close()


def segment_bytes(broker, topic: str, partition: int) -> bytes | None:
    for d in broker.dirs:
        files = sorted(glob.glob(os.path.join(d, f"{topic}-{partition}", "*.log")))
        if files:
            return b"".join(open(f, "rb").read() for f in files)
    return None


def replicas_identical(cluster, topic: str, partition: int) -> bool:
    data = [segment_bytes(b, topic, partition) for b in cluster.brokers]
    return data[0] is not None and len(data[0]) > 0 and all(x == data[0] for x in data)


@pytest.mark.parametrize("producer,codec", CASES)
def test_rf3_acks_all_round_trip(cluster, producer, codec):
    if producer == "kcat" and KCAT is None:
        pytest.skip("kcat (/usr/bin/kcat) not installed")
    topic = f"rf3-{producer}-{codec}"
    create_topic_kafka_python(cluster.bootstrap, topic, 1, 3)
    im = cluster.wait_image(lambda im: topic in im.topic_ids and
                            len(im.partition(im.topic_ids[topic], 0).isr) == 3, 20, f"{topic} with ISR 3")
    assert len(im.partition(im.topic_ids[topic], 0).replicas) == 3
    records = make_records(200, producer)
    PRODUCERS[producer](cluster.bootstrap, topic, records, codec)
    expected = [(k, v, KCAT_HEADERS if producer == "kcat" else h) for k, v, h in records]
    for name, consume in CONSUMERS.items():
        if name == "kcat" and KCAT is None:
            continue
        got = consume(cluster.bootstrap, topic, len(records))
        assert [(k, v, h) for k, v, h, _o in got] == expected, f"consumer {name}"
        assert [o for *_x, o in got] == list(range(len(records))), f"consumer {name}"
    # acks=all: every replica holds the batches, byte for byte (offsets, epochs, CRCs as the leader wrote them)
    wait_until(lambda: replicas_identical(cluster, topic, 0), 15, f"{topic}-0 identical on the 3 replicas")


def test_confluent_keyed_multi_partition_rf3(cluster):
    """A keyed confluent producer over 3 partitions led by 3 different brokers."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "rf3-keyed"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    im = cluster.wait_image(lambda im: topic in im.topic_ids and all(
        len(p.isr) == 3 for p in im.partitions_of(im.topic_ids[topic]).values()), 20, "topic ready")
    assert sorted(p.leader for p in im.partitions_of(im.topic_ids[topic]).values()) == [1, 2, 3]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "lz4", "linger.ms": 5})
    delivered: dict[int, list] = {0: [], 1: [], 2: []}
    errors: list = []

    def cb(err, msg):
        if err:
            errors.append(err)
        else:
            delivered[msg.partition()].append((msg.key(), msg.value(), msg.offset()))
    for i in range(3000):
        p.produce(topic, f"value-{i}".encode() * 3, f"key-{i % 50}".encode(), headers=[("i", str(i).encode())],
                  on_delivery=cb)
        p.poll(0)
    assert p.flush(30) == 0 and not errors, errors[:3]
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "dp", "enable.auto.commit": False})
    got: dict[int, list] = {0: [], 1: [], 2: []}
    try:
        c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(3)])
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 3000 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got[m.partition()].append((m.key(), m.value(), m.offset()))
    finally:
        c.close()
    for part in range(3):
        assert sorted(got[part], key=lambda x: x[2]) == sorted(delivered[part], key=lambda x: x[2])
        wait_until(lambda part=part: replicas_identical(cluster, topic, part), 15, f"{topic}-{part} replicated")


def test_metadata_returns_advertised_endpoints(cluster):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=20)
    assert {(b.id, b.host, b.port) for b in md.brokers.values()} == \
        {(b.node_id, "localhost", b.port) for b in cluster.brokers}


def test_describe_log_dirs_answers_meta_properties_ids(cluster):
    async def go():
        for b in cluster.brokers:
            c = await RawConnection.open(b.port)
            try:
                resp = await c.call(wire.request_class(35, 4)(topics=None), DescribeLogDirsResponseV4)
            finally:
                await c.close()
            got = {res.log_dir: res.directory_id for res in resp.results}
            assert got == b.dir_ids(), f"broker {b.node_id}"
    asyncio.run(go())
