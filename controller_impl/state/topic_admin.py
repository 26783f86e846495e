"""DeleteTopics (API 20) and CreatePartitions (API 37): the controller's side (Kafka's
``ReplicationControlManager.deleteTopic`` / ``createPartitions``). Pure: reads the image
through a :class:`WorkingView`, emits records.

DeleteTopics, per topic (v0–5 by name; v6+ by name or by topic id):
- ``delete.topic.enable=false`` → TOPIC_DELETION_DISABLED (73) for every topic (v0–2, which
  cannot carry that code: INVALID_REQUEST, as Kafka answers);
- a name (or id) listed twice → INVALID_REQUEST (42) for it;
- v6+: neither name nor id, or both → INVALID_REQUEST;
- unknown name → UNKNOWN_TOPIC_OR_PARTITION (3); unknown id → UNKNOWN_TOPIC_ID (100);
- else one ``RemoveTopicRecord``: the image drops the topic, its partitions and its configs;
  every broker deletes its replicas (``-delete`` rename, async removal) when it replays it.
  The answer carries the name and the id.

CreatePartitions, per topic (``count`` = the new total):
- listed twice → INVALID_REQUEST; unknown → UNKNOWN_TOPIC_OR_PARTITION;
- ``count`` not larger than the current number → INVALID_PARTITIONS (37);
- more than :data:`~controller_impl.state.topics.MAX_PARTITIONS_PER_REQUEST` new partitions
  in one request → POLICY_VIOLATION (44);
- explicit ``assignments``: one per new partition, each with the topic's replication factor
  (that of its partition 0), no broker twice, every broker registered, at least one active
  → else INVALID_REPLICA_ASSIGNMENT (39);
- else placed as CreateTopics places (:func:`~controller_impl.state.placement.place`, the
  topic's replication factor, rotation offset by the cluster's partition count); a
  placement that cannot be made → INVALID_REPLICATION_FACTOR (38);
- ``validate_only`` writes nothing and answers as if it had.
New partitions are written as CreateTopics writes them: ISR = the active replicas, leader =
the first, epochs 0, Directories = each broker's default dir (its only dir, or UNASSIGNED for
a multi-dir broker, which places the replica itself and sends AssignReplicasToDirs).
"""

from __future__ import annotations

import collections
from typing import Any

from kafka_common import wire
from kafka_common.ids import ZERO_UUID
from kafka_common.metadata import records as r
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.cluster_control import default_dir
from controller_impl.state.placement import PlacementError, place
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.topics import MAX_PARTITIONS_PER_REQUEST, TopicError, check_replicas
from controller_impl.state.view import WorkingView


# ------------------------------------------------------------------ DeleteTopics
def delete_topics(view: WorkingView, req: Any, *, deletion_enabled: bool) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.DELETE_TOPICS, version)
    cls = wire.response_class(ApiKey.DELETE_TOPICS, version)
    if version >= 6:
        wanted = [(t.name, _tid(t.topic_id)) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]
    names = collections.Counter(n for n, tid in wanted if n is not None and tid is None)
    tids = collections.Counter(tid for n, tid in wanted if tid is not None and n is None)
    results = []
    removed: set[Any] = set()
    for name, tid in wanted:
        try:
            if not deletion_enabled:
                if version < 3:
                    raise TopicError(ErrorCode.invalid_request, "topic deletion is disabled (delete.topic.enable)")
                raise TopicError(ErrorCode.topic_deletion_disabled, "topic deletion is disabled (delete.topic.enable)")
            name, tid = _resolve(view, name, tid, names, tids)
            if tid not in removed:
                removed.add(tid)
                view.emit(r.RemoveTopicRecord(topic_id=tid))
            results.append(wire.make(mod.DeletableTopicResult, name=name, topic_id=tid,
                                     error_code=ErrorCode.none, error_message=None))
        except TopicError as exc:
            results.append(wire.make(mod.DeletableTopicResult, name=name, topic_id=tid or ZERO_UUID,
                                     error_code=exc.code, error_message=str(exc)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, responses=tuple(results))


def _tid(value: Any) -> Any:
    """A request's topic id: None when not given (kio reads the zero uuid as None, makes it zero)."""
    return None if value is None or value == ZERO_UUID else value


def _resolve(view: WorkingView, name: str | None, tid: Any, names: collections.Counter,
             tids: collections.Counter) -> tuple[str, Any]:
    """(name, topic id) of one entry of a DeleteTopics request, or TopicError."""
    if name is None and tid is None:
        raise TopicError(ErrorCode.invalid_request, "neither a topic name nor a topic id was given")
    if name is not None and tid is not None:
        raise TopicError(ErrorCode.invalid_request, "give a topic name or a topic id, not both")
    if tid is None:
        if names[name] > 1:
            raise TopicError(ErrorCode.invalid_request, f"topic {name!r} is listed twice")
        found = view.image.topic_ids.get(name)
        if found is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        return name, found
    if tids[tid] > 1:
        raise TopicError(ErrorCode.invalid_request, f"topic id {tid} is listed twice")
    topic = view.image.topics.get(tid)
    if topic is None:
        raise TopicError(ErrorCode.unknown_topic_id, f"no topic has id {tid}")
    return topic.name, tid


# ------------------------------------------------------------------ CreatePartitions
def create_partitions(view: WorkingView, req: Any) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.CREATE_PARTITIONS, version)
    cls = wire.response_class(ApiKey.CREATE_PARTITIONS, version)
    names = collections.Counter(t.name for t in req.topics)
    budget = MAX_PARTITIONS_PER_REQUEST
    results = []
    for topic in req.topics:
        try:
            if names[topic.name] > 1:
                raise TopicError(ErrorCode.invalid_request, f"topic {topic.name!r} is listed twice")
            budget -= _add_partitions(view, topic, budget, validate_only=req.validate_only)
            results.append(wire.make(mod.CreatePartitionsTopicResult, name=topic.name, error_code=ErrorCode.none,
                                     error_message=None))
        except TopicError as exc:
            results.append(wire.make(mod.CreatePartitionsTopicResult, name=topic.name, error_code=exc.code,
                                     error_message=str(exc)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, results=tuple(results))


def _add_partitions(view: WorkingView, topic: Any, budget: int, *, validate_only: bool) -> int:
    """Validate (and unless ``validate_only`` emit) one topic's new partitions; returns how many."""
    tid = view.image.topic_ids.get(topic.name)
    if tid is None:
        raise TopicError(ErrorCode.unknown_topic_or_partition, f"topic {topic.name!r} does not exist")
    current = view.image.partitions_of(tid)
    have = len(current)
    if topic.count < have:
        raise TopicError(ErrorCode.invalid_partitions,
                         f"topic {topic.name!r} has {have} partitions; {topic.count} would not be an increase")
    if topic.count == have:
        raise TopicError(ErrorCode.invalid_partitions, f"topic {topic.name!r} already has {have} partitions")
    extra = topic.count - have
    if extra > budget:
        raise TopicError(ErrorCode.policy_violation,
                         f"excessively large number of partitions per request: {extra} more would exceed "
                         f"{MAX_PARTITIONS_PER_REQUEST}")
    first = current.get(0) or next(iter(current.values()))
    rf = len(first.replicas)
    if topic.assignments is not None:
        assignment = _manual(view, topic.assignments, extra, rf, have)
    else:
        usable = [reg for b in sorted(view.image.brokers) if (reg := view.broker(b)) is not None
                  and not reg.in_controlled_shutdown]
        try:
            assignment = place(extra, rf, [b.broker_id for b in usable if not b.fenced],
                               [b.broker_id for b in usable if b.fenced], start=view.image.partition_count())
        except PlacementError as exc:
            raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None
    if not validate_only:
        for i, replicas in enumerate(assignment):
            isr = tuple(b for b in replicas if view.is_active(b))
            view.emit(r.PartitionRecord(
                partition_id=have + i, topic_id=tid, replicas=replicas, isr=isr, leader=isr[0],
                leader_epoch=0, partition_epoch=0,
                directories=tuple(default_dir(view.broker(b)) for b in replicas)))
    return extra


def _manual(view: WorkingView, assignments: Any, extra: int, rf: int, first_pid: int) -> list[tuple[int, ...]]:
    if len(assignments) != extra:
        raise TopicError(ErrorCode.invalid_replica_assignment,
                         f"{extra} new partition(s) but {len(assignments)} assignment(s) given")
    out = []
    for i, a in enumerate(assignments):
        pid = first_pid + i
        replicas = tuple(a.broker_ids)
        if len(replicas) != rf:
            raise TopicError(ErrorCode.invalid_replica_assignment,
                             f"partition {pid}: {len(replicas)} replica(s), but the topic's partitions have {rf}")
        check_replicas(view, pid, replicas)
        out.append(replicas)
    return out


# ------------------------------------------------------------------ refusals (authorization)
def deny_delete_topics(request: Any, version: int, code: ErrorCode, message: str) -> Any:
    """DeleteTopics refused (``kafka_common.authz``): the error on every topic."""
    mod = wire.response_module(ApiKey.DELETE_TOPICS, version)
    wanted = [(t.name, _tid(t.topic_id)) for t in request.topics] if version >= 6 else \
        [(n, None) for n in request.topic_names]
    return wire.make(wire.response_class(ApiKey.DELETE_TOPICS, version), throttle_time=ZERO_THROTTLE,
                     responses=tuple(wire.make(mod.DeletableTopicResult, name=n, topic_id=tid or ZERO_UUID, error_code=code,
                                               error_message=message) for n, tid in wanted))


def deny_create_partitions(request: Any, version: int, code: ErrorCode, message: str) -> Any:
    """CreatePartitions refused: the error on every topic."""
    mod = wire.response_module(ApiKey.CREATE_PARTITIONS, version)
    return wire.make(wire.response_class(ApiKey.CREATE_PARTITIONS, version), throttle_time=ZERO_THROTTLE,
                     results=tuple(wire.make(mod.CreatePartitionsTopicResult, name=t.name, error_code=code,
                                             error_message=message) for t in request.topics))
