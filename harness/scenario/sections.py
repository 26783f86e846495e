"""The sections of a scenario: topology, server configs, workload topics and workload, and the
expected outcome, as frozen values, with the validation of each section's table. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.scenario.fault_tables import TargetCheck
from harness.scenario.fields import Fields, Problems, join, one_of

__all__ = [
    "CLIENTS", "ACKS", "FS_TYPES", "DISK_CACHES", "OUTCOMES", "CONTROLLER_ID_BASE", "DEFAULT_PARTITIONS", "OFFSETS_TOPIC",
    "Topology", "ServerConfigs", "TopicSpec", "ReaderSpec", "Workload", "Expect", "offsets_partitions", "plain_fields",
    "parse_topology", "parse_configs", "parse_workload", "parse_expect",
]

OFFSETS_TOPIC = "__consumer_offsets"
CLIENTS = ("kafka-python", "confluent-kafka", "kcat")
ACKS = ("all", "1", "0")
FS_TYPES = ("ext4", "xfs")
DISK_CACHES = ("write-back", "write-through")
OUTCOMES = ("alive", "shutdown", "halted")
CONTROLLER_ID_BASE = 3000
DEFAULT_PARTITIONS = 12     # per topic: on 3 brokers RF 3, each leads 4 and follows 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """Node counts and disks. Broker ids are 1..brokers; controller ids 3001.. (kafkatest).
    Three controllers (a Raft quorum) by default; one is still a valid topology."""

    controllers: int = 3
    brokers: int = 3
    dirs_per_broker: int = 3
    fs: str = "ext4"
    dir_size_mb: int = 256
    # every lab disk's cache model: "write-back" (a volatile cache: the kernel sends flushes,
    # each reaching the fault layer) or "write-through" (a power-loss-protected cache: none)
    disk_cache: str = "write-back"

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def controller_ids(self) -> list[int]:
        return [CONTROLLER_ID_BASE + i for i in range(1, self.controllers + 1)]


# typed field -> Kafka key; these keys may not be set again through the overrides
_CONFIG_KEYS = {
    "heartbeat_interval_ms": "broker.heartbeat.interval.ms",
    "session_timeout_ms": "broker.session.timeout.ms",
    "log_dir_failure_timeout_ms": "log.dir.failure.timeout.ms",
    "probe_interval_ms": "log.dir.probe.interval.ms",
    "replica_lag_time_max_ms": "replica.lag.time.max.ms",
    "log_roll_ms": "log.roll.ms",
    "log_flush_interval_messages": "log.flush.interval.messages",
    "min_insync_replicas": "min.insync.replicas",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfigs:
    """Server timings, shrunk from Kafka's defaults so a run takes seconds (all recorded).

    ``log_roll_ms``/``log_flush_interval_messages`` follow kafkatest's log_dir_failure_test: a
    disk fault is only seen when the broker does I/O.
    """

    heartbeat_interval_ms: int = 500
    session_timeout_ms: int = 3000
    log_dir_failure_timeout_ms: int = 5000
    probe_interval_ms: int = 500
    replica_lag_time_max_ms: int = 5000
    log_roll_ms: int = 3000
    log_flush_interval_messages: int = 5
    min_insync_replicas: int = 2
    broker_overrides: Mapping[str, str] = field(default_factory=dict)
    controller_overrides: Mapping[str, str] = field(default_factory=dict)

    def broker_properties(self) -> dict[str, str]:
        """Kafka ``server.properties`` keys for brokers (typed fields, then overrides)."""
        props = {key: str(getattr(self, name)) for name, key in _CONFIG_KEYS.items()}
        props.update(self.broker_overrides)
        return props

    def controller_properties(self) -> dict[str, str]:
        # the quorum's timings shrunk like the others (Kafka: 1000 / 2000 / 1000 ms), so an
        # election after a controller fault takes ~1 s, well inside the brokers' session timeout
        props = {"broker.session.timeout.ms": str(self.session_timeout_ms),
                 "broker.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
                 "controller.quorum.election.timeout.ms": "500",
                 "controller.quorum.fetch.timeout.ms": "1000",
                 "controller.quorum.election.backoff.max.ms": "500"}
        props.update(self.controller_overrides)
        return props


def offsets_partitions(configs: "ServerConfigs") -> int:
    """``offsets.topic.num.partitions`` the brokers run with (Kafka's default 50)."""
    text = dict(configs.broker_overrides).get("offsets.topic.num.partitions", "50")
    return int(text) if str(text).isdigit() else 50


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int = 3
    min_insync_replicas: int | None = None  # None: the server's
    create_at_ms: int | None = None         # None: before the workload starts; else created mid-run


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderSpec:
    """A consumer that starts ``start_at_ms`` into the workload and reads ``topic``/``partition``
    from its beginning, then follows the tail (``harness.workload.readers``): the lagging reader that
    meets the oldest segments."""

    topic: str = "t1"
    partition: int = 0
    start_at_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A real Kafka client producing unique values (``<run>-<producer>-<seq>``) with acks=all
    at ``rate_per_s`` (shared by ``producers`` idempotent producers, each round-robin over every
    partition) for ``duration_ms``, then a drain consumer reading every partition by
    assignment to its end (bounded by ``drain_timeout_ms``). With ``group_consumers`` > 0,
    that many members of consumer group ``group_id`` consume every topic meanwhile and commit
    after processing (``harness.workload.group``; checked by ``group_consumption``). Each of
    ``readers`` reads one partition from its beginning, starting late (``ReaderSpec``).

    Default shape: 12 partitions RF 3 (on 3 brokers each leads 4 and follows 8, 4 replicas
    per dir) and 4 librdkafka producers, whose I/O runs on its own threads, so the latency the
    service check judges is the cluster's and not the harness process's."""

    client: str = "confluent-kafka"
    acks: str = "all"
    topics: tuple[TopicSpec, ...] = (TopicSpec(name="t1"),)
    rate_per_s: int = 200
    duration_ms: int = 30000
    value_bytes: int = 64
    producers: int = 4
    drain_timeout_ms: int = 30000
    group_consumers: int = 0                # members of one consumer group reading every topic (0: none)
    group_id: str = "jbodlab-group"
    readers: tuple[ReaderSpec, ...] = ()    # lagging readers from the partitions' beginning


@dataclass(frozen=True, slots=True, kw_only=True)
class Expect:
    """The expected outcome the checks compare against.

    ``outcomes``: node ref → alive | shutdown | halted (brokers not listed: alive).
    ``failover_within_ms``: bound from the fault to the failed replica leaving ISR/leadership.
    ``leader_moves``: True (must move off the faulted broker), False (must stay), None (either).
    ``timeout_shutdown``: True (exit at log.dir.failure.timeout.ms ± one heartbeat), False
    (must not exit, D5), None (not judged).
    ``isr_recovers``: True → by the end, the faulted broker is back in the ISR of every
    partition it replicates on a dir that is online at the end (S3 restart, S8 new disk).
    ``moved_replica_survives``: for a move-replica fault, True → the moved partition's replica
    stays in the ISR (target dir failed, move cancelled); False → it leaves (source failed,
    LOST_DIR, D6); None: not judged.
    ``service_*`` (the ``service`` check, :mod:`harness.checkers.service`): every partition's
    rolling produce p99 is back within ``bound`` of its pre-fault p99 no later than
    ``service_recovery_within_ms`` after each fault, and partitions outside every fault's
    domain keep their rolling p50 within ``bound`` of their pre-fault p50, where
    ``bound(x) = max(service_latency_factor × x, x + service_latency_floor_ms)``; and the
    pre-fault p50 itself is at most ``service_baseline_p50_max_ms``.
    ``must_show``: the scenario table's words, for the report.
    """

    outcomes: Mapping[str, str] = field(default_factory=dict)
    failover_within_ms: int = 15000
    leader_moves: bool | None = None
    timeout_shutdown: bool | None = None
    isr_recovers: bool | None = None
    moved_replica_survives: bool | None = None
    service_recovery_within_ms: int = 5000
    service_latency_factor: float = 2.0
    service_latency_floor_ms: int = 100
    service_baseline_p50_max_ms: int = 500
    must_show: str = ""


# ---------------------------------------------------------------- validation

def plain_fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def _str_map(f: Fields, name: str) -> dict[str, str]:
    table = f.table(name, {}) or {}
    out = {}
    for key, val in table.items():
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            f.problems.add(join(f.here(name), str(key)), "must be a string or number")
            continue
        if key in _CONFIG_KEYS.values():
            typed = next(n for n, k in _CONFIG_KEYS.items() if k == key)
            f.problems.add(join(f.here(name), str(key)), f"set it with configs.{typed}")
        out[str(key)] = str(val)
    return out


def parse_topology(data: Any, problems: Problems) -> Topology:
    f = Fields(data, "topology", problems)
    value = Topology(controllers=f.int("controllers", 3, lo=1, hi=5), brokers=f.int("brokers", 3, lo=1, hi=9),
                     dirs_per_broker=f.int("dirs_per_broker", 3, lo=1, hi=8),
                     fs=f.str("fs", "ext4", choices=FS_TYPES), dir_size_mb=f.int("dir_size_mb", 256, lo=32),
                     disk_cache=f.str("disk_cache", "write-back", choices=DISK_CACHES))
    f.finish()
    return value


def parse_configs(data: Any, problems: Problems) -> ServerConfigs:
    f = Fields(data, "configs", problems)
    d = ServerConfigs()
    kw = {name: f.int(name, getattr(d, name), lo=0 if name in ("probe_interval_ms",) else 1)
          for name in _CONFIG_KEYS}
    value = ServerConfigs(**kw, broker_overrides=_str_map(f, "broker_overrides"),
                          controller_overrides=_str_map(f, "controller_overrides"))
    if isinstance(value.heartbeat_interval_ms, int) and isinstance(value.session_timeout_ms, int) \
            and value.session_timeout_ms <= value.heartbeat_interval_ms:
        problems.add("configs.session_timeout_ms",
                     f"{value.session_timeout_ms} must exceed heartbeat_interval_ms ({value.heartbeat_interval_ms})")
    f.finish()
    return value


def parse_workload(data: Any, problems: Problems, topology: Topology) -> Workload:
    f = Fields(data, "workload", problems)
    d = Workload()
    topics: list[TopicSpec] = []
    for path, item in f.list("topics", [plain_fields(t) for t in d.topics]):
        t = Fields(item, path, problems)
        spec = TopicSpec(name=t.str("name"), partitions=t.int("partitions", DEFAULT_PARTITIONS, lo=1, hi=10000),
                         replication_factor=t.int("replication_factor", 3, lo=1),
                         min_insync_replicas=t.int("min_insync_replicas", None, lo=1),
                         create_at_ms=t.int("create_at_ms", None, lo=0))
        t.finish()
        if isinstance(spec.name, str) and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", spec.name):
            problems.add(join(path, "name"), f"{spec.name!r} is not a legal topic name ([A-Za-z0-9._-]+)")
        if isinstance(spec.replication_factor, int) and spec.replication_factor > topology.brokers:
            problems.add(join(path, "replication_factor"),
                         f"{spec.replication_factor} exceeds the {topology.brokers} brokers of the topology")
        if isinstance(spec.min_insync_replicas, int) and isinstance(spec.replication_factor, int) \
                and spec.min_insync_replicas > spec.replication_factor:
            problems.add(join(path, "min_insync_replicas"), "exceeds replication_factor")
        if spec.name in [x.name for x in topics]:
            problems.add(join(path, "name"), f"duplicate topic {spec.name!r}")
        topics.append(spec)
    if not topics and isinstance(f.data.get("topics", None), list):
        problems.add("workload.topics", "needs at least one topic")
    for i, spec in enumerate(topics):
        if isinstance(spec.create_at_ms, int) and isinstance(f.data.get("duration_ms", d.duration_ms), int) \
                and spec.create_at_ms >= f.data.get("duration_ms", d.duration_ms):
            problems.add(join(join("workload.topics", i), "create_at_ms"), "is not before the end of the workload")
    readers: list[ReaderSpec] = []
    duration = f.data.get("duration_ms", d.duration_ms) if isinstance(f.data, dict) else d.duration_ms
    known = {t.name: t.partitions for t in topics}
    for path, item in f.list("readers", []):
        r = Fields(item, path, problems)
        spec_r = ReaderSpec(topic=r.str("topic", "t1"), partition=r.int("partition", 0, lo=0),
                            start_at_ms=r.int("start_at_ms", 0, lo=0))
        r.finish()
        if spec_r.topic not in known:
            problems.add(join(path, "topic"), one_of(spec_r.topic, sorted(known)) + " (topics of the workload)")
        elif isinstance(spec_r.partition, int) and isinstance(known[spec_r.topic], int) \
                and spec_r.partition >= known[spec_r.topic]:
            problems.add(join(path, "partition"), f"topic {spec_r.topic!r} has partitions 0..{known[spec_r.topic] - 1}")
        if isinstance(spec_r.start_at_ms, int) and isinstance(duration, int) and spec_r.start_at_ms >= duration:
            problems.add(join(path, "start_at_ms"), "is not before the end of the workload")
        readers.append(spec_r)
    value = Workload(client=f.str("client", d.client, choices=CLIENTS), acks=f.str("acks", d.acks, choices=ACKS),
                     topics=tuple(topics), rate_per_s=f.int("rate_per_s", d.rate_per_s, lo=1, hi=1_000_000),
                     duration_ms=f.int("duration_ms", d.duration_ms, lo=1000),
                     value_bytes=f.int("value_bytes", d.value_bytes, lo=16, hi=1_000_000),
                     producers=f.int("producers", d.producers, lo=1, hi=64),
                     drain_timeout_ms=f.int("drain_timeout_ms", d.drain_timeout_ms, lo=1000),
                     group_consumers=f.int("group_consumers", d.group_consumers, lo=0, hi=64),
                     group_id=f.str("group_id", d.group_id), readers=tuple(readers))
    f.finish()
    return value


def parse_expect(data: Any, problems: Problems, targets: TargetCheck) -> Expect:
    f = Fields(data, "expect", problems)
    outcomes: dict[str, str] = {}
    for ref, outcome in (f.table("outcomes", {}) or {}).items():
        path = join("expect.outcomes", str(ref))
        targets.node(ref, path, problems)  # brokers, or a controller expected to halt
        if outcome not in OUTCOMES:
            problems.add(path, one_of(outcome, OUTCOMES))
        outcomes[str(ref)] = outcome
    tri = {}
    for name in ("leader_moves", "timeout_shutdown", "isr_recovers", "moved_replica_survives"):
        tri[name] = f.raw(name, None)
        if tri[name] is not None and not isinstance(tri[name], bool):
            problems.add(join("expect", name), f"must be true, false or null, got {tri[name]!r}")
    d = Expect()
    value = Expect(outcomes=outcomes, failover_within_ms=f.int("failover_within_ms", 15000, lo=1),
                   service_recovery_within_ms=f.int("service_recovery_within_ms", d.service_recovery_within_ms,
                                                    lo=1),
                   service_latency_factor=f.float("service_latency_factor", d.service_latency_factor, lo=1.0),
                   service_latency_floor_ms=f.int("service_latency_floor_ms", d.service_latency_floor_ms, lo=0),
                   service_baseline_p50_max_ms=f.int("service_baseline_p50_max_ms",
                                                     d.service_baseline_p50_max_ms, lo=1),
                   must_show=f.str("must_show", ""), **tri)
    f.finish()
    return value
