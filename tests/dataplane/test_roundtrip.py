"""Real clients against the real broker listener: produce acks=all, consume by assignment."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


def test_confluent_roundtrip(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING

    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "gzip", "linger.ms": 5})
    sent = [(f"k{i}".encode(), f"value-{i}".encode() * (i % 7 + 1), [("h", str(i).encode())]) for i in range(200)]
    errors = []
    for k, v, h in sent:
        p.produce("rt", v, k, partition=0, headers=h, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0
    assert not errors
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.assign([TopicPartition("rt", 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append((m.key(), m.value(), m.headers(), m.offset()))
        if len(got) == len(sent):
            break
    c.close()
    assert [(k, v, h) for k, v, h, _ in got] == sent
    assert [o for *_, o in got] == list(range(len(sent)))
