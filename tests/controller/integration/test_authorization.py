"""Authorization as in Kafka, on a real SASL cluster (1 controller + 1 broker, every listener
SASL_PLAINTEXT, ``authorizer.enabled=true``, ``super.users=User:broker;User:admin``).

A normal user (``alice``) keeps doing what clients do through the broker — create a topic
with a real admin client (the broker forwards it as its own super-user principal), produce
and consume — but straight at the controller she gets CLUSTER_AUTHORIZATION_FAILED for the
metadata-log Fetch, CreateTopics and every broker-only RPC, and changes nothing. The broker
principal may do all of it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kafka_runtime.controller_client import MetadataReader, SimBroker, create_topic
from kafka_common import ids, wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import KafkaClient
from kafka_runtime.events import read_events

from testkit.cluster import Cluster, running_cluster  # noqa: E402

pytestmark = pytest.mark.integration
DENIED = ErrorCode.cluster_authorization_failed


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, n_brokers=1, sasl=True, broker_extra={"default.replication.factor": "1",
                                                                         "min.insync.replicas": "1"}) as c:
        yield c


def _fetch(version: int):
    reader = MetadataReader.__new__(MetadataReader)
    reader.version, reader.next_offset = version, 0
    return reader.fetch_request(0)


async def _as(cluster, user: str, password: str) -> KafkaClient:
    return await KafkaClient.connect("127.0.0.1", cluster.ctrl.port, client_id=user, sasl=(user, password))


def test_normal_user_and_broker_principal(cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    alice_conf = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "a-pw"}
    # through the broker, as clients do: works (forwarded as the broker's principal)
    admin = AdminClient(alice_conf)
    admin.create_topics([NewTopic("by-alice", 1, 1)])["by-alice"].result(30)

    async def at_the_controller():
        alice = await _as(cluster, "alice", "a-pw")
        try:
            created = await create_topic(alice, "direct", 1, 1)
            assert [(t.name, t.error_code) for t in created.topics] == [("direct", DENIED)]
            assert "User:alice lacks CLUSTER_ACTION" in created.topics[0].error_message
            for version in (4, 12, 13, 16):  # v4–v6 carry the error in each partition only
                resp = await alice.request(_fetch(version))
                part = resp.responses[0].partitions[0]
                assert part.error_code == DENIED and not part.records, version
                if version >= 7:
                    assert resp.error_code == DENIED
            sim = SimBroker(1, [ids.random_directory_id(__import__("random").Random(1))],
                            cluster_id=cluster.ctrl.cluster_id)
            sim.client, sim.epoch = alice, 1
            assert (await sim.register()).error_code == DENIED
            assert (await sim.heartbeat(0)).error_code == DENIED
            assert (await sim.assign({})).error_code == DENIED
            unregister = wire.request_class(64, 0)(broker_id=1)
            assert (await alice.request(unregister)).error_code == DENIED
            alter = wire.make(wire.request_class(56, 2), broker_id=1, broker_epoch=1, topics=())
            assert (await alice.request(alter)).error_code == DENIED
        finally:
            await alice.close()
        broker = await _as(cluster, "broker", "b-pw")
        try:
            reader = MetadataReader(broker)
            await reader.catch_up()
            created = await create_topic(broker, "by-broker", 1, 1)
            assert created.topics[0].error_code == ErrorCode.none
            await reader.catch_up()
            return reader.image
        finally:
            await broker.close()

    image = asyncio.run(asyncio.wait_for(at_the_controller(), 60))
    assert {"by-alice", "by-broker"} <= set(image.topic_ids) and "direct" not in image.topic_ids
    assert 1 in image.brokers and not image.brokers[1].fenced  # alice's unregister changed nothing

    # and alice still produces and consumes through the broker
    p = Producer({**alice_conf, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        p.produce("by-alice", f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({**alice_conf, "group.id": "g", "enable.auto.commit": False})
    got = []
    try:
        c.assign([TopicPartition("by-alice", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(20)]
    denied = [e for e in read_events(cluster.ctrl.events_path) if e["event"] == "request_denied"]
    assert denied and denied[0]["principal"] == "User:alice"  # logged (rate-limited)


def test_without_the_authorizer_everyone_may_fetch_and_create(tmp_path):
    c = Cluster(tmp_path, n_brokers=1)
    try:
        c.prepare()
        c.start()

        async def body():
            client = await KafkaClient.connect("127.0.0.1", c.ctrl.port)
            try:
                assert (await create_topic(client, "open", 1, 1)).topics[0].error_code == ErrorCode.none
                reader = MetadataReader(client)
                await reader.catch_up()
                return reader.image
            finally:
                await client.close()
        assert "open" in asyncio.run(asyncio.wait_for(body(), 60)).topic_ids
    finally:
        c.kill()
