"""`server.properties` → a validated, typed :class:`ServerConfig` (pure: takes the text).

Kafka's key names. Unknown keys are returned as warnings, not errors. An invalid value
raises :class:`ConfigError` naming the key and the value. Every timing of behaviour §5 is
settable so that scenarios can shrink it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from kafka_common.errors import KafkaCommonError
from kafka_common.meta_properties import parse_properties


class ConfigError(KafkaCommonError, ValueError):
    """A server.properties value that cannot be used; the message names key and value."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str, str], int]:
    def conv(key: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{key}={text!r}: not an integer") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{key}={text!r}: must be in [{lo}, {hi if hi is not None else '∞'}]")
        return value
    return conv


def _cleanup_policy(key: str, text: str) -> str:
    """Only 'delete': this broker has no log cleaner (compaction)."""
    items = [p.strip() for p in text.split(",") if p.strip()]
    if items != ["delete"]:
        raise ConfigError(f"{key}={text!r}: only 'delete' is supported (no log compaction)")
    return "delete"


def _idle_ms(key: str, text: str) -> int:
    """A positive number of milliseconds, or -1 for never (Kafka's connections.max.idle.ms)."""
    value = _int(-1, 2**63 - 1)(key, text)
    if value == 0:
        raise ConfigError(f"{key}={text!r}: must be -1 (never) or a positive number of ms")
    return value


def _bool(key: str, text: str) -> bool:
    low = text.lower()
    if low not in ("true", "false"):
        raise ConfigError(f"{key}={text!r}: must be true or false")
    return low == "true"


def _str(key: str, text: str) -> str:
    return text


def _list(key: str, text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _roles(key: str, text: str) -> tuple[str, ...]:
    roles = _list(key, text)
    if not roles or any(r not in ("broker", "controller") for r in roles):
        raise ConfigError(f"{key}={text!r}: must be broker, controller or both")
    return roles


def _listeners(key: str, text: str) -> tuple[Listener, ...]:
    out = []
    for item in _list(key, text):
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not name:
            raise ConfigError(f"{key}={text!r}: {item!r} is not NAME://host:port")
        out.append(Listener(name=name.upper(), host=host, port=_int(0, 65535)(key, port)))
    return tuple(out)


def _voters(key: str, text: str) -> tuple[Voter, ...]:
    out = []
    for item in _list(key, text):
        node, at, addr = item.partition("@")
        host, colon, port = addr.rpartition(":")
        if not at or not colon:
            raise ConfigError(f"{key}={text!r}: {item!r} is not id@host:port")
        out.append(Voter(node_id=_int(0)(key, node), host=host, port=_int(1, 65535)(key, port)))
    return tuple(out)


def _protocol_map(key: str, text: str) -> dict[str, str]:
    out = {}
    for item in _list(key, text):
        name, colon, proto = item.partition(":")
        if not colon or proto.upper() not in ("PLAINTEXT", "SASL_PLAINTEXT"):
            raise ConfigError(f"{key}={text!r}: {item!r} is not NAME:PLAINTEXT|SASL_PLAINTEXT")
        out[name.upper()] = proto.upper()
    return out


def _users(key: str, text: str) -> dict[str, str]:
    out = {}
    for item in _list(key, text):
        name, colon, password = item.partition(":")
        if not colon or not name:
            raise ConfigError(f"{key}=...: {item.split(':')[0]!r} is not name:password")
        out[name] = password
    return out


def _principals(key: str, text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(";") if p.strip())


# key -> (field name, converter, default text or None when required for its role)
_DEFS: dict[str, tuple[str, Callable[[str, str], Any], str | None]] = {
    "process.roles": ("process_roles", _roles, None),
    "node.id": ("node_id", _int(0), None),
    "controller.quorum.voters": ("controller_quorum_voters", _voters, ""),
    "listeners": ("listeners", _listeners, ""),
    "advertised.listeners": ("advertised_listeners", _listeners, ""),
    "controller.listener.names": ("controller_listener_names", _list, "CONTROLLER"),
    "controller.quorum.election.timeout.ms": ("controller_quorum_election_timeout_ms", _int(1), "1000"),
    "controller.quorum.fetch.timeout.ms": ("controller_quorum_fetch_timeout_ms", _int(1), "2000"),
    "controller.quorum.election.backoff.max.ms": ("controller_quorum_election_backoff_max_ms", _int(0), "1000"),
    "metadata.log.max.record.count.between.snapshots": ("metadata_snapshot_record_count", _int(1), "100000"),
    "metadata.log.max.snapshot.interval.ms": ("metadata_snapshot_interval_ms", _int(0), "3600000"),
    "metadata.max.idle.interval.ms": ("metadata_max_idle_interval_ms", _int(0), "500"),
    "inter.broker.listener.name": ("inter_broker_listener_name", _str, "PLAINTEXT"),
    "listener.security.protocol.map": ("listener_security_protocol_map", _protocol_map, ""),
    "log.dirs": ("log_dirs", _list, ""),
    "metadata.log.dir": ("metadata_log_dir", _str, ""),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", _int(1), "2000"),
    "broker.session.timeout.ms": ("broker_session_timeout_ms", _int(1), "9000"),
    "log.dir.failure.timeout.ms": ("log_dir_failure_timeout_ms", _int(1), "30000"),
    # leader balance (controller), unclean election (topic default), KIP-1066
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool, "true"),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", _int(1), "300"),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", _int(0, 100), "10"),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool, "false"),
    "cordoned.log.dirs": ("cordoned_log_dirs", _list, ""),
    "log.dir.probe.interval.ms": ("log_dir_probe_interval_ms", _int(0), "1000"),
    "replica.high.watermark.checkpoint.interval.ms": ("hw_checkpoint_interval_ms", _int(1), "5000"),
    "log.flush.offset.checkpoint.interval.ms": ("recovery_checkpoint_interval_ms", _int(1), "60000"),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int(1), "30000"),
    "min.insync.replicas": ("min_insync_replicas", _int(1), "1"),
    "default.replication.factor": ("default_replication_factor", _int(1), "1"),
    "num.partitions": ("num_partitions", _int(1), "1"),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool, "true"),
    # DeleteTopics: the controller refuses with TOPIC_DELETION_DISABLED when false
    "delete.topic.enable": ("delete_topic_enable", _bool, "true"),
    "log.segment.bytes": ("log_segment_bytes", _int(1024), "1073741824"),
    "log.roll.ms": ("log_roll_ms", _int(1), "604800000"),
    "log.roll.jitter.ms": ("log_roll_jitter_ms", _int(0), "0"),
    # defaults of the topic configs (kafka_common.topic_config): retention, size limit
    "log.retention.ms": ("log_retention_ms", _int(-1), "604800000"),
    "log.retention.bytes": ("log_retention_bytes", _int(-1), "-1"),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(1), "300000"),
    "message.max.bytes": ("message_max_bytes", _int(0, 2**31 - 1), "1048588"),
    "log.cleanup.policy": ("log_cleanup_policy", _cleanup_policy, "delete"),
    "log.flush.interval.messages": ("log_flush_interval_messages", _int(1), "9223372036854775807"),
    "log.flush.interval.ms": ("log_flush_interval_ms", _int(0), "9223372036854775807"),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int(0), "500"),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int(1), "10485760"),   # Kafka: 1 MiB (a documented departure: docs/design.md)
    "metadata.fetch.max.wait.ms": ("metadata_fetch_max_wait_ms", _int(0), "500"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1, 2**31 - 1), "104857600"),
    # before SASL authentication (a listener that requires it) frames are limited to this
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", _int(1, 2**31 - 1), "524288"),
    "max.connections": ("max_connections", _int(0, 2**31 - 1), "2147483647"),
    "max.connections.per.ip": ("max_connections_per_ip", _int(0, 2**31 - 1), "2147483647"),
    "connections.max.idle.ms": ("connections_max_idle_ms", _idle_ms, "600000"),
    # bad input (undecodable frames, failed logins, refused connections) is logged in full
    # once per interval and kind, then counted (not a line per frame)
    "bad.request.log.interval.ms": ("bad_request_log_interval_ms", _int(1, 2**31 - 1), "10000"),
    # request metrics (per API: queue/local/remote/send/total time) are one event per window
    "metrics.sample.window.ms": ("metrics_sample_window_ms", _int(1, 2**31 - 1), "30000"),
    "events.file": ("events_file", _str, ""),
    "authorizer.enabled": ("authorizer_enabled", _bool, "false"),
    "sasl.plain.users": ("sasl_plain_users", _users, ""),
    "super.users": ("super_users", _principals, "User:broker;User:admin"),
    "sasl.plain.username": ("sasl_plain_username", _str, ""),
    "sasl.plain.password": ("sasl_plain_password", _str, ""),
    "cluster.id": ("cluster_id", _str, ""),
}


# keys of the broker's group coordinator, validated by ``broker_impl.groups.coordinator``
GROUP_COORDINATOR_KEYS = frozenset({
    "offsets.topic.num.partitions", "offsets.topic.replication.factor", "offsets.commit.timeout.ms",
    "group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms",
    "group.max.size", "offset.metadata.max.bytes"})


@dataclass(frozen=True, slots=True)
class ServerConfig:
    process_roles: tuple[str, ...]
    node_id: int
    controller_quorum_voters: tuple[Voter, ...]
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    controller_listener_names: tuple[str, ...]
    controller_quorum_election_timeout_ms: int
    controller_quorum_fetch_timeout_ms: int
    controller_quorum_election_backoff_max_ms: int
    metadata_snapshot_record_count: int
    metadata_snapshot_interval_ms: int
    metadata_max_idle_interval_ms: int
    inter_broker_listener_name: str
    listener_security_protocol_map: dict[str, str]
    log_dirs: tuple[str, ...]
    metadata_log_dir: str
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    log_dir_failure_timeout_ms: int
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    unclean_leader_election_enable: bool
    cordoned_log_dirs: tuple[str, ...]
    log_dir_probe_interval_ms: int
    hw_checkpoint_interval_ms: int
    recovery_checkpoint_interval_ms: int
    replica_lag_time_max_ms: int
    min_insync_replicas: int
    default_replication_factor: int
    num_partitions: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_jitter_ms: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    message_max_bytes: int
    log_cleanup_policy: str
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_max_bytes: int
    metadata_fetch_max_wait_ms: int
    socket_request_max_bytes: int
    sasl_server_max_receive_size: int
    max_connections: int
    max_connections_per_ip: int
    connections_max_idle_ms: int
    bad_request_log_interval_ms: int
    metrics_sample_window_ms: int
    events_file: str
    authorizer_enabled: bool
    sasl_plain_users: dict[str, str]
    super_users: frozenset[str]
    sasl_plain_username: str
    sasl_plain_password: str
    cluster_id: str
    raw: dict[str, str] = field(default_factory=dict, compare=False)
    warnings: tuple[str, ...] = ()

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    def listener(self, name: str) -> Listener | None:
        return next((l for l in self.listeners if l.name == name.upper()), None)

    def security_protocol(self, listener_name: str) -> str:
        return self.listener_security_protocol_map.get(listener_name.upper(), "PLAINTEXT")

    def all_dirs(self) -> tuple[str, ...]:
        """log.dirs plus metadata.log.dir, each once, in that order."""
        out = list(self.log_dirs)
        if self.metadata_log_dir and self.metadata_log_dir not in out:
            out.append(self.metadata_log_dir)
        return tuple(out)


def parse_config(text: str, overrides: dict[str, str] | None = None) -> ServerConfig:
    props = parse_properties(text)
    props.update(overrides or {})
    values: dict[str, Any] = {}
    for key, (name, conv, default) in _DEFS.items():
        raw = props.get(key, default)
        if raw is None:
            raise ConfigError(f"{key}: required but missing")
        values[name] = conv(key, raw) if raw != "" else _empty(conv)
    warnings = tuple(f"unknown config key {k!r} ignored" for k in props
                     if k not in _DEFS and k not in GROUP_COORDINATOR_KEYS)
    cfg = ServerConfig(**values, raw=dict(props), warnings=warnings)
    _check_roles(cfg)
    return cfg


def default_text(key: str) -> str | None:
    """The built-in default text of a server key (``None``: unknown key or required)."""
    entry = _DEFS.get(key)
    return entry[2] if entry is not None else None


def _empty(conv: Callable[[str, str], Any]) -> Any:
    if conv in (_listeners, _voters, _list):
        return ()
    if conv in (_protocol_map, _users):
        return {}
    return ""


def _check_roles(cfg: ServerConfig) -> None:
    if cfg.is_broker and not cfg.log_dirs:
        raise ConfigError("log.dirs: required for process.roles=broker")
    if cfg.is_controller and not cfg.metadata_log_dir and not cfg.log_dirs:
        raise ConfigError("metadata.log.dir: required for process.roles=controller")
    if not cfg.listeners:
        raise ConfigError("listeners: required")
    if cfg.is_broker and not cfg.controller_quorum_voters:
        raise ConfigError("controller.quorum.voters: required for process.roles=broker")


def with_defaults_applied(cfg: ServerConfig) -> ServerConfig:
    """metadata.log.dir defaults to the first of log.dirs (Kafka's rule)."""
    if not cfg.metadata_log_dir and cfg.log_dirs:
        return dataclasses.replace(cfg, metadata_log_dir=cfg.log_dirs[0])
    return cfg
