"""Idempotent producer across a leader fail-over (the duplicate-after-failover bug), real
processes: 1 kraft-controller + 3 kraft-brokers on loopback.

A producer (InitProducerId id/epoch) writes two v2 batches with acks=all to leader 1; both
followers replicate them (their producer state is fed by those follower appends). Broker 1
is killed; the controller elects a follower. The producer then resends its last batch — the
same bytes, same producerId/epoch/baseSequence, exactly what librdkafka does when an
acks=all answer was lost in the fail-over — to the NEW leader: it must answer NONE with the
ORIGINAL offset and not append it again; the next batch continues at the right offset, a
gap of this known producer is refused, and the log holds every record exactly once.
"""

from __future__ import annotations

import asyncio

import pytest

from testkit.cluster import running_cluster, wait_until  # noqa: E402

from kafka_common import batch_header as bh  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402
from testkit.protocol import fetch_request, init_producer_id, make_batch, produce_request  # noqa: E402

pytestmark = pytest.mark.integration
NONE, OUT_OF_ORDER_SEQUENCE_NUMBER = 0, 45


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path) as c:
        yield c


async def _client(broker) -> KafkaClient:
    return await KafkaClient.connect("127.0.0.1", broker.port, client_id="idem-test", timeout_s=5)


async def produce(broker, topic: str, records: bytes) -> tuple[int, int]:
    c = await _client(broker)
    try:
        resp = await c.request(produce_request(c.pick_version(0, 3, 9), topic, 0, records, acks=-1))
    finally:
        await c.close()
    pr = resp.responses[0].partition_responses[0]
    return int(pr.error_code.value), pr.base_offset


async def read_all(broker, topic: str) -> list[tuple[int, bytes]]:
    """(offset, batch header fields) of every batch up to the HW, as consumers see them."""
    c = await _client(broker)
    try:
        resp = await c.request(fetch_request(c.pick_version(1, 4, 12), topic, 0, 0, max_bytes=1 << 20))
    finally:
        await c.close()
    part = resp.responses[0].partitions[0]
    assert int(part.error_code.value) == NONE, part
    return [(h.base_offset, h.producer_id, h.base_sequence, h.record_count)
            for _, h in bh.iter_batches(bytes(part.records or b""))]


def test_retried_batch_of_a_known_producer_is_not_appended_twice_after_failover(cluster):
    b1, b2, b3 = cluster.brokers
    cluster.create_topic("idem", {0: [1, 2, 3]})
    im = cluster.wait_image(lambda im: "idem" in im.topic_ids and im.partition(im.topic_ids["idem"], 0).isr
                            == (1, 2, 3) and im.partition(im.topic_ids["idem"], 0).leader == 1, 20, "ISR 1,2,3")
    epoch0 = im.partition(im.topic_ids["idem"], 0).leader_epoch
    pid, pepoch = asyncio.run(init_producer_id(b1.port))

    def batch(seq: int, n: int) -> bytes:
        return make_batch([b"rec-%d" % (seq + i) for i in range(n)], producer_id=pid, epoch=pepoch, base_seq=seq)

    first, second = batch(0, 3), batch(3, 2)
    wait_until(lambda: asyncio.run(produce(b1, "idem", first)) == (NONE, 0), 20, "first batch acked by all")
    assert asyncio.run(produce(b1, "idem", second)) == (NONE, 3)
    assert asyncio.run(produce(b1, "idem", second)) == (NONE, 3)        # a retry on the same leader

    b1.kill()    # the leader dies; a follower that replicated both batches takes over
    im = cluster.wait_image(lambda im: im.partition(im.topic_ids["idem"], 0).leader in (2, 3), 40,
                            "a follower elected leader")
    reg = im.partition(im.topic_ids["idem"], 0)
    assert reg.leader_epoch > epoch0
    leader = cluster.brokers[reg.leader - 1]

    # the producer's retry of its last batch (its acks=all answer lost in the fail-over)
    wait_until(lambda: asyncio.run(produce(leader, "idem", second))[0] == NONE, 20, "the new leader answers")
    assert asyncio.run(produce(leader, "idem", second)) == (NONE, 3)    # the ORIGINAL offset
    assert asyncio.run(produce(leader, "idem", first)) == (NONE, 0)     # still in the last-5 window
    assert asyncio.run(produce(leader, "idem", batch(7, 1)))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER  # known: a gap
    assert asyncio.run(produce(leader, "idem", batch(5, 1))) == (NONE, 5)   # continues where the log is

    got = asyncio.run(read_all(leader, "idem"))
    assert got == [(0, pid, 0, 3), (3, pid, 3, 2), (5, pid, 5, 1)], got   # every record exactly once
    assert [e for e in leader.events() if e["event"] == "halt"] == []
