"""CreateTopics (API 19): TopicRecord + one PartitionRecord per partition.

Per topic, errors: invalid name → INVALID_TOPIC_EXCEPTION (17); already exists →
TOPIC_ALREADY_EXISTS (36); listed twice in the request → INVALID_REQUEST (42);
manual assignments together with a partition count or replication factor →
INVALID_REQUEST; bad manual assignment (gaps, unknown or repeated broker, unequal
lengths, no active replica) → INVALID_REPLICA_ASSIGNMENT (39); partitions < 1 →
INVALID_PARTITIONS (37); replication factor < 1, above the usable brokers, or no unfenced
broker → INVALID_REPLICATION_FACTOR (38); a topic that would take the request over
:data:`MAX_PARTITIONS_PER_REQUEST` partitions → POLICY_VIOLATION (44), checked before any
placement is computed (as Kafka bounds the records of one operation: one 40-byte request
must not make the controller build 2^31 partitions). -1 means the configured default.

New partitions: ISR = the replicas that are active (unfenced, not shutting down), leader =
the first of them, leader epoch 0, partition epoch 0, Directories = each broker's default
dir (its only dir, or UNASSIGNED for a multi-dir or unregistered broker). Topic configs are
validated (:mod:`kafka_common.topic_config`: unknown name or bad value → INVALID_CONFIG,
40, with the reason) and written as ConfigRecords after the TopicRecord; v5+ answers the
topic's resulting configs (value and source, as this controller resolves them).
"""

from __future__ import annotations

import collections
import random
import re
from typing import Any

from controller_impl.errors import ControllerError
from kafka_common import wire
from kafka_common.ids import ZERO_UUID, random_uuid
from kafka_common.metadata import records as r
from kafka_common.wire import ApiKey, ErrorCode

from kafka_common import topic_config
from kafka_common.config import default_text

from controller_impl.state.cluster_control import default_dir
from controller_impl.state.configs import config_records, create_topic_configs
from controller_impl.state.placement import PlacementError, place
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView

MAX_TOPIC_NAME = 249
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicError(ControllerError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def topic_name_problem(name: str) -> str | None:
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def create_topics(view: WorkingView, req: Any, *, rng: random.Random, default_partitions: int,
                  default_replication_factor: int, static: topic_config.StaticBrokerConfig | None = None,
                  unplaceable: frozenset[int] = frozenset()) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.CREATE_TOPICS, version)
    cls = wire.response_class(ApiKey.CREATE_TOPICS, version)
    names = collections.Counter(t.name for t in req.topics)
    results = []
    budget = MAX_PARTITIONS_PER_REQUEST
    for topic in req.topics:
        try:
            if names[topic.name] > 1:
                raise TopicError(ErrorCode.invalid_request, f"topic {topic.name!r} is listed twice")
            wanted = len(topic.assignments) if topic.assignments else \
                (default_partitions if topic.num_partitions == -1 else topic.num_partitions)
            if wanted > budget:
                raise TopicError(ErrorCode.policy_violation,
                                 f"excessively large number of partitions per request: {wanted} more "
                                 f"would exceed {MAX_PARTITIONS_PER_REQUEST}")
            tid, n, rf = _create_one(view, topic, rng, default_partitions, default_replication_factor,
                                     validate_only=req.validate_only, unplaceable=unplaceable)
            budget -= n
            configs = _resulting_configs(mod, view, topic, static) if version >= 5 else ()
            results.append(wire.make(mod.CreatableTopicResult, name=topic.name, topic_id=tid,
                                     error_code=ErrorCode.none, error_message=None,
                                     num_partitions=n, replication_factor=rf, configs=configs))
        except TopicError as exc:
            results.append(wire.make(mod.CreatableTopicResult, name=topic.name, topic_id=ZERO_UUID,
                                     error_code=exc.code, error_message=str(exc),
                                     num_partitions=-1, replication_factor=-1, configs=None))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, topics=tuple(results))


def static_config_of(config: Any) -> topic_config.StaticBrokerConfig:
    """The controller's own server.properties as a config source (``raw`` of a
    ServerConfig; an object without it: built-in defaults only)."""
    return topic_config.static_from_server_config(getattr(config, "raw", None) or {}, default_text)


def _resulting_configs(mod: Any, view: WorkingView, topic: Any, static: topic_config.StaticBrokerConfig | None
                       ) -> tuple[Any, ...]:
    """CreateTopics v5+: the new topic's configs as this controller resolves them (its own
    server.properties under the dynamic broker configs), as Kafka's controller answers."""
    configs = dict(view.image.configs)
    configs[(topic_config.TOPIC, topic.name)] = {c.name: c.value for c in (topic.configs or ())}
    static = static or topic_config.StaticBrokerConfig({}, {})
    out = []
    for key in topic_config.TOPIC_CONFIGS:
        got = topic_config.resolve_topic(topic.name, key, -1, configs, static)
        out.append(wire.make(mod.CreatableTopicConfigs, name=key, value=got.value, read_only=False,
                             config_source=got.source, is_sensitive=False))
    return tuple(out)


def _create_one(view: WorkingView, topic: Any, rng: random.Random, default_partitions: int,
                default_rf: int, *, validate_only: bool,
                unplaceable: frozenset[int] = frozenset()) -> tuple[Any, int, int]:
    problem = topic_name_problem(topic.name)
    if problem:
        raise TopicError(ErrorCode.invalid_topic_exception, problem)
    if view.topic_exists(topic.name):
        raise TopicError(ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists")
    try:
        configs = create_topic_configs(topic)
    except topic_config.ConfigProblem as exc:
        raise TopicError(ErrorCode.invalid_config, str(exc)) from None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise TopicError(ErrorCode.invalid_request,
                             "both manual assignments and num_partitions/replication_factor given")
        assignment = _manual(view, topic.assignments)
    else:
        n = default_partitions if topic.num_partitions == -1 else topic.num_partitions
        rf = default_rf if topic.replication_factor == -1 else topic.replication_factor
        if n < 1:
            raise TopicError(ErrorCode.invalid_partitions, f"number of partitions must be >= 1, got {n}")
        # KIP-1066: a broker whose every dir is cordoned takes no new replica
        usable = [reg for reg in _brokers(view) if not reg.in_controlled_shutdown
                  and reg.broker_id not in unplaceable]
        try:
            assignment = place(n, rf, [b.broker_id for b in usable if not b.fenced],
                               [b.broker_id for b in usable if b.fenced], start=view.image.partition_count())
        except PlacementError as exc:
            raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None
    tid = random_uuid(rng)
    while tid in view.image.topics:
        tid = random_uuid(rng)
    if not validate_only:
        view.emit(r.TopicRecord(name=topic.name, topic_id=tid))
        for rec in config_records(topic_config.TOPIC, topic.name, {}, configs):
            view.emit(rec)
        for pid, replicas in enumerate(assignment):
            isr = tuple(b for b in replicas if view.is_active(b))
            view.emit(r.PartitionRecord(
                partition_id=pid, topic_id=tid, replicas=replicas, isr=isr, leader=isr[0],
                leader_epoch=0, partition_epoch=0,
                directories=tuple(default_dir(view.broker(b)) for b in replicas)))
    return (tid if not validate_only else ZERO_UUID), len(assignment), len(assignment[0])


def _brokers(view: WorkingView) -> list[Any]:
    return [reg for b in sorted(view.image.brokers) if (reg := view.broker(b)) is not None]


def _manual(view: WorkingView, assignments: Any) -> list[tuple[int, ...]]:
    by_index = {a.partition_index: tuple(a.broker_ids) for a in assignments}
    if sorted(by_index) != list(range(len(assignments))):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         "partition indexes of the assignment must be 0..n-1, each once")
    out = [by_index[i] for i in range(len(by_index))]
    rf = len(out[0])
    for i, replicas in enumerate(out):
        if not replicas or len(replicas) != rf:
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"partition {i}: every partition needs the same, non-zero number of replicas")
        check_replicas(view, i, replicas)
    return out


def check_replicas(view, pid: int, replicas) -> None:
    """An explicit assignment's replicas of partition ``pid`` (CreateTopics, CreatePartitions):
    each broker once, registered, and at least one of them active."""
    if len(set(replicas)) != len(replicas):
        raise TopicError(ErrorCode.invalid_replica_assignment, f"partition {pid}: a broker is listed twice")
    unknown = [b for b in replicas if view.broker(b) is None]
    if unknown:
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"partition {pid}: broker {unknown[0]} is not registered")
    if not any(view.is_active(b) for b in replicas):
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"partition {pid}: all its brokers are fenced or in controlled shutdown")
