"""Every real client produces (acks=all, idempotent, keys, headers, each codec) and every
real client consumes the partition back by assignment, byte for byte, with gap-free offsets.
The stored batches prove the codec went through the broker untouched."""

from __future__ import annotations

import time

import pytest

from kafka_common import batch_header as bh
from tests.dataplane.clients import CONSUMERS, KCAT, KCAT_HEADERS, PRODUCERS, make_records

pytestmark = pytest.mark.integration

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(broker, topic):
    def collect():
        log = broker.lm.get_log(topic, 0)
        data = log.read(0, 1 << 30, log.log_end_offset)
        return {h.compression for _pos, h in bh.iter_batches(data)}
    return broker.loop.call(collect)


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_produce_and_consume_with_every_client(broker, producer, codec):
    if producer == "kcat" and KCAT is None:
        pytest.skip("kcat not installed")
    topic = f"t-{producer}-{codec}"
    records = make_records(150, producer)
    PRODUCERS[producer](broker.bootstrap, topic, records, codec)
    expected = [(k, v, KCAT_HEADERS if producer == "kcat" else h) for k, v, h in records]
    assert stored_codecs(broker, topic) == {CODECS[codec]}
    for name, consume in CONSUMERS.items():
        if name == "kcat" and KCAT is None:
            continue
        got = consume(broker.bootstrap, topic, len(records))
        assert [(k, v, h) for k, v, h, _o in got] == expected, f"consumer {name}"
        assert [o for *_x, o in got] == list(range(len(records))), f"consumer {name}"


def test_admin_clients_create_topics_and_describe_cluster(broker):
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("by-confluent", num_partitions=3, replication_factor=1)])
    futures["by-confluent"].result(30)
    cluster = admin.describe_cluster().result(30)
    assert [n.id for n in cluster.nodes] == [1] and cluster.cluster_id == broker.view.cluster_id

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.create_topics([KpNewTopic("by-kafka-python", num_partitions=2, replication_factor=1)])
    finally:
        kp.close()
    created = broker.loop.call(lambda: {n: len(broker.image.partitions_of(broker.image.topic_ids[n]))
                                        for n in ("by-confluent", "by-kafka-python")})
    assert created == {"by-confluent": 3, "by-kafka-python": 2}
    # and the new topic is immediately usable by a producer with acks=all
    records = make_records(20, "admin")
    PRODUCERS["confluent"](broker.bootstrap, "by-confluent", records, "zstd", partition=2)
    got = CONSUMERS["kafka-python"](broker.bootstrap, "by-confluent", len(records), partition=2)
    assert [(k, v, h) for k, v, h, _o in got] == records


def test_clients_list_offsets_by_time_and_watermarks(broker):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    try:
        for i, ts in enumerate((1_000_000, 2_000_000, 3_000_000)):
            p.send("times", value=b"v%d" % i, partition=0, timestamp_ms=ts).get(30)  # one batch each
    finally:
        p.close(5)
    tp = TopicPartition("times", 0)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 3}
        found = c.offsets_for_times({tp: 1_500_000})[tp]
        assert (found.offset, found.timestamp) == (1, 2_000_000)
        assert c.offsets_for_times({tp: 9_000_000})[tp] is None
    finally:
        c.close()
    cc = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        assert cc.get_watermark_offsets(CTP("times", 0), timeout=30) == (0, 3)
        (hit,) = cc.offsets_for_times([CTP("times", 0, 2_500_000)], timeout=30)
        assert hit.offset == 2
    finally:
        cc.close()


def test_keyed_multi_partition_produce_keeps_per_key_order(broker):
    """librdkafka's partitioner spreads keys over 3 partitions; one Produce request carries
    several partitions; every record comes back once, in per-key order."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    broker.loop.run(broker.create_topic("multi", 3))
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "lz4", "linger.ms": 50})
    sent = [(b"key-%d" % (i % 17), b"%d" % i) for i in range(600)]
    errors = []
    for k, v in sent:
        p.produce("multi", v, k, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    got = []
    try:
        tps = [TopicPartition("multi", i) for i in range(3)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                got += [(tp.partition, m.key, m.value) for m in msgs]
    finally:
        c.close()
    assert sorted((k, v) for _p, k, v in got) == sorted(sent)
    by_key: dict[bytes, list[bytes]] = {}
    partition_of: dict[bytes, set[int]] = {}
    for part, k, v in got:
        by_key.setdefault(k, []).append(v)
        partition_of.setdefault(k, set()).add(part)
    for k, values in by_key.items():
        assert values == [v for kk, v in sent if kk == k]
        assert len(partition_of[k]) == 1
    assert len({part for part, *_ in got}) == 3
