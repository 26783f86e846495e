"""Topic and dynamic broker configs: definitions, validation, resolution (pure).

Configs are stored in the metadata log as ConfigRecords (resource type, resource name,
config name, value; a null value deletes) and replayed into ``MetadataImage.configs``
(``{(resource_type, resource_name): {name: value}}``). This module says which names exist,
which values are valid, and which value is in force:

    topic override (DYNAMIC_TOPIC_CONFIG)
    → dynamic config of the broker (DYNAMIC_BROKER_CONFIG, resource name = its node id)
    → dynamic cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG, resource name "")
    → the broker's server.properties (STATIC_BROKER_CONFIG, when the key is set there)
    → the built-in default (DEFAULT_CONFIG)

Every topic config has one broker synonym (``retention.ms`` ↔ ``log.retention.ms``), as in
Kafka. Only the synonyms may be set dynamically on a broker resource; the other broker keys
are described read-only from ``server.properties``.

``cleanup.policy=compact`` is refused (INVALID_CONFIG): this broker has no log cleaner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from kafka_common.errors import KafkaCommonError

TOPIC, BROKER = 2, 4  # ConfigResource types (Kafka's ConfigResource.Type)

# DescribeConfigs config_source values
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# DescribeConfigs config_type values (v3+)
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7

I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1


class ConfigProblem(KafkaCommonError, ValueError):
    """A config name or value that cannot be accepted (answered INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    config_type: int
    default: str
    lo: int | None = None
    hi: int | None = None
    synonym: str | None = None  # the broker key a topic config falls back to
    doc: str = ""

    def parse(self, value: str | None) -> object:
        """The typed value; raises :class:`ConfigProblem` with a message naming the key."""
        if value is None:
            raise ConfigProblem(f"{self.name}: a value is required")
        if self.config_type in (INT, LONG):
            try:
                n = int(value.strip())
            except ValueError:
                raise ConfigProblem(f"Invalid value {value!r} for configuration {self.name}: "
                                    f"not a number") from None
            hi = self.hi if self.hi is not None else (I32_MAX if self.config_type == INT else I64_MAX)
            if (self.lo is not None and n < self.lo) or n > hi:
                raise ConfigProblem(f"Invalid value {value} for configuration {self.name}: "
                                    f"must be in [{self.lo}, {hi}]")
            return n
        if self.config_type == BOOLEAN:
            if value.strip().lower() not in ("true", "false"):
                raise ConfigProblem(f"Invalid value {value!r} for configuration {self.name}: "
                                    f"expected true or false")
            return value.strip().lower() == "true"
        if self.config_type == LIST:
            items = [p.strip() for p in value.split(",") if p.strip()]
            if self.name in ("cleanup.policy", "log.cleanup.policy"):
                if not items:
                    raise ConfigProblem(f"Invalid value {value!r} for configuration {self.name}: "
                                        f"at least one policy is required")
                for item in items:
                    if item == "compact":
                        raise ConfigProblem(f"Invalid value {value!r} for configuration {self.name}: "
                                            f"'compact' is not supported (this broker has no log "
                                            f"cleaner); only 'delete' is")
                    if item != "delete":
                        raise ConfigProblem(f"Invalid value {value!r} for configuration {self.name}: "
                                            f"{item!r} is not one of [delete, compact]")
            return tuple(items)
        return value


def _topic(name: str, t: int, default: str, synonym: str, doc: str, lo: int | None = None) -> ConfigDef:
    return ConfigDef(name, t, default, lo=lo, synonym=synonym, doc=doc)


TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    _topic("cleanup.policy", LIST, "delete", "log.cleanup.policy",
           "The retention policy of old log segments: 'delete' (by time and size)."),
    _topic("min.insync.replicas", INT, "1", "min.insync.replicas",
           "The minimum number of in-sync replicas for an acks=all produce to succeed.", lo=1),
    _topic("retention.ms", LONG, "604800000", "log.retention.ms",
           "How long a segment is kept after its newest record (-1: no time limit).", lo=-1),
    _topic("retention.bytes", LONG, "-1", "log.retention.bytes",
           "The largest size a partition's log may grow to before old segments are "
           "deleted (-1: no size limit).", lo=-1),
    _topic("segment.bytes", INT, "1073741824", "log.segment.bytes",
           "The segment file size of the log.", lo=1024),
    _topic("segment.ms", LONG, "604800000", "log.roll.ms",
           "The time after which a new segment is rolled even if the current one is not full.", lo=1),
    _topic("segment.jitter.ms", LONG, "0", "log.roll.jitter.ms",
           "The largest random amount subtracted from segment.ms for each segment, so the "
           "partitions of a topic created at once do not all roll together.", lo=0),
    _topic("max.message.bytes", INT, "1048588", "message.max.bytes",
           "The largest record batch size this topic accepts (MESSAGE_TOO_LARGE above).", lo=0),
    _topic("unclean.leader.election.enable", BOOLEAN, "false", "unclean.leader.election.enable",
           "Whether a replica outside the ISR may be elected leader when no ISR member can "
           "lead (data loss for availability); the controller checks every second."),
)}

# broker keys that may be set dynamically: the synonyms of the topic configs
DYNAMIC_BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.synonym: ConfigDef(d.synonym, d.config_type, d.default, lo=d.lo, hi=d.hi, doc=d.doc)
    for d in TOPIC_CONFIGS.values() if d.synonym
}

# broker keys described read-only (from server.properties) besides the dynamic ones
STATIC_BROKER_KEYS: tuple[tuple[str, int], ...] = (
    ("node.id", INT), ("process.roles", LIST), ("listeners", LIST), ("advertised.listeners", LIST),
    ("log.dirs", LIST), ("metadata.log.dir", STRING), ("num.partitions", INT),
    ("default.replication.factor", INT), ("auto.create.topics.enable", BOOLEAN),
    ("log.retention.check.interval.ms", LONG), ("replica.lag.time.max.ms", LONG),
    ("log.dir.failure.timeout.ms", LONG), ("controller.quorum.voters", LIST),
)


def defs_for(resource_type: int) -> Mapping[str, ConfigDef]:
    return TOPIC_CONFIGS if resource_type == TOPIC else DYNAMIC_BROKER_CONFIGS


def _definition(resource_type: int, name: str) -> ConfigDef:
    d = defs_for(resource_type).get(name)
    if d is None:
        if resource_type == TOPIC:
            raise ConfigProblem(f"Unknown topic config name: {name}")
        raise ConfigProblem(f"Cannot update broker config {name} dynamically (dynamic broker configs: "
                            f"{', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})")
    return d


def validate(resource_type: int, name: str, value: str | None) -> object:
    """The parsed value of a config to be set; raises :class:`ConfigProblem`."""
    return _definition(resource_type, name).parse(value)


# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def apply_ops(resource_type: int, current: Mapping[str, str],
              ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """``current`` after IncrementalAlterConfigs ``ops`` ((name, op, value) each); raises
    :class:`ConfigProblem` (INVALID_CONFIG) for an unknown name, a bad value, APPEND/SUBTRACT
    on a non-list config or an unknown operation. Deleting an unset key is a no-op."""
    out = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise ConfigProblem(f"Config {name} is listed twice in one request")
        seen.add(name)
        d = _definition(resource_type, name)
        if op == SET:
            d.parse(value)
            out[name] = value if value is not None else ""
        elif op == DELETE:
            out.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if d.config_type != LIST:
                raise ConfigProblem(f"Config {name} is not a list: {'APPEND' if op == APPEND else 'SUBTRACT'} "
                                    f"is only allowed on list configs")
            base = out.get(name, d.default)
            items = [p.strip() for p in base.split(",") if p.strip()]
            given = [p.strip() for p in (value or "").split(",") if p.strip()]
            if op == APPEND:
                items += [g for g in given if g not in items]
            else:
                items = [i for i in items if i not in given]
            joined = ",".join(items)
            d.parse(joined)
            out[name] = joined
        else:
            raise ConfigProblem(f"Unknown config operation {op} for {name}")
    return out


# --- resolution --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    value: str
    source: int
    synonyms: tuple[tuple[str, str, int], ...]  # (name, value, source), most specific first
    config_type: int
    doc: str


class StaticBrokerConfig:
    """One broker's server.properties as seen by config resolution: the value of a key and
    whether it was set there (STATIC_BROKER_CONFIG) or is the built-in default."""

    def __init__(self, raw: Mapping[str, str], values: Mapping[str, str] | None = None) -> None:
        self.raw = dict(raw)
        self.values = dict(values or {})

    def get(self, key: str) -> tuple[str, int] | None:
        if key in self.raw:
            return self.raw[key], STATIC_BROKER_CONFIG
        if key in self.values:
            return self.values[key], DEFAULT_CONFIG
        return None


def _broker_chain(key: str, node_id: int, configs: Mapping[tuple[int, str], Mapping[str, str]],
                  static: StaticBrokerConfig, default: str) -> list[tuple[str, str, int]]:
    chain = []
    own = configs.get((BROKER, str(node_id)), {})
    if key in own:
        chain.append((key, own[key], DYNAMIC_BROKER_CONFIG))
    cluster = configs.get((BROKER, ""), {})
    if key in cluster:
        chain.append((key, cluster[key], DYNAMIC_DEFAULT_BROKER_CONFIG))
    got = static.get(key)
    if got is not None and got[1] == STATIC_BROKER_CONFIG:
        chain.append((key, got[0], STATIC_BROKER_CONFIG))
    chain.append((key, default, DEFAULT_CONFIG))
    return chain


def resolve_topic(topic: str, name: str, node_id: int,
                  configs: Mapping[tuple[int, str], Mapping[str, str]],
                  static: StaticBrokerConfig) -> Resolved:
    d = TOPIC_CONFIGS[name]
    chain: list[tuple[str, str, int]] = []
    overrides = configs.get((TOPIC, topic), {})
    if name in overrides:
        chain.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
    assert d.synonym is not None
    chain += _broker_chain(d.synonym, node_id, configs, static, d.default)
    value, source = chain[0][1], chain[0][2]
    return Resolved(name, value, source, tuple(chain), d.config_type, d.doc)


def resolve_broker(key: str, node_id: int, configs: Mapping[tuple[int, str], Mapping[str, str]],
                   static: StaticBrokerConfig, resource_name: str | None = None) -> Resolved | None:
    """A broker key as broker ``node_id`` sees it (``resource_name`` "" = the cluster
    default resource: only dynamic defaults are shown, as Kafka does)."""
    d = DYNAMIC_BROKER_CONFIGS.get(key)
    if d is not None:
        chain = _broker_chain(key, node_id, configs, static, d.default)
        if resource_name == "":
            chain = [c for c in chain if c[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
            if not chain:
                return None
        return Resolved(key, chain[0][1], chain[0][2], tuple(chain), d.config_type, d.doc)
    for k, t in STATIC_BROKER_KEYS:
        if k == key:
            if resource_name == "":
                return None
            got = static.get(key)
            if got is None:
                return None
            return Resolved(key, got[0], got[1], ((key, got[0], got[1]),), t, "")
    return None


def topic_value(topic: str, name: str, node_id: int, configs: Mapping[tuple[int, str], Mapping[str, str]],
                static: StaticBrokerConfig) -> object:
    """The typed value in force for ``topic`` (a stored value that no longer parses — it
    cannot, every write is validated — falls back to the next source)."""
    r = resolve_topic(topic, name, node_id, configs, static)
    d = TOPIC_CONFIGS[name]
    for _n, value, _s in r.synonyms:
        try:
            return d.parse(value)
        except ConfigProblem:
            continue
    return d.parse(d.default)


def static_from_server_config(raw: Mapping[str, str], default_text: Callable[[str], str | None]
                              ) -> StaticBrokerConfig:
    """A :class:`StaticBrokerConfig` from ``ServerConfig.raw`` and the built-in default
    text of a server key (``kafka_common.config.default_text``)."""
    keys = [*DYNAMIC_BROKER_CONFIGS, *(k for k, _ in STATIC_BROKER_KEYS)]
    values = {}
    for key in keys:
        text = default_text(key)
        if text is None and key in DYNAMIC_BROKER_CONFIGS:
            text = DYNAMIC_BROKER_CONFIGS[key].default
        if text is not None:
            values[key] = text
    return StaticBrokerConfig({k: v for k, v in raw.items() if k in keys}, values)
