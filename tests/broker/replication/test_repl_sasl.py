"""Replication over SASL PLAIN with the authorizer on: every listener is SASL_PLAINTEXT; the
brokers log in to the controller and to each other as ``broker`` (a super user, so their
replica fetches and AlterPartition hold CLUSTER_ACTION); an ordinary user (``alice``)
creates an RF=3 topic, produces with acks=all and consumes it back through librdkafka."""

from __future__ import annotations

import time

import pytest

from testkit.cluster import running_cluster  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, sasl=True) as c:
        yield c


def test_rf3_acks_all_with_sasl_between_brokers(cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    alice = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "a-pw"}
    admin = AdminClient(alice)
    admin.create_topics([NewTopic("secure", 1, 3)])["secure"].result(30)
    cluster.wait_image(lambda im: "secure" in im.topic_ids and
                       len(im.partition(im.topic_ids["secure"], 0).isr) == 3, 20, "secure with ISR 3")
    p = Producer({**alice, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list = []
    for i in range(500):
        p.produce("secure", f"v{i}".encode(), f"k{i}".encode(), partition=0,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors[:3]
    c = Consumer({**alice, "group.id": "secure", "enable.auto.commit": False})
    got = []
    try:
        c.assign([TopicPartition("secure", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(500)]
    im = cluster.image()
    assert im.partition(im.topic_ids["secure"], 0).isr == (1, 2, 3)  # acks=all with ISR 3: both followers fetched
    for b in cluster.brokers:  # followers fetched (no authorization failure on the leader's side)
        assert not [e for e in b.events() if e["event"] in ("bad_request", "handler_error")]
