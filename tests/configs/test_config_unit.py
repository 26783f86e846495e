"""Topic configs, pure: validation, IncrementalAlterConfigs operations, resolution order,
ConfigRecord replay and snapshots, and the controller's CreateTopics / (Incremental)
AlterConfigs handlers (records through the real encoder, replayed into the image)."""

import sys
from pathlib import Path

import pytest
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.create_topics.v7 import request as ct7
from kio.schema.incremental_alter_configs.v1 import request as iac1

from kafka_common import topic_config as tc
from kafka_common.config import default_text, parse_config, ConfigError
from kafka_common.metadata import records as r
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.image import MetadataImage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controller" / "unit"))
from controller_harness import Harness, dir_id as d, kinds  # noqa: E402

pytestmark = pytest.mark.unit
STATIC = tc.static_from_server_config({}, default_text)


# --- validation -------------------------------------------------------------------

@pytest.mark.parametrize("name,value,fragment", [
    ("retention.ms", "abc", "not a number"),
    ("retention.ms", "-2", "must be in [-1"),
    ("segment.bytes", "100", "must be in [1024"),
    ("segment.bytes", str(2**31), "must be in [1024"),
    ("min.insync.replicas", "0", "must be in [1"),
    ("max.message.bytes", "-1", "must be in [0"),
    ("cleanup.policy", "compact", "'compact' is not supported"),
    ("cleanup.policy", "delete,compact", "'compact' is not supported"),
    ("cleanup.policy", "shred", "is not one of"),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
])
def test_invalid_topic_configs_name_the_problem(name, value, fragment):
    with pytest.raises(tc.ConfigProblem) as exc:
        tc.validate(tc.TOPIC, name, value)
    assert fragment in str(exc.value)


def test_valid_topic_configs_parse_to_typed_values():
    assert tc.validate(tc.TOPIC, "retention.ms", "-1") == -1
    assert tc.validate(tc.TOPIC, "retention.bytes", " 4096 ") == 4096
    assert tc.validate(tc.TOPIC, "cleanup.policy", "delete") == ("delete",)
    assert tc.validate(tc.TOPIC, "segment.ms", "1") == 1


def test_only_broker_synonyms_are_dynamic_broker_configs():
    assert tc.validate(tc.BROKER, "log.retention.ms", "1000") == 1000
    with pytest.raises(tc.ConfigProblem, match="dynamically"):
        tc.validate(tc.BROKER, "log.dirs", "/x")
    with pytest.raises(tc.ConfigProblem):
        tc.validate(tc.BROKER, "min.insync.replicas", "0")


def test_incremental_operations():
    cur = {"retention.ms": "5"}
    out = tc.apply_ops(tc.TOPIC, cur, [("retention.ms", tc.DELETE, None), ("retention.bytes", tc.SET, "7")])
    assert out == {"retention.bytes": "7"} and cur == {"retention.ms": "5"}  # input untouched
    assert tc.apply_ops(tc.TOPIC, {}, [("cleanup.policy", tc.APPEND, "delete")]) == {"cleanup.policy": "delete"}
    with pytest.raises(tc.ConfigProblem, match="compact"):
        tc.apply_ops(tc.TOPIC, {}, [("cleanup.policy", tc.APPEND, "compact")])
    with pytest.raises(tc.ConfigProblem, match="at least one"):
        tc.apply_ops(tc.TOPIC, {}, [("cleanup.policy", tc.SUBTRACT, "delete")])
    with pytest.raises(tc.ConfigProblem, match="not a list"):
        tc.apply_ops(tc.TOPIC, {}, [("retention.ms", tc.APPEND, "5")])
    with pytest.raises(tc.ConfigProblem, match="twice"):
        tc.apply_ops(tc.TOPIC, {}, [("retention.ms", tc.SET, "5"), ("retention.ms", tc.SET, "6")])
    with pytest.raises(tc.ConfigProblem, match="Unknown config operation"):
        tc.apply_ops(tc.TOPIC, {}, [("retention.ms", 9, "5")])
    assert tc.apply_ops(tc.TOPIC, {"x": "1"}, [("retention.ms", tc.DELETE, None)]) == {"x": "1"}


def test_resolution_order_and_sources():
    configs = {}
    static = tc.StaticBrokerConfig({"log.retention.ms": "1000"}, {"log.retention.ms": "604800000"})
    got = tc.resolve_topic("t", "retention.ms", 1, configs, static)
    assert (got.value, got.source) == ("1000", tc.STATIC_BROKER_CONFIG)
    assert [s[2] for s in got.synonyms] == [tc.STATIC_BROKER_CONFIG, tc.DEFAULT_CONFIG]
    configs[(tc.BROKER, "")] = {"log.retention.ms": "2000"}
    assert tc.resolve_topic("t", "retention.ms", 1, configs, static).source == tc.DYNAMIC_DEFAULT_BROKER_CONFIG
    configs[(tc.BROKER, "1")] = {"log.retention.ms": "3000"}
    assert tc.resolve_topic("t", "retention.ms", 1, configs, static).value == "3000"
    assert tc.resolve_topic("t", "retention.ms", 2, configs, static).value == "2000"  # another broker
    configs[(tc.TOPIC, "t")] = {"retention.ms": "4000"}
    got = tc.resolve_topic("t", "retention.ms", 1, configs, static)
    assert (got.value, got.source) == ("4000", tc.DYNAMIC_TOPIC_CONFIG)
    assert [s[2] for s in got.synonyms] == [1, 2, 3, 4, 5]
    assert tc.topic_value("t", "retention.ms", 1, configs, static) == 4000
    assert tc.topic_value("other", "min.insync.replicas", 1, configs, STATIC) == 1
    b = tc.resolve_broker("log.retention.ms", 1, configs, static, resource_name="")
    assert (b.value, b.source) == ("2000", tc.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert tc.resolve_broker("log.retention.bytes", 1, configs, static, resource_name="") is None


def test_server_config_keys_for_topic_defaults():
    base = "process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://:9092\nlog.dirs=/tmp/x\n" \
           "controller.quorum.voters=1@h:9093\n"
    cfg = parse_config(base + "log.retention.ms=5000\nlog.retention.bytes=100\nmessage.max.bytes=2000\n")
    assert (cfg.log_retention_ms, cfg.log_retention_bytes, cfg.message_max_bytes) == (5000, 100, 2000)
    assert not cfg.warnings
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        parse_config(base + "log.cleanup.policy=compact\n")
    static = tc.static_from_server_config(cfg.raw, default_text)
    assert tc.topic_value("t", "retention.bytes", 1, {}, static) == 100
    assert tc.resolve_topic("t", "segment.bytes", 1, {}, static).source == tc.DEFAULT_CONFIG


def test_roll_jitter_reaches_the_log_config_from_the_server_and_the_topic():
    from types import SimpleNamespace
    from broker_impl.runtime.retention import topic_log_config
    from broker_impl.storage.log_config import LogConfig
    base = "process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://:9092\nlog.dirs=/tmp/x\n" \
           "controller.quorum.voters=1@h:9093\n"
    assert parse_config(base).log_roll_jitter_ms == 0
    cfg = parse_config(base + "log.roll.ms=3000\nlog.roll.jitter.ms=700\n")
    log_cfg = LogConfig.from_server_config(cfg)
    assert (log_cfg.roll_ms, log_cfg.roll_jitter_ms) == (3000, 700)
    static = tc.static_from_server_config(cfg.raw, default_text)
    image = SimpleNamespace(configs={(tc.TOPIC, "j"): {"segment.jitter.ms": "1500"}})
    config_for = topic_log_config(log_cfg, 1, image, static)
    assert config_for("other").roll_jitter_ms == 700    # log.roll.jitter.ms, the synonym
    assert config_for("j").roll_jitter_ms == 1500       # the topic's own
    with pytest.raises(ConfigError, match="log.roll.jitter.ms"):
        parse_config(base + "log.roll.jitter.ms=-1\n")
    with pytest.raises(tc.ConfigProblem, match="segment.jitter.ms"):
        tc.validate(tc.TOPIC, "segment.jitter.ms", "-5")


# --- records, image, snapshot -------------------------------------------------------

def test_config_record_replay_delete_and_snapshot():
    img = MetadataImage()
    recs = [r.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="10"),
            r.ConfigRecord(resource_type=2, resource_name="t", name="segment.bytes", value="2048"),
            r.ConfigRecord(resource_type=4, resource_name="", name="log.retention.bytes", value="1"),
            r.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value=None)]
    for i, rec in enumerate(recs):
        img.replay(r.decode_record(r.encode_record(rec)), i)
    assert img.configs == {(2, "t"): {"segment.bytes": "2048"}, (4, ""): {"log.retention.bytes": "1"}}
    back, end, _ = snapshot_format.decode(snapshot_format.encode(img, img.last_offset + 1, 1))
    assert back.configs == img.configs and end == 4
    img.replay(r.ConfigRecord(resource_type=2, resource_name="t", name="segment.bytes", value=None), 4)
    assert (2, "t") not in img.configs  # empty resources vanish
    old_style = img.snapshot_state()[:6]  # a version-1 state (before configs) still loads
    assert MetadataImage.from_snapshot_state((1,) + old_style[1:]).configs == {}


# --- controller ---------------------------------------------------------------------

def _cluster() -> Harness:
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    return h


def _create(h: Harness, name: str, configs: dict[str, str], validate_only: bool = False):
    topic = ct7.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                               configs=tuple(ct7.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()))
    res = h.apply(h.state.handle_create_topics(ct7.CreateTopicsRequest(topics=(topic,), validate_only=validate_only),
                                               h.now))
    return res, res.response.topics[0]


def test_create_topic_with_configs_writes_config_records():
    h = _cluster()
    res, t = _create(h, "t", {"retention.ms": "100", "min.insync.replicas": "1"})
    assert t.error_code.value == 0
    assert kinds(res) == ["TopicRecord", "ConfigRecord", "ConfigRecord", "PartitionRecord"]
    assert h.image.configs[(2, "t")] == {"retention.ms": "100", "min.insync.replicas": "1"}


@pytest.mark.parametrize("configs,fragment", [
    ({"bogus": "1"}, "Unknown topic config name"),
    ({"cleanup.policy": "compact"}, "compact"),
    ({"retention.bytes": "x"}, "not a number"),
])
def test_create_topic_bad_configs_invalid_config(configs, fragment):
    h = _cluster()
    res, t = _create(h, "t", configs)
    assert t.error_code.value == 40 and fragment in t.error_message and res.records == ()
    assert "t" not in h.image.topic_ids


def test_create_validate_only_writes_nothing():
    h = _cluster()
    res, t = _create(h, "t", {"retention.ms": "100"}, validate_only=True)
    assert t.error_code.value == 0 and res.records == () and not h.image.configs


def _incremental(h: Harness, resources, validate_only=False):
    req = iac1.IncrementalAlterConfigsRequest(resources=tuple(
        iac1.AlterConfigsResource(resource_type=rt, resource_name=name, configs=tuple(
            iac1.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops))
        for rt, name, ops in resources), validate_only=validate_only)
    res = h.apply(h.state.handle_incremental_alter_configs(req, h.now))
    return res, res.response.responses


def test_incremental_alter_configs_per_resource():
    h = _cluster()
    _create(h, "t", {"retention.ms": "100"})
    res, out = _incremental(h, [(2, "t", [("retention.ms", tc.DELETE, None), ("retention.bytes", tc.SET, "5000")]),
                                (2, "missing", [("retention.ms", tc.SET, "1")]),
                                (2, "t2", []),
                                (4, "", [("log.retention.ms", tc.SET, "60000")]),
                                (4, "1", [("log.dirs", tc.SET, "/x")]),
                                (8, "x", [])])
    assert [o.error_code.value for o in out] == [0, 3, 3, 0, 40, 42]
    assert "dynamically" in out[4].error_message
    assert h.image.configs[(2, "t")] == {"retention.bytes": "5000"}
    assert h.image.configs[(4, "")] == {"log.retention.ms": "60000"}
    _, out = _incremental(h, [(2, "t", [("retention.bytes", tc.SET, "1")])], validate_only=True)
    assert out[0].error_code.value == 0 and h.image.configs[(2, "t")] == {"retention.bytes": "5000"}
    _, out = _incremental(h, [(2, "t", [("segment.bytes", tc.SET, "1")])])
    assert out[0].error_code.value == 40 and "segment.bytes" in out[0].error_message


def test_alter_configs_replaces_the_whole_set():
    h = _cluster()
    _create(h, "t", {"retention.ms": "100", "retention.bytes": "7"})
    req = ac2.AlterConfigsRequest(resources=(ac2.AlterConfigsResource(
        resource_type=2, resource_name="t", configs=(ac2.AlterableConfig(name="segment.ms", value="500"),)),),
        validate_only=False)
    res = h.apply(h.state.handle_alter_configs(req, h.now))
    assert res.response.responses[0].error_code.value == 0
    assert h.image.configs[(2, "t")] == {"segment.ms": "500"}
    assert sorted((x.name, x.value) for x in res.records) == [("retention.bytes", None), ("retention.ms", None),
                                                              ("segment.ms", "500")]
    req = ac2.AlterConfigsRequest(resources=(ac2.AlterConfigsResource(
        resource_type=2, resource_name="t", configs=(ac2.AlterableConfig(name="cleanup.policy", value="compact"),)),),
        validate_only=False)
    res = h.apply(h.state.handle_alter_configs(req, h.now))
    assert res.response.responses[0].error_code.value == 40 and res.records == ()


def test_create_topics_v5_answers_the_resulting_configs():
    h = _cluster()
    _, t = _create(h, "t", {"retention.ms": "100"})
    got = {c.name: (c.value, c.config_source) for c in t.configs}
    assert set(got) == set(tc.TOPIC_CONFIGS)
    assert got["retention.ms"] == ("100", tc.DYNAMIC_TOPIC_CONFIG)
    assert got["segment.bytes"] == ("1073741824", tc.DEFAULT_CONFIG)
