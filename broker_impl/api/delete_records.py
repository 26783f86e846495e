"""DeleteRecords (API 21): the leader moves a partition's log start offset.

Per partition (first failing rule answers): known topic/partition
(UNKNOWN_TOPIC_OR_PARTITION) → its dir online (KAFKA_STORAGE_ERROR) → this broker leads it
(NOT_LEADER_OR_FOLLOWER) → ``offset`` -1 means the high watermark; any other negative
offset or one above the high watermark → OFFSET_OUT_OF_RANGE → the log start moves up to
``offset`` (never down) and the segments wholly below it are deleted, on the partition's
dir worker (a disk error there takes the dir offline through the one failure path and is
answered KAFKA_STORAGE_ERROR). ``low_watermark`` = the leader's new log start offset.

Followers take the new log start from the ``log_start_offset`` of their next fetch answer
(``broker_impl.replication.fetcher``). Unlike Kafka, the answer does not wait until every
follower has moved its own log start (Kafka's DelayedDeleteRecords): the leader's log start
is what consumers see (ListOffsets EARLIEST, Fetch below it → OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, replica_error, response_type

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

DELETE_RECORDS = ApiKey.DELETE_RECORDS
HIGH_WATERMARK = -1


async def _delete_one(api: ApiContext, name: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    view = api.view
    topic_id = view.image.topic_ids.get(name)
    registration = view.image.partition(topic_id, partition) if topic_id is not None else None
    if topic_id is None or registration is None:
        return ErrorCode.unknown_topic_or_partition, -1
    if view.is_partition_offline(topic_id, partition):
        return ErrorCode.kafka_storage_error, -1
    replica = view.local_replica(topic_id, partition) if registration.leader == view.node_id else None
    if replica is None:
        return ErrorCode.not_leader_or_follower, -1
    hw = replica.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0 or target > hw:
        return ErrorCode.offset_out_of_range, -1
    lock_of = getattr(view, "partition_lock", None)
    try:
        if lock_of is None:
            start = await view.replica_io(replica, replica.increment_log_start_offset, target)
        else:
            async with lock_of(name, partition):
                start = await view.replica_io(replica, replica.increment_log_start_offset, target)
    except Exception as exc:
        mapped = replica_error(view, topic_id, partition, "delete_records", exc)
        if mapped is None:
            raise
        return mapped[0], -1
    api.notify_partition(topic_id, partition)
    return ErrorCode.none, start


async def handle_delete_records(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    part_cls = response_type(DELETE_RECORDS, version, "DeleteRecordsPartitionResult")
    topic_cls = response_type(DELETE_RECORDS, version, "DeleteRecordsTopicResult")
    resp_cls = response_type(DELETE_RECORDS, version, "DeleteRecordsResponse")
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, low = await _delete_one(api, t.name, p.partition_index, p.offset)
            parts.append(build(part_cls, partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
