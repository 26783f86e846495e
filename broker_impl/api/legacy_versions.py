"""Kafka 3.9's semantics of the old versions KIP-896 removed in 4.0 (their schemas:
:mod:`kafka_common.legacy_schemas`). Burrow 1.2.1 and Sarama 1.22 send some of them.

- ListOffsets v0 (Kafka's ``legacyFetchOffsetsBefore``): the candidate offsets are each
  segment's base offset (at least the log start offset) with the segment file's
  modification time, plus the log end offset with "now" when the newest segment is not
  empty. Timestamp -1 (latest) starts at the newest candidate, -2 (earliest) at the
  oldest, any other ≥ 0 at the newest candidate whose time is ≤ the timestamp; up to
  ``max_num_offsets`` offsets are returned from there towards older ones, in descending
  order. For a consumer (replica id -1) offsets above the high watermark are replaced by
  the high watermark. A timestamp below -2 → UNSUPPORTED_VERSION; leader only (a debugging
  replica id -2 may read a follower), as Kafka.
- OffsetCommit v0 / OffsetFetch v0: Kafka stores these offsets in ZooKeeper, and a KRaft
  broker (3.9) answers them with UNSUPPORTED_VERSION on every partition ("Version 0
  offset commit/fetch requests" need ZooKeeper): the same here. v1 goes to the coordinator
  (its per-partition ``commit_timestamp``, -1 = now, is the commit's time).
- CreateTopics v0–1: sent on to the controller as the v2 request they are a subset of
  (``validate_only`` false for v0); the answer is cut back to the version's fields.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, replica_error, response_type
from kafka_common import wire

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

(LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS) = (
    ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.CREATE_TOPICS)
EARLIEST, LATEST = -2, -1
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def offsets_before(marks: list[tuple[int, int, int]], log_start: int, log_end: int, now_ms: int,
                   timestamp: int, max_num_offsets: int) -> list[int]:
    """Kafka's ``UnifiedLog.legacyFetchOffsetsBefore`` over (base offset, size, mtime ms) of
    each segment, oldest first. Pure."""
    points = [(max(base, log_start), mtime) for base, _size, mtime in marks]
    if marks and marks[-1][1] > 0:
        points.append((log_end, now_ms))
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    n = max(0, min(max_num_offsets, start + 1))
    return sorted((points[start - j][0] for j in range(n)), reverse=True)


def clamp_to_high_watermark(offsets: list[int], hw: int) -> list[int]:
    """Kafka's ``Partition.legacyFetchOffsetsForTimestamp`` for consumers."""
    if any(o > hw for o in offsets):
        rest = offsets
        while rest and rest[0] > hw:
            rest = rest[1:]
        return [hw, *rest]
    return offsets


async def _list_v0_one(api: ApiContext, name: str, partition: int, timestamp: int, max_num: int,
                       replica_id: int) -> tuple[ErrorCode, tuple[int, ...]]:
    if timestamp < EARLIEST:
        return ErrorCode.unsupported_version, ()
    view = api.view
    topic_id = view.image.topic_ids.get(name)
    registration = view.image.partition(topic_id, partition) if topic_id is not None else None
    if topic_id is None or registration is None:
        return ErrorCode.unknown_topic_or_partition, ()
    if view.is_partition_offline(topic_id, partition):
        return ErrorCode.kafka_storage_error, ()
    replica = view.local_replica(topic_id, partition)
    if replica is None or (registration.leader != view.node_id and replica_id != DEBUGGING_REPLICA_ID):
        return ErrorCode.not_leader_or_follower, ()
    try:
        marks = await view.replica_io(replica, replica.segment_marks)   # a stat per segment: off the loop
    except Exception as exc:
        mapped = replica_error(view, topic_id, partition, "list_offsets", exc)
        if mapped is None:
            raise
        return mapped[0], ()
    offsets = offsets_before(marks, replica.log_start_offset, replica.log_end_offset, int(time.time() * 1000),
                             timestamp, max_num)
    if replica_id == CONSUMER_REPLICA_ID:
        offsets = clamp_to_high_watermark(offsets, replica.high_watermark)
    return ErrorCode.none, tuple(offsets)


async def handle_list_offsets_v0(api: ApiContext, ctx: Any, req: Any) -> Any:
    part_cls = response_type(LIST_OFFSETS, 0, "ListOffsetsPartitionResponse")
    topic_cls = response_type(LIST_OFFSETS, 0, "ListOffsetsTopicResponse")
    resp_cls = response_type(LIST_OFFSETS, 0, "ListOffsetsResponse")
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, offsets = await _list_v0_one(api, t.name, p.partition_index, p.timestamp, p.max_num_offsets,
                                               req.replica_id)
            parts.append(part_cls(partition_index=p.partition_index, error_code=code, old_style_offsets=offsets))
        topics.append(topic_cls(name=t.name, partitions=tuple(parts)))
    return resp_cls(topics=tuple(topics))


def offset_commit_v0(req: Any) -> Any:
    """Every partition UNSUPPORTED_VERSION: v0 offsets live in ZooKeeper (Kafka 3.9 in KRaft)."""
    part_cls = response_type(OFFSET_COMMIT, 0, "OffsetCommitResponsePartition")
    topic_cls = response_type(OFFSET_COMMIT, 0, "OffsetCommitResponseTopic")
    resp_cls = response_type(OFFSET_COMMIT, 0, "OffsetCommitResponse")
    return resp_cls(topics=tuple(
        topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index, error_code=ErrorCode.unsupported_version)
            for p in t.partitions))
        for t in req.topics))


def offset_fetch_v0(req: Any) -> Any:
    """Kafka's ``OffsetFetchRequest.getErrorResponse`` for v0: every asked partition with
    offset -1, no metadata and UNSUPPORTED_VERSION."""
    part_cls = response_type(OFFSET_FETCH, 0, "OffsetFetchResponsePartition")
    topic_cls = response_type(OFFSET_FETCH, 0, "OffsetFetchResponseTopic")
    resp_cls = response_type(OFFSET_FETCH, 0, "OffsetFetchResponse")
    return resp_cls(topics=tuple(
        topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p, committed_offset=-1, metadata="", error_code=ErrorCode.unsupported_version)
            for p in t.partition_indexes))
        for t in (req.topics or ())))


def create_topics_as_v2(req: Any) -> Any:
    """The v2 request a CreateTopics v0/v1 request is a subset of (the controller's version)."""
    mod = wire.request_module(CREATE_TOPICS, 2)
    return wire.request_class(CREATE_TOPICS, 2)(
        topics=tuple(mod.CreatableTopic(
            name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            assignments=tuple(mod.CreatableReplicaAssignment(partition_index=a.partition_index,
                                                             broker_ids=a.broker_ids) for a in t.assignments),
            configs=tuple(mod.CreatableTopicConfig(name=c.name, value=c.value) for c in t.configs))
            for t in req.topics),
        timeout=req.timeout, validate_only=bool(getattr(req, "validate_only", False)))


def create_topics_answer(version: int, resp: Any) -> Any:
    """A CreateTopics answer (any version) cut to ``version``'s fields."""
    result_cls = response_type(CREATE_TOPICS, version, "CreatableTopicResult")
    resp_cls = response_type(CREATE_TOPICS, version, "CreateTopicsResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(
        build(result_cls, name=t.name, error_code=t.error_code, error_message=getattr(t, "error_message", None))
        for t in resp.topics))
