"""Topic configs, retention and DeleteRecords with real clients against 1 kraft-controller
+ 3 kraft-brokers × 3 dirs (real processes on loopback): confluent-kafka's AdminClient
(librdkafka 2.16) and kafka-python's KafkaAdminClient create topics with configs, describe
and alter them; per-topic min.insync.replicas and max.message.bytes are enforced on
produce; retention deletes real segment files on the leader and both followers and moves
the log start offset that ListOffsets and Fetch honour; DeleteRecords moves it on demand."""

from __future__ import annotations

import asyncio
import glob
import os
import sys
import time

import pytest

from testkit.cluster import running_cluster, wait_until  # noqa: E402

from kafka_common import topic_config as tc  # noqa: E402
from kafka_common import wire  # noqa: E402
from testkit.protocol import RawConnection, fetch_request  # noqa: E402

pytestmark = pytest.mark.integration
RETENTION_CHECK_MS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cfg"),
                         broker_extra={"log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
                                       "log.retention.bytes": "-1"}) as c:
        yield c


def admin(cluster):
    """One AdminClient per cluster (a futures' handle must outlive the call)."""
    from confluent_kafka.admin import AdminClient
    if getattr(cluster, "admin_client", None) is None:
        cluster.admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return cluster.admin_client


def create(cluster, name: str, configs: dict[str, str], rf: int = 3, validate_only: bool = False):
    from confluent_kafka.admin import NewTopic
    fut = admin(cluster).create_topics([NewTopic(name, num_partitions=1, replication_factor=rf, config=configs)],
                                       validate_only=validate_only, request_timeout=30)[name]
    return fut.result(30)


def describe_topic(cluster, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin(cluster).describe_configs([res], request_timeout=30)[res].result(30)


def wait_configs(cluster, name: str, pred, what: str) -> None:
    """Every broker replays the ConfigRecord: the image of each shows it (DescribeConfigs
    is answered by whichever broker the client picks)."""
    wait_until(lambda: all(pred(describe_broker_view(cluster, b, name)) for b in cluster.brokers), 20, what)


def describe_broker_view(cluster, broker, name: str) -> dict[str, str]:
    """DescribeConfigs of a topic sent to one given broker (raw protocol)."""

    async def run():
        c = await RawConnection.open(broker.port)
        try:
            mod = wire.request_module(32, 4)
            req = wire.make(wire.request_class(32, 4), resources=(
                mod.DescribeConfigsResource(resource_type=2, resource_name=name, configuration_keys=None),),
                include_synonyms=False, include_documentation=False)
            resp = await c.call(req)
        finally:
            await c.close()
        return {e.name: e.value for e in resp.results[0].configs}
    return asyncio.run(run())


def test_create_with_configs_and_describe_confluent(cluster):
    from confluent_kafka.admin import ConfigSource
    create(cluster, "cfg-a", {"retention.ms": "86400000", "min.insync.replicas": "2"})
    wait_configs(cluster, "cfg-a", lambda c: c.get("retention.ms") == "86400000", "cfg-a configs on every broker")
    got = describe_topic(cluster, "cfg-a")
    assert set(got) == set(tc.TOPIC_CONFIGS)
    assert got["retention.ms"].value == "86400000"
    assert got["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["min.insync.replicas"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    synonyms = got["retention.ms"].synonyms
    assert "log.retention.ms" in synonyms  # the broker key it falls back to
    # min.insync.replicas=2 is set in every broker's server.properties (testkit.cluster FAST)
    assert got["cleanup.policy"].value == "delete"


@pytest.mark.parametrize("configs,fragment", [
    ({"no.such.config": "1"}, "Unknown topic config name"),
    ({"cleanup.policy": "compact"}, "compact"),
    ({"retention.ms": "soon"}, "not a number"),
])
def test_create_with_bad_config_is_invalid_config(cluster, configs, fragment):
    from confluent_kafka import KafkaException
    with pytest.raises(KafkaException) as exc:
        create(cluster, "cfg-bad", configs)
    err = exc.value.args[0]
    assert err.code() == 40 and fragment in err.str()  # INVALID_CONFIG with the reason
    assert "cfg-bad" not in cluster.image().topic_ids


def test_create_validate_only_creates_nothing(cluster):
    create(cluster, "cfg-validate", {"retention.ms": "1000"}, validate_only=True)
    assert "cfg-validate" not in cluster.image().topic_ids


def test_broker_resource_describe_confluent(cluster):
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType
    b = cluster.brokers[0]
    res = ConfigResource(ResourceType.BROKER, str(b.node_id))
    got = admin(cluster).describe_configs([res], request_timeout=30)[res].result(30)
    assert got["min.insync.replicas"].value == "2"
    assert got["min.insync.replicas"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert got["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["node.id"].value == str(b.node_id) and got["node.id"].is_read_only


def test_incremental_alter_configs_confluent(cluster):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType
    create(cluster, "cfg-inc", {"retention.ms": "5000"})
    a = admin(cluster)
    res = ConfigResource(ResourceType.TOPIC, "cfg-inc", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.bytes", "123456", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=30)[res].result(30)
    wait_configs(cluster, "cfg-inc", lambda c: c.get("retention.bytes") == "123456" and c["retention.ms"] != "5000",
                 "the change on every broker")
    got = describe_topic(cluster, "cfg-inc")
    assert got["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    bad = ConfigResource(ResourceType.TOPIC, "cfg-inc", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(KafkaException) as exc:
        a.incremental_alter_configs([bad], request_timeout=30)[bad].result(30)
    assert exc.value.args[0].code() == 40 and "compact" in exc.value.args[0].str()


def test_kafka_python_describe_and_alter_configs(cluster):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        a.create_topics([NewTopic("cfg-kp", 1, 3,
                                  topic_configs={"segment.ms": "600000", "segment.jitter.ms": "1000"})])
        wait_configs(cluster, "cfg-kp", lambda c: c.get("segment.ms") == "600000", "cfg-kp configs")
        # default: IncrementalAlterConfigs (SET)
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp", configs={"retention.ms": "7777"})])
        wait_configs(cluster, "cfg-kp", lambda c: c.get("retention.ms") == "7777", "altered retention.ms")
        # AlterConfigs: kafka-python describes first and resends the other dynamic keys
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp", configs={"retention.bytes": "99999"})],
                        incremental=False)
        wait_configs(cluster, "cfg-kp", lambda c: c.get("retention.bytes") == "99999", "altered retention.bytes")
        entries = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp")], include_synonyms=True,
                                     config_filter="all")["topic"]["cfg-kp"]
        assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == \
            ("7777", "DYNAMIC_TOPIC_CONFIG")
        assert entries["segment.ms"]["value"] == "600000"
        assert (entries["segment.jitter.ms"]["value"], entries["segment.jitter.ms"]["config_source"]) == \
            ("1000", "DYNAMIC_TOPIC_CONFIG")
        assert entries["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
        only = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg-kp", configs={"retention.ms": None})])
        assert set(only["topic"]["cfg-kp"]) == {"retention.ms"}
    finally:
        a.close()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # the legacy API is what this tests
def test_alter_configs_replaces_the_set_confluent(cluster):
    from confluent_kafka.admin import ConfigResource, ResourceType
    create(cluster, "cfg-replace", {"segment.ms": "600000", "retention.ms": "5000"})
    res = ConfigResource(ResourceType.TOPIC, "cfg-replace", set_config={"retention.bytes": "4242"})
    admin(cluster).alter_configs([res], request_timeout=30)[res].result(30)
    wait_configs(cluster, "cfg-replace", lambda c: c.get("retention.bytes") == "4242", "replaced set")
    got = describe_topic(cluster, "cfg-replace")
    assert got["segment.ms"].value == "604800000" and got["retention.ms"].value == "604800000"  # back to defaults


def test_per_topic_min_insync_and_max_message_bytes(cluster):
    # RF 2 with min.insync.replicas 3 can never take acks=all; the broker default (2) can
    create(cluster, "cfg-misr", {"min.insync.replicas": "3"}, rf=2)
    create(cluster, "cfg-misr-ok", {}, rf=2)
    create(cluster, "cfg-size", {"max.message.bytes": "1000"})
    im = cluster.wait_image(lambda im: all(t in im.topic_ids for t in ("cfg-misr", "cfg-misr-ok", "cfg-size")),
                            20, "topics")
    wait_configs(cluster, "cfg-size", lambda c: c.get("max.message.bytes") == "1000", "max.message.bytes")
    wait_configs(cluster, "cfg-misr", lambda c: c.get("min.insync.replicas") == "3", "min.insync.replicas")

    def leader(topic):
        reg = cluster.image().partition(im.topic_ids[topic], 0)
        wait_until(lambda: len(cluster.image().partition(im.topic_ids[topic], 0).isr) == len(reg.replicas), 20, "isr")
        return next(b for b in cluster.brokers if b.node_id == reg.leader)

    def produce(topic, values, acks=-1):
        """The leader's answer once its own image has the partition (the controller's may be
        ahead of it for a moment: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER)."""
        deadline = time.monotonic() + 20
        while True:
            code = cluster.produce_raw(leader(topic), topic, 0, values, acks=acks)[0]
            if code not in (3, 6) or time.monotonic() > deadline:
                return code
            time.sleep(0.1)
    assert produce("cfg-misr", [b"x"], acks=-1) == 19  # NOT_ENOUGH_REPLICAS
    assert produce("cfg-misr", [b"x"], acks=1) == 0
    assert produce("cfg-misr-ok", [b"x"], acks=-1) == 0
    assert produce("cfg-size", [b"y" * 2000]) == 10  # MESSAGE_TOO_LARGE
    assert produce("cfg-size", [b"y" * 100]) == 0


def segment_files(broker, topic: str) -> list[str]:
    out = []
    for d in broker.dirs:
        out += sorted(glob.glob(os.path.join(d, f"{topic}-0", "*.log")))
    return out


def produce_many(cluster, topic: str, n: int, size: int, timestamp_ms: int | None = None) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 1, "enable.idempotence": True})
    for i in range(n):
        kw = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        p.produce(topic, value=(b"%06d" % i) + b"v" * (size - 6), partition=0, **kw)
        p.poll(0)
    assert p.flush(30) == 0


def earliest_latest(cluster, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    finally:
        c.close()


def raw_fetch_error(cluster, topic: str, offset: int) -> int:
    im = cluster.image()
    tid = im.topic_ids[topic]
    leader = next(b for b in cluster.brokers if b.node_id == im.partition(tid, 0).leader)

    async def run():
        c = await RawConnection.open(leader.port)
        try:
            resp = await c.call(fetch_request(12, topic, 0, offset))
        finally:
            await c.close()
        return int(resp.responses[0].partitions[0].error_code.value)
    return asyncio.run(run())


def test_retention_by_size_deletes_segments_on_every_replica(cluster):
    create(cluster, "ret-size", {"segment.bytes": "4096", "retention.bytes": "8192"})
    wait_configs(cluster, "ret-size", lambda c: c.get("segment.bytes") == "4096", "segment.bytes")
    produce_many(cluster, "ret-size", 120, 500)   # ~70 KB → ~16 segments of 4 KiB
    # every replica (leader and both followers) keeps at most ~8 KiB + the active segment
    for b in cluster.brokers:
        wait_until(lambda b=b: 0 < len(segment_files(b, "ret-size")) <= 4, 30,
                   f"broker {b.node_id} deleted old segments")
    low, high = earliest_latest(cluster, "ret-size")
    assert high == 120 and 0 < low < 120
    assert raw_fetch_error(cluster, "ret-size", 0) == 1          # OFFSET_OUT_OF_RANGE below the log start
    assert raw_fetch_error(cluster, "ret-size", high - 1) == 0   # the newest records are kept
    first = min(int(os.path.basename(f)[:20]) for f in segment_files(cluster.brokers[0], "ret-size"))
    assert first > 0
    events = [e for b in cluster.brokers for e in b.events() if e["event"] == "retention_deleted"]
    assert len({e["node_id"] for e in events}) == 3                # leader and followers, each on its own log


def test_retention_by_time_deletes_everything_old(cluster):
    create(cluster, "ret-time", {"segment.bytes": "4096", "retention.ms": "60000"})
    wait_configs(cluster, "ret-time", lambda c: c.get("retention.ms") == "60000", "retention.ms")
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce_many(cluster, "ret-time", 40, 500, timestamp_ms=hour_ago)
    wait_until(lambda: earliest_latest(cluster, "ret-time") == (40, 40), 30, "log start = log end (all expired)")
    for b in cluster.brokers:
        wait_until(lambda b=b: [int(os.path.basename(f)[:20]) for f in segment_files(b, "ret-time")] == [40], 30,
                   f"broker {b.node_id}: only the new empty segment")
    produce_many(cluster, "ret-time", 5, 100)  # fresh records stay
    time.sleep(3 * RETENTION_CHECK_MS / 1000)
    assert earliest_latest(cluster, "ret-time") == (40, 45)


def test_delete_records_confluent_moves_log_start_on_all_replicas(cluster):
    from confluent_kafka import KafkaException, TopicPartition
    create(cluster, "del-rec", {"segment.bytes": "4096"})
    wait_configs(cluster, "del-rec", lambda c: c.get("segment.bytes") == "4096", "segment.bytes")
    produce_many(cluster, "del-rec", 100, 500)
    a = admin(cluster)
    tp = TopicPartition("del-rec", 0, 60)
    result = a.delete_records([tp], request_timeout=30)[tp].result(30)
    assert result.low_watermark == 60
    assert earliest_latest(cluster, "del-rec") == (60, 100)
    assert raw_fetch_error(cluster, "del-rec", 59) == 1
    def dropped_below_60(b) -> bool:  # only the segment holding 60 and later ones are left
        bases = sorted(int(os.path.basename(f)[:20]) for f in segment_files(b, "del-rec"))
        return bool(bases) and 0 < bases[0] <= 60 and (len(bases) == 1 or bases[1] > 60)
    for b in cluster.brokers:  # followers learn it from the fetch answers: whole segments below go
        wait_until(lambda b=b: dropped_below_60(b), 30, f"broker {b.node_id} dropped the segments below 60")
    tp = TopicPartition("del-rec", 0, 1000)
    with pytest.raises(KafkaException) as exc:
        a.delete_records([tp], request_timeout=30)[tp].result(30)
    assert exc.value.args[0].code() == 1  # OFFSET_OUT_OF_RANGE above the high watermark


def test_delete_records_kafka_python(cluster):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    create(cluster, "del-kp", {})
    produce_many(cluster, "del-kp", 10, 50)
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        out = a.delete_records({TopicPartition("del-kp", 0): 4})
    finally:
        a.close()
    low = out[TopicPartition("del-kp", 0)]
    assert (low["low_watermark"] if isinstance(low, dict) else low) == 4
    assert earliest_latest(cluster, "del-kp") == (4, 10)


def test_altered_segment_and_retention_configs_apply_to_an_existing_log(cluster):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    create(cluster, "ret-dyn", {})
    produce_many(cluster, "ret-dyn", 10, 500)
    assert all(len(segment_files(b, "ret-dyn")) == 1 for b in cluster.brokers)
    res = ConfigResource(ResourceType.TOPIC, "ret-dyn", incremental_configs=[
        ConfigEntry("segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", "8192", incremental_operation=AlterConfigOpType.SET)])
    admin(cluster).incremental_alter_configs([res], request_timeout=30)[res].result(30)
    wait_configs(cluster, "ret-dyn", lambda c: c.get("segment.bytes") == "4096", "segment.bytes on every broker")
    time.sleep(1.5)  # the logs take a config change within a second
    produce_many(cluster, "ret-dyn", 100, 500)
    for b in cluster.brokers:
        wait_until(lambda b=b: earliest_segment(b, "ret-dyn") > 0 and len(segment_files(b, "ret-dyn")) <= 4, 30,
                   f"broker {b.node_id} rolled small segments and deleted old ones")
    assert earliest_latest(cluster, "ret-dyn")[0] > 0


def earliest_segment(broker, topic: str) -> int:
    files = segment_files(broker, topic)
    return min(int(os.path.basename(f)[:20]) for f in files) if files else -1
