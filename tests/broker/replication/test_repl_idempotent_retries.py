"""Idempotent producers retrying acks=all batches the leader already appended, real
processes (1 kraft-controller + 3 kraft-brokers on loopback) and real clients.

Kafka's producer-state batch cache: a retried batch (same producerId/epoch/baseSequence)
that the leader already appended is answered with its ORIGINAL offsets and never appended
again — whether the retry comes after the first copy was acknowledged, while the first copy
still waits for acks=all (deferred), or after the first copy's connection went away."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from testkit.cluster import running_cluster, wait_until  # noqa: E402

from testkit.protocol import RawConnection, init_producer_id, make_batch, produce_request  # noqa: E402

pytestmark = pytest.mark.integration
NONE = 0
RETRIABLE = (3, 6)   # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
DEBUG = {"debug": "msg,eos,broker,protocol"} if os.environ.get("PP_DEBUG") else {}


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path) as c:
        yield c


def _topic(cluster, name: str):
    cluster.create_topic(name, {0: [1, 2, 3]})
    return cluster.wait_image(lambda im: name in im.topic_ids and im.partition(im.topic_ids[name], 0).isr
                              == (1, 2, 3) and im.partition(im.topic_ids[name], 0).leader == 1, 30, "ISR 1,2,3")


def _values_in_log(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of partition 0 up to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    out: list[tuple[int, bytes]] = []
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 40
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def test_librdkafka_retries_under_slow_acks_leave_every_value_once_with_its_offset(cluster):
    """One follower stops (SIGSTOP): acks=all waits until the leader drops it from the ISR
    (replica.lag.time.max.ms 3 s), longer than the producer's request.timeout.ms (1 s), so
    librdkafka retries batches the leader already appended, over a new connection."""
    from confluent_kafka import Producer
    _topic(cluster, "slow")
    b3 = cluster.brokers[2]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "request.timeout.ms": 1000, "message.timeout.ms": 60000,
                  "retry.backoff.ms": 100, **DEBUG})
    acked: dict[bytes, int | None] = {}
    errors: list = []

    def cb(err, msg):
        if err:
            errors.append(err)
        else:
            acked[msg.value()] = msg.offset()

    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            p.produce("slow", b"v-%d" % sent, partition=0, on_delivery=cb)
            sent += 1
            p.poll(0.01)

    produce_for(1.0)
    assert p.flush(30) == 0
    b3.proc.send_signal(signal.SIGSTOP)
    try:
        produce_for(6.0)
    finally:
        b3.proc.send_signal(signal.SIGCONT)
    assert p.flush(60) == 0
    assert errors == []
    assert len(acked) == sent
    without_offset = sorted(v for v, o in acked.items() if o is None)
    log = _values_in_log(cluster.bootstrap, "slow")
    values = [v for _, v in log]
    dups = sorted({v for v in values if values.count(v) > 1})
    assert dups == [], f"{len(dups)} values appended twice, e.g. {dups[:5]}"
    assert set(values) == set(acked)
    assert without_offset == [], f"{len(without_offset)} acks without an offset, e.g. {without_offset[:5]}"


def _batches(port: int, topic: str) -> list[tuple[int, int, int, int]]:
    """(base offset, producer id, base sequence, record count) of every batch up to the HW."""
    from kafka_common import batch_header as bh
    from testkit.protocol import fetch_request

    async def run():
        c = await RawConnection.open(port)
        try:
            resp = await c.call(fetch_request(12, topic, 0, 0, max_bytes=1 << 20))
        finally:
            await c.close()
        part = resp.responses[0].partitions[0]
        assert int(part.error_code.value) == NONE, part
        return [(h.base_offset, h.producer_id, h.base_sequence, h.record_count)
                for _, h in bh.iter_batches(bytes(part.records or b""))]
    return asyncio.run(run())


def _answer(resp) -> tuple[int, int]:
    pr = resp.responses[0].partition_responses[0]
    return int(pr.error_code.value), pr.base_offset


@pytest.mark.parametrize("first_connection", ["open", "dropped"])
def test_a_retry_while_the_first_copy_waits_for_acks_all_is_not_appended_again(cluster, first_connection):
    """The first copy is appended and waits for acks=all (both followers stopped); the same
    batch comes again on another connection — the first connection still waiting ("open"),
    or gone as when librdkafka's request times out and it reconnects ("dropped"). Once the
    followers are back, the retry is answered NONE with the first copy's offset and the log
    holds the batch once; the producer's next batch follows it."""
    from kafka_common import wire
    _topic(cluster, f"defer-{first_connection}")
    topic = f"defer-{first_connection}"
    leader = cluster.brokers[0]
    followers = cluster.brokers[1:]
    pid, epoch = asyncio.run(init_producer_id(leader.port))
    warm = make_batch([b"w0", b"w1"], producer_id=pid, epoch=epoch, base_seq=0)
    batch = make_batch([b"r0", b"r1", b"r2"], producer_id=pid, epoch=epoch, base_seq=2)
    nxt = make_batch([b"n0"], producer_id=pid, epoch=epoch, base_seq=5)
    produce_cls = wire.response_class(0, 9)

    async def run() -> tuple[tuple[int, int] | None, tuple[int, int], tuple[int, int]]:
        c0 = await RawConnection.open(leader.port)
        # the controller's image says broker 1 leads; the broker itself learns it when it
        # applies that record, a moment later on a loaded machine (CI once got
        # NOT_LEADER_OR_FOLLOWER here): retry the retriable answers, as a client does
        deadline = time.monotonic() + 30
        while True:
            warm_answer = _answer(await c0.call(produce_request(9, topic, 0, warm, acks=-1)))
            if warm_answer[0] not in RETRIABLE or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert warm_answer == (NONE, 0)
        await c0.close()
        for f in followers:
            f.proc.send_signal(signal.SIGSTOP)
        try:
            c1 = await RawConnection.open(leader.port)
            c1.send(produce_request(9, topic, 0, batch, acks=-1, timeout_ms=30_000))
            await asyncio.sleep(1.0)      # appended; waiting for the stopped followers
            if first_connection == "dropped":
                c1.writer.transport.abort()
            c2 = await RawConnection.open(leader.port)
            c2.send(produce_request(9, topic, 0, batch, acks=-1, timeout_ms=30_000))
            await asyncio.sleep(1.0)
        finally:
            for f in followers:
                f.proc.send_signal(signal.SIGCONT)
        first = _answer((await c1.receive(produce_cls, 30))[1]) if first_connection == "open" else None
        retry = _answer((await c2.receive(produce_cls, 30))[1])
        after = _answer(await c2.call(produce_request(9, topic, 0, nxt, acks=-1, timeout_ms=30_000)))
        await c2.close()
        if first_connection == "open":
            await c1.close()
        return first, retry, after

    first, retry, after = asyncio.run(run())
    if first is not None:
        assert first == (NONE, 2)
    assert retry == (NONE, 2), retry
    assert after == (NONE, 5), after
    assert _batches(leader.port, topic) == [(0, pid, 0, 2), (2, pid, 2, 3), (5, pid, 5, 1)]
