"""Every real client produces (acks=all, idempotent, keys, headers, each codec) and every
real client consumes the partition back by assignment, byte for byte, with gap-free offsets.
The stored batches prove the codec went through the broker untouched."""

from __future__ import annotations

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
