"""acks=all with ONE leader leading many partitions followed by the same followers (issue 10).

Real processes (1 kraft-controller + 3 kraft-brokers × 3 dirs, loopback), real clients
(confluent-kafka / librdkafka and kafka-python), RF 3, min.insync.replicas=2, every partition
led by broker 1. The brokers run with ``replica.fetch.wait.max.ms=30000``: a follower's long
poll lasts 30 s when nothing wakes it, so an acknowledgement that has to wait for one — a
partition left out of the follower's fetch while another long-polls, or a leader fetch that
does not answer when one of its partitions gets data — cannot arrive before 30 s. Every
client here gives up on a record after 15 s (librdkafka ``message.timeout.ms``, kafka-python
``request_timeout_ms``), so the tests pass only if no ack ever waits behind a long poll:
that is the pipeline property, proven structurally (no latency is asserted).

Before the fix, with 2 partitions per leader, every second round of a follower long-polled
the idle partition while the busy one's next fetch waited (≈1 ack per
``replica.fetch.wait.max.ms``), so these producers timed out.

The last test does the same after a REAL dir failure (ext4 on a loop device shut down with
EXT4_IOC_SHUTDOWN) on broker 1: the partitions in the failed dir move to another leader,
which then leads them followed by the same follower; records produced to every partition —
moved or not — are still all acknowledged, and every acknowledged record is read back.
"""

from __future__ import annotations

import time

import pytest

from loopdev import LoopFs, skip_reason as loop_skip_reason  # noqa: E402
from testkit.cluster import Cluster, running_cluster  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402

pytestmark = pytest.mark.integration

SLOW_POLL = {"replica.fetch.wait.max.ms": "30000", "replica.lag.time.max.ms": "120000",
             "min.insync.replicas": "2", "metrics.sample.window.ms": "500"}
GIVE_UP_MS = 15000   # every client's per-record limit: half the follower's long poll


def make_topic(c: Cluster, name: str, n: int, dirs_of=None) -> None:
    c.create_topic(name, {p: [1, 2, 3] for p in range(n)})
    c.wait_image(lambda im: name in im.topic_ids and len(im.partitions_of(im.topic_ids[name])) == n and all(
        p.leader == 1 and len(p.isr) == 3 and UNASSIGNED not in p.directories
        for p in im.partitions_of(im.topic_ids[name]).values()), 120, f"{name}: {n} partitions, full ISRs")


def produce_confluent(bootstrap: str, topic: str, n: int, rounds: int, tag: str) -> set[tuple[int, bytes]]:
    """``rounds`` records per partition, a round at a time (each round flushed: the next one
    needs the follower's NEXT fetch, the one that used to wait behind a long poll)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                  "message.timeout.ms": GIVE_UP_MS, "request.timeout.ms": GIVE_UP_MS})
    acked: set[tuple[int, bytes]] = set()
    errors: list = []

    def cb(err, msg):
        if err is not None:
            errors.append((msg.partition(), str(err)))
        else:
            acked.add((msg.partition(), msg.value()))
    for r in range(rounds):
        for part in range(n):
            p.produce(topic, f"{tag}-{r}-{part}".encode(), partition=part, on_delivery=cb)
        assert p.flush(GIVE_UP_MS / 1000 + 15) == 0, f"round {r}: records still queued"
        assert not errors, f"round {r}: {len(errors)} records not acknowledged, e.g. {errors[:3]}"
    assert len(acked) == rounds * n
    return acked


def produce_kafka_python(bootstrap: str, topic: str, n: int, rounds: int, tag: str) -> set[tuple[int, bytes]]:
    from kafka import KafkaProducer
    # retries (a leader that has not taken its role yet answers NOT_LEADER) within one
    # delivery limit, which, like librdkafka's message.timeout.ms, includes every retry
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=GIVE_UP_MS - 1000,
                      delivery_timeout_ms=GIVE_UP_MS, retry_backoff_ms=100, linger_ms=2, max_block_ms=GIVE_UP_MS)
    acked: set[tuple[int, bytes]] = set()
    try:
        for r in range(rounds):
            futures = [(part, p.send(topic, f"{tag}-{r}-{part}".encode(), partition=part)) for part in range(n)]
            p.flush(timeout=GIVE_UP_MS / 1000 + 15)
            for part, fut in futures:
                md = fut.get(timeout=1)   # raises KafkaTimeoutError / the broker's error if not acked
                assert md.partition == part
                acked.add((part, f"{tag}-{r}-{part}".encode()))
    finally:
        p.close(timeout=5)
    return acked


def read_back(bootstrap: str, topic: str, n: int, expected: set[tuple[int, bytes]]) -> dict[tuple[int, bytes], int]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "many", "enable.auto.commit": False})
    counts: dict[tuple[int, bytes], int] = {}
    try:
        c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(n)])
        deadline = time.monotonic() + 60
        while not expected <= set(counts) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                key = (m.partition(), m.value())
                counts[key] = counts.get(key, 0) + 1
    finally:
        c.close()
    return counts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("many"), broker_extra=SLOW_POLL, session_timeout_ms=9000) as c:
        yield c


@pytest.mark.parametrize("n", [2, 10, 100])
def test_one_leader_many_partitions_confluent(cluster, n):
    topic = f"cf{n}"
    make_topic(cluster, topic, n)
    acked = produce_confluent(cluster.bootstrap, topic, n, rounds=4, tag="cf")
    counts = read_back(cluster.bootstrap, topic, n, acked)
    assert acked <= set(counts), f"{len(acked - set(counts))} acknowledged records missing"
    assert all(v == 1 for v in counts.values()), "duplicates from an idempotent producer"


@pytest.mark.parametrize("n", [2, 10, 100])
def test_one_leader_many_partitions_kafka_python(cluster, n):
    topic = f"kp{n}"
    make_topic(cluster, topic, n)
    acked = produce_kafka_python(cluster.bootstrap, topic, n, rounds=3, tag="kp")
    counts = read_back(cluster.bootstrap, topic, n, acked)
    assert acked <= set(counts), f"{len(acked - set(counts))} acknowledged records missing"


IDLE_S = 4.0          # between records: longer than a poll the fetcher could be stuck in ...
IDLE_GIVE_UP_MS = 2000   # ... and what the producer allows each record: half of it


def test_a_record_after_an_idle_spell_is_acked_without_waiting_for_a_poll(cluster):
    """One record every ``IDLE_S`` to partition 0 of a 2-partition topic, partition 1 idle.
    The record arrives at a follower at the end of a long poll; the follower's next fetch must
    carry its new log end at once (that is what moves the leader's HW). The fetcher once took
    the storage step's start from the time the poll was SENT, so the step looked old, the
    partition sat out and the fetch long-polled partition 1 for as long as the idle spell:
    each ack came ~``IDLE_S`` late, after this producer had given up (``IDLE_GIVE_UP_MS``)."""
    from confluent_kafka import Producer
    make_topic(cluster, "idle2", 2)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0, "message.timeout.ms": IDLE_GIVE_UP_MS, "request.timeout.ms": IDLE_GIVE_UP_MS})
    outcomes: list = []
    p.produce("idle2", b"warm-up", partition=0, on_delivery=lambda err, msg: outcomes.append(err))
    assert p.flush(IDLE_GIVE_UP_MS / 1000 + 10) == 0 and outcomes == [None], f"warm-up: {outcomes}"
    for i in range(3):
        time.sleep(IDLE_S)
        p.produce("idle2", f"idle-{i}".encode(), partition=0, on_delivery=lambda err, msg: outcomes.append(err))
        assert p.flush(IDLE_GIVE_UP_MS / 1000 + 10) == 0
        assert outcomes[-1] is None, f"record {i} after {IDLE_S} s idle: {outcomes[-1]}"


def test_the_leader_reports_where_its_produce_time_goes(cluster):
    """The leader's ``request_metrics`` events (every metrics.sample.window.ms = 500 ms):
    acks=all Produce requests spend their time waiting for the followers (``remote``), and
    the followers' fetches reach the leader; the followers lead nothing, so they answer no
    Produce."""
    leader, followers = cluster.brokers[0], cluster.brokers[1:]
    seen = len(leader.events())
    make_topic(cluster, "rm10", 10)
    acked = produce_confluent(cluster.bootstrap, "rm10", 10, rounds=2, tag="rm")
    assert len(acked) == 20
    time.sleep(1.2)   # the window holding those requests ends
    windows = [e for e in leader.events()[seen:] if e["event"] == "request_metrics"]
    produce = [w["apis"]["0"] for w in windows if "0" in w["apis"]]
    assert produce, "no request_metrics event with Produce from the leader"
    assert all(w["listener"] and w["window_ms"] > 0 for w in windows)
    assert sum(p["count"] for p in produce) >= 2     # librdkafka: at least one request per round
    assert max(p["remote"]["max"] for p in produce) > 0, "acks=all answers waited for no follower"
    for p in produce:
        assert p["total"]["max"] >= p["remote"]["max"] and p["total"]["p99"] <= p["total"]["max"]
    assert any("1" in w["apis"] for w in windows), "the followers' fetches are not in the leader's metrics"
    for f in followers:
        assert not any("0" in e["apis"] for e in f.events() if e["event"] == "request_metrics"), \
            f"broker {f.node_id} answered Produce requests while leading nothing"


def test_after_a_dir_failure_every_partition_keeps_acking(tmp_path):
    reason = loop_skip_reason()
    if reason:
        pytest.skip(reason)
    fs = LoopFs(size_mb=64)
    c = Cluster(tmp_path, broker_extra=SLOW_POLL, session_timeout_ms=9000)
    try:
        fs.setup()
        c.start_with_dir(fs.mnt)
        b1 = c.brokers[0]
        n = 30
        make_topic(c, "moved", n)
        d0 = b1.dir_ids()[fs.mnt]
        im = c.image()
        tid = im.topic_ids["moved"]
        in_d0 = {p for p, reg in im.partitions_of(tid).items() if reg.directory(1) == d0}
        assert in_d0 and len(in_d0) < n, f"placement must put some (not all) of broker 1's replicas in d0: {in_d0}"
        before = produce_confluent(c.bootstrap, "moved", n, rounds=2, tag="pre")

        fs.shutdown()   # real EIO from now on
        im = c.wait_image(lambda im: all(
            im.partition(tid, p).leader not in (1, -1) and 1 not in im.partition(tid, p).isr for p in in_d0),
            60, "the partitions of the failed dir led elsewhere, broker 1 out of their ISR")
        new_leaders = {im.partition(tid, p).leader for p in in_d0}
        assert all(im.partition(tid, p).leader == 1 for p in range(n) if p not in in_d0)

        after = produce_confluent(c.bootstrap, "moved", n, rounds=3, tag="post")
        after |= produce_kafka_python(c.bootstrap, "moved", n, rounds=2, tag="postkp")
        counts = read_back(c.bootstrap, "moved", n, before | after)
        assert (before | after) <= set(counts), f"{len((before | after) - set(counts))} acknowledged records missing"
        assert all(b.alive() for b in c.brokers), [b.stderr() for b in c.brokers if not b.alive()]
        # one new leader leads every moved partition, followed by the same follower
        assert len(new_leaders) == 1, new_leaders
    finally:
        c.kill()
        fs.cleanup()
