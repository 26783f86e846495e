"""The tools operators run that speak Kafka 3.x's old protocol versions (KIP-896 removed them in
4.0), against 1 kraft-controller + 3 kraft-brokers (real processes on loopback):

- Debian's Burrow 1.2.1 (Sarama) with ``kafka-version="0.10.0"`` (its example config) and
  ``"0.8.2"``: its cluster module asks each partition's leader for the log end offset with
  ListOffsets **v0**; its consumer module reads ``__consumer_offsets`` with Fetch **v2** /
  **v0** (the records down-converted to message format v1 / v0). A kafka-python group
  consumer commits, a producer moves the log end on, and Burrow's HTTP API reports the
  group's lag exactly.
  Burrow needs a ZooKeeper for its own coordination (not Kafka's): Debian's ``zookeeper``
  runs standalone on loopback.
- kcat (librdkafka 2.0.2) with ``broker.version.fallback`` 0.8.2 / 0.9.0 / 0.10.0 and no
  ApiVersions request: produce in every codec, consume back byte for byte.
- kafka-python pinned to ``api_version=(0, 10, 0)``: a group consumer that fetches with
  Fetch **v2** (magic-1 message sets), commits with OffsetCommit v2 / OffsetFetch v1 and
  uses ListOffsets **v0** for its resets, a producer sending Produce v2 with gzip magic-1
  message sets (up-converted to v2 batches), DescribeConfigs
  **v0** through its admin client pinned to ``(0, 11)``, OffsetCommit **v1** (commit
  timestamps) and ListOffsets v0 with ``max_num_offsets`` from raw requests — every one
  answered by the broker, never a closed connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest

from kafka_common import wire
from kafka_common.wire import ErrorCode
from testkit.cluster import running_cluster, wait_until
from harness.run.local_processes import free_port
from broker_impl.groups.state import records as R
from testkit.protocol import RawConnection, fetch_request

pytestmark = pytest.mark.integration

GROUP_KEYS = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
              "group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000"}
BURROW = shutil.which("Burrow")
ZK_JAR = "/usr/share/java/zookeeper.jar"
TOPIC, PARTITIONS = "lagged", 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("oldclients"), broker_extra=GROUP_KEYS) as c:
        c.create_topic(TOPIC, {p: [1 + (p + i) % 3 for i in range(3)] for p in range(PARTITIONS)})
        c.wait_image(lambda im: TOPIC in im.topic_ids and all(
            len(im.partition(im.topic_ids[TOPIC], p).isr) == 3 for p in range(PARTITIONS)), 20, "ISR 3")
        yield c


def _produce(cluster, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
    errors: list = []
    for i in range(n):
        p.produce(TOPIC, b"v%d" % i, partition=i % PARTITIONS, on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors


def _log_ends(cluster) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe-ends"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=20)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


class _Proc:
    def __init__(self, args: list[str], workdir: str, name: str) -> None:
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT)

    def text(self) -> str:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _zookeeper(workdir: str) -> tuple[_Proc, int]:
    port = free_port()
    zk = _Proc(["java", "-Xmx128m", "-Dzookeeper.admin.enableServer=false", "-cp", ZK_JAR,
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), os.path.join(workdir, "zkdata")],
               workdir, "zookeeper")
    import socket

    def up() -> bool:   # serving, not only listening: "srvr" (the one four-letter word allowed by default)
        assert zk.proc.poll() is None, zk.text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"srvr")
                return b"Mode: standalone" in s.recv(4096)
        except OSError:
            return False
    wait_until(up, 30, "zookeeper serving", interval_s=0.2)
    return zk, port


def _burrow_config(workdir: str, zk_port: int, http_port: int, bootstrap: str, kafka_version: str) -> None:
    servers = ", ".join(f'"{s}"' for s in bootstrap.split(","))
    with open(os.path.join(workdir, "burrow.toml"), "w") as f:
        f.write(f"""[general]
pidfile="{workdir}/burrow.pid"

[logging]
level="info"

[zookeeper]
servers=["127.0.0.1:{zk_port}"]
timeout=6
root-path="/burrow"

[client-profile.old]
client-id="burrow-lag"
kafka-version="{kafka_version}"

[cluster.lab]
class-name="kafka"
servers=[{servers}]
client-profile="old"
topic-refresh=5
offset-refresh=1

[consumer.lab]
class-name="kafka"
cluster="lab"
servers=[{servers}]
client-profile="old"
offsets-topic="__consumer_offsets"
start-latest=false
group-blacklist="^probe-.*$"

[httpserver.default]
address="127.0.0.1:{http_port}"

[storage.default]
class-name="inmemory"
workers=2
intervals=10
min-distance=1
""")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.skipif(BURROW is None or not os.path.exists(ZK_JAR) or shutil.which("java") is None,
                    reason="Debian's burrow and zookeeper packages (scripts/bootstrap.sh installs them)")
@pytest.mark.parametrize("kafka_version", ["0.10.0", "0.8.2"])
def test_burrow_reports_the_group_lag_exactly(cluster, tmp_path, kafka_version):
    """Burrow's client profile at 0.10.0 (Debian's example config): ListOffsets v0, Fetch v2
    (magic 1); at 0.8.2: ListOffsets v0, Fetch v0 (magic 0), Metadata v0."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    group = f"lag-{kafka_version}"
    before = _log_ends(cluster)
    _produce(cluster, 30)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    committed = {p: before[p] + c for p, c in {0: 7, 1: 4, 2: 10}.items()}   # below the log end: the lag is the rest
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
        workdir = str(tmp_path)
        zk, zk_port = _zookeeper(workdir)
        http_port = free_port()
        _burrow_config(workdir, zk_port, http_port, cluster.bootstrap, kafka_version)
        burrow = _Proc([BURROW, "--config-dir", workdir], workdir, "burrow")
        try:
            base = f"http://127.0.0.1:{http_port}/v3/kafka/lab"
            ends = _log_ends(cluster)
            assert ends == {p: before[p] + 10 for p in range(PARTITIONS)}

            def lag_is(expected_ends: dict[int, int]):
                def check() -> bool:
                    assert burrow.proc.poll() is None, burrow.text()
                    try:
                        status = _get(f"{base}/consumer/{group}/lag")["status"]
                    except (OSError, ValueError):
                        return False
                    parts = {p["partition"]: p for p in status["partitions"] if p["topic"] == TOPIC}
                    return (sorted(parts) == list(range(PARTITIONS))
                            and all(parts[p]["end"]["offset"] == committed[p]
                                    and parts[p]["current_lag"] == expected_ends[p] - committed[p]
                                    for p in parts)
                            and status["totallag"] == sum(expected_ends[p] - committed[p] for p in parts))
                return check
            wait_until(lag_is(ends), 60, f"Burrow's lag for {group}", interval_s=0.5)
            # the broker's offsets as Burrow saw them (ListOffsets v0, the old-style array)
            topic_offsets = _get(f"{base}/topic/{TOPIC}")["offsets"]
            assert topic_offsets == [ends[p] for p in range(PARTITIONS)]
            # a producer moves the log end on; a new commit makes Burrow evaluate again
            _produce(cluster, 12)
            ends = _log_ends(cluster)
            assert ends == {p: before[p] + 14 for p in range(PARTITIONS)}
            committed[1] = before[1] + 9
            consumer.commit({TopicPartition(TOPIC, 1): OffsetAndMetadata(committed[1], "", -1)})
            wait_until(lag_is(ends), 60, f"Burrow's lag for {group} after more records", interval_s=0.5)
            assert "UNSUPPORTED_VERSION" not in burrow.text()
            for b in cluster.brokers:
                assert b.alive(), b.stderr()
        finally:
            burrow.stop()
            zk.stop()
    finally:
        consumer.close()


def test_kafka_python_pinned_to_old_versions_is_served(cluster):
    """kafka-python with ``api_version=(0, 10, 0)`` sends ListOffsets v0 (its offset
    resets), Fetch v2 (records down-converted to magic 1), OffsetCommit v2 / OffsetFetch v1;
    its admin client at ``(0, 11)`` DescribeConfigs v0; its producer there Produce v2 with
    gzip magic-1 message sets (up-converted to v2 batches). Each is answered: every record
    consumed (by the old consumer and by confluent-kafka), offsets committed and read back,
    the topic's configs described."""
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.structs import OffsetAndMetadata
    _produce(cluster, 9)
    # the old producer: Produce v2 with gzip-compressed magic-1 message sets (up-converted)
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=(0, 10, 0), acks="all",
                             compression_type="gzip", enable_idempotence=False, linger_ms=5)
    try:
        futures = [producer.send(TOPIC, b"v-old-%d" % i, partition=i % PARTITIONS) for i in range(6)]
        producer.flush(30)
        assert all(f.get(30).offset >= 0 for f in futures)
    finally:
        producer.close()
    ends = _log_ends(cluster)
    assert sum(ends.values()) >= 15
    # ... which a current client reads back like any other record
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition as CTP
    modern = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe-modern",
                       "enable.auto.commit": False})
    try:
        modern.assign([CTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < sum(ends.values()) and time.monotonic() < deadline:
            m = modern.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert sorted(v for v in seen if v.startswith(b"v-old-")) == sorted(b"v-old-%d" % i for i in range(6))
    finally:
        modern.close()
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id="old-kp", api_version=(0, 10, 0),
                      enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(tps)
        assert c.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}       # ListOffsets v0, latest
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}                   # ListOffsets v0, earliest
        got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < sum(ends.values()) and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.value) for m in msgs]
        for p in range(PARTITIONS):   # every offset once, in order, with the produced values
            assert [o for o, _ in got[p]] == list(range(ends[p]))
            assert all(v.startswith(b"v") for _, v in got[p])
        c.commit({tps[0]: OffsetAndMetadata(3, "m", -1)})
        assert c.committed(tps[0]) == 3
    finally:
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, api_version=(0, 11), request_timeout_ms=30000)
    try:
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)], config_filter="all")
        policy = configs["topic"][TOPIC]["cleanup.policy"]
        # v0's is_default (kafka-python derives the source from it, as Kafka's client does)
        assert policy["value"] == "delete" and policy["is_default"] is True
        assert policy["config_source"] == "DEFAULT_CONFIG"
    finally:
        admin.close()
    # what those pins let kafka-python send: the old versions only (its own table)
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
    assert BROKER_API_VERSIONS[(0, 10, 0)][2] == (0, 0) and BROKER_API_VERSIONS[(0, 10, 0)][1] == (0, 2)
    assert BROKER_API_VERSIONS[(0, 10, 0)][0] == (0, 2)   # Produce v2: magic-1 message sets
    assert BROKER_API_VERSIONS[(0, 11)][32] == (0, 0)


def test_raw_old_versions_offset_commit_v1_and_list_offsets_v0(cluster):
    """OffsetCommit v1 keeps the client's commit timestamp (read back through the group's
    offsets — the commit is stored); ListOffsets v0 returns up to ``max_num_offsets``
    offsets, newest first; OffsetCommit v0 / OffsetFetch v0 are UNSUPPORTED_VERSION per
    partition (ZooKeeper's in Kafka 3.9); Fetch v2 carries a magic-1 message set; Fetch v17
    (above the range) gets UNSUPPORTED_VERSION and the connection stays open."""
    image = cluster.image()
    topic_id = image.topic_ids[TOPIC]
    leader = {p: image.partition(topic_id, p).leader for p in range(PARTITIONS)}
    ends = _log_ends(cluster)

    async def go():
        fc = await _coordinator(cluster, "raw-old")
        conn = await RawConnection.open(fc)
        try:
            mod = wire.request_module(8, 1)
            req = wire.request_class(8, 1)(group_id="raw-old", generation_id_or_member_epoch=-1, member_id="",
                                           topics=(mod.OffsetCommitRequestTopic(name=TOPIC, partitions=(
                                               mod.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                                commit_timestamp=1234567,
                                                                                committed_metadata="v1"),)),))
            resp = await conn.call(req)
            assert resp.topics[0].partitions[0].error_code is ErrorCode.none
            mod0 = wire.request_module(8, 0)
            resp0 = await conn.call(wire.request_class(8, 0)(group_id="raw-old", topics=(
                mod0.OffsetCommitRequestTopic(name=TOPIC, partitions=(mod0.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=6, committed_metadata=""),)),)))
            assert resp0.topics[0].partitions[0].error_code is ErrorCode.unsupported_version
            fmod = wire.request_module(9, 1)
            for v in (0, 1):
                fmod = wire.request_module(9, v)
                f = await conn.call(wire.request_class(9, v)(group_id="raw-old", topics=(
                    fmod.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),)))
                part = f.topics[0].partitions[0]
                if v == 0:
                    assert part.error_code is ErrorCode.unsupported_version and part.committed_offset == -1
                else:   # the v1 commit is there, the v0 one was not stored
                    assert (part.error_code, part.committed_offset, part.metadata) == (ErrorCode.none, 5, "v1")
            # the v1 commit's own timestamp is what the coordinator wrote to __consumer_offsets
            part = R.partition_for("raw-old", 3)
            data = (await conn.call(fetch_request(12, "__consumer_offsets", part, 0))).responses[0].partitions[0]
            stamps = [R.decode_offset(v).commit_timestamp_ms for _o, k, v in R.decode_batches(bytes(data.records))
                      if v is not None and R.decode_key(k) == R.OffsetKey("raw-old", TOPIC, 0)]
            assert stamps == [1234567]
        finally:
            await conn.close()
        port = next(b.port for b in cluster.brokers if b.node_id == leader[0])
        conn = await RawConnection.open(port)
        try:
            lmod = wire.request_module(2, 0)

            def list_v0(ts: int, n: int):
                return wire.request_class(2, 0)(replica_id=-1, topics=(lmod.ListOffsetsTopic(name=TOPIC, partitions=(
                    lmod.ListOffsetsPartition(partition_index=0, timestamp=ts, max_num_offsets=n),)),))
            latest = (await conn.call(list_v0(-1, 5))).topics[0].partitions[0]
            assert latest.error_code is ErrorCode.none and latest.old_style_offsets == (ends[0], 0)
            one = (await conn.call(list_v0(-1, 1))).topics[0].partitions[0]
            assert one.old_style_offsets == (ends[0],)
            earliest = (await conn.call(list_v0(-2, 1))).topics[0].partitions[0]
            assert earliest.old_style_offsets == (0,)
            bad = (await conn.call(list_v0(-3, 1))).topics[0].partitions[0]
            assert bad.error_code is ErrorCode.unsupported_version and bad.old_style_offsets == ()
            # a version above the served range (Fetch v17: kio knows it, the broker serves
            # up to v16) → UNSUPPORTED_VERSION from the header alone, the connection stays
            refused = await conn.call(fetch_request(17, topic_id, 0, 0))
            assert refused.error_code is ErrorCode.unsupported_version and refused.responses == ()
            # Fetch v2 (served): the records as a magic-1 message set, read by kafka-python
            old = (await conn.call(fetch_request(2, TOPIC, 0, 0))).responses[0].partitions[0]
            assert old.error_code is ErrorCode.none and old.high_watermark == ends[0]
            from kafka.record.memory_records import MemoryRecords
            records, offsets = MemoryRecords(bytes(old.records)), []
            while (batch := records.next_batch()) is not None:
                assert batch.magic == 1
                offsets += [r.offset for r in batch]
            assert offsets == list(range(ends[0]))
            again = (await conn.call(list_v0(-2, 1))).topics[0].partitions[0]
            assert again.old_style_offsets == (0,)   # the same connection still serves
        finally:
            await conn.close()
    asyncio.run(go())


async def _coordinator(cluster, group: str) -> int:
    conn = await RawConnection.open(cluster.brokers[0].port)
    try:
        for _ in range(200):
            fc = await conn.call(wire.make(wire.request_class(10, 3), key=group, key_type=0))
            if fc.error_code is ErrorCode.none:
                return fc.port
            await asyncio.sleep(0.1)
        raise AssertionError(f"no coordinator for {group}: {fc}")
    finally:
        await conn.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="Debian's kcat (scripts/bootstrap.sh installs it)")
@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0", "0.10.0"])
def test_kcat_with_an_old_broker_version_fallback(cluster, fallback):
    """librdkafka 2.0.2 (Debian's kcat) told not to ask ApiVersions and to assume an old broker
    (``broker.version.fallback``): Produce v0/v1/v2 with message formats v0 (0.8.2, 0.9.0) or
    v1 (0.10.0) in every codec — lz4 at v0 in Kafka 0.8's framing —, then Metadata v0,
    ListOffsets v0 and Fetch v0–v2 read every value back byte for byte."""
    topic = f"kcat-{fallback.replace('.', '')}"
    cluster.create_topic(topic, {0: [1, 2, 3]})
    cluster.wait_image(lambda im: topic in im.topic_ids and len(im.partition(im.topic_ids[topic], 0).isr) == 3,
                       20, f"{topic} ISR 3")
    old = ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]
    sent = []
    for codec in ("none", "gzip", "snappy", "lz4"):
        values = [f"{fallback}-{codec}-{i}-" + "x" * (40 * i) for i in range(4)]
        p = subprocess.run(["kcat", "-b", cluster.bootstrap, *old, "-P", "-t", topic, "-p", "0", "-z", codec,
                            "-X", "acks=all"], input="\n".join(values).encode() + b"\n", capture_output=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        sent += values
    got = subprocess.run(["kcat", "-b", cluster.bootstrap, *old, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                          "-e", "-f", "%o %s\n"], capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr.decode()[-2000:]
    lines = got.stdout.decode().splitlines()
    assert lines == [f"{i} {v}" for i, v in enumerate(sent)]
