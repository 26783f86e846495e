"""ListOffsets (2), CreateTopics (19), InitProducerId (22), DescribeCluster (60).

- ListOffsets: timestamp -2 → log start offset, -1 → high watermark (= last stable offset,
  no transactions), ≥ 0 → the first batch whose max timestamp reaches it (offset -1 if
  none), -3 (max timestamp, v7) → UNSUPPORTED: answered with offset -1. Leader only. The
  timestamp search reads the log off the event loop (``BrokerView.replica_io``).
- CreateTopics: forwarded unchanged to the controller channel; no answer from the
  controller → REQUEST_TIMED_OUT for every topic, with the reason.
- InitProducerId: idempotent producers only (a transactional id → TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
  producer ids from :class:`broker_impl.state.producers.ProducerIdAllocator`.
- DescribeCluster: the live brokers of this listener (endpoint type 1 only).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_impl.api import legacy_versions
from broker_impl.api.entities import NO_THROTTLE, build, replica_error, response_type
from broker_impl.api.metadata import listener_of, live_brokers
from kafka_common import batch_header as bh

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

log = logging.getLogger(__name__)
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
CREATE_TOPICS_TIMEOUT_S = 30.0


async def _list_one(api: ApiContext, name: str, partition: int, timestamp: int) -> tuple[ErrorCode, int, int]:
    view = api.view
    topic_id = view.image.topic_ids.get(name)
    registration = view.image.partition(topic_id, partition) if topic_id is not None else None
    if topic_id is None or registration is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    if view.is_partition_offline(topic_id, partition):
        return ErrorCode.kafka_storage_error, -1, -1
    replica = view.local_replica(topic_id, partition) if registration.leader == view.node_id else None
    if replica is None:
        return ErrorCode.not_leader_or_follower, -1, -1
    try:
        if timestamp == EARLIEST:
            return ErrorCode.none, replica.log_start_offset, -1
        if timestamp == LATEST:
            return ErrorCode.none, replica.high_watermark, -1
        if timestamp < 0:
            return ErrorCode.none, -1, -1
        found = await view.replica_io(replica, _find_timestamp, replica, timestamp)  # off the loop
    except Exception as exc:
        mapped = replica_error(view, topic_id, partition, "list_offsets", exc)
        if mapped is None:
            raise
        return mapped[0], -1, -1
    if found is None or found[0] >= replica.high_watermark:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, found[0], found[1]


SCAN_CHUNK_BYTES = 1 << 20


def _find_timestamp(replica: Any, timestamp: int) -> tuple[int, int] | None:
    """The blocking part of ListOffsets by time (on the replica's dir worker)."""
    lookup = getattr(replica, "offset_for_timestamp", None)
    if lookup is None:
        return _scan_for_timestamp(replica, timestamp)
    offset = lookup(timestamp)
    return None if offset is None or offset >= replica.high_watermark else (offset, _max_timestamp_at(replica, offset))


def _max_timestamp_at(replica: Any, offset: int) -> int:
    data = replica.read(offset, 1, None, True)
    return bh.read_header(data).max_timestamp if data else -1


def _scan_for_timestamp(replica: Any, timestamp: int) -> tuple[int, int] | None:
    """First batch (below the HW) whose max timestamp reaches ``timestamp``: a header scan
    through ``read`` for logs without a time index. Returns (base offset, max timestamp)."""
    offset = replica.log_start_offset
    hw = replica.high_watermark
    while offset < hw:
        data = replica.read(offset, SCAN_CHUNK_BYTES, hw, True)
        if not data:
            return None
        for _pos, h in bh.iter_batches(data, check_crc=False):
            if h.max_timestamp >= timestamp:
                return max(h.base_offset, offset), h.max_timestamp
            offset = h.next_offset
    return None


async def handle_list_offsets(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    if version == 0:  # the old-style offsets array (Kafka 3.9's semantics)
        return await legacy_versions.handle_list_offsets_v0(api, ctx, req)
    part_cls = response_type(2, version, "ListOffsetsPartitionResponse")
    topic_cls = response_type(2, version, "ListOffsetsTopicResponse")
    resp_cls = response_type(2, version, "ListOffsetsResponse")
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            error, offset, ts = await _list_one(api, t.name, p.partition_index, p.timestamp)
            registration = None
            topic_id = api.view.image.topic_ids.get(t.name)
            if topic_id is not None:
                registration = api.view.image.partition(topic_id, p.partition_index)
            parts.append(build(part_cls, partition_index=p.partition_index, error_code=error, timestamp=ts,
                               offset=offset, old_style_offsets=(offset,) if offset >= 0 else (),
                               leader_epoch=registration.leader_epoch if registration and error is ErrorCode.none else -1))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_create_topics(api: ApiContext, ctx: Any, req: Any) -> Any:
    if req.__version__ < 2:  # v0-1: forwarded as the v2 request they are a subset of
        return legacy_versions.create_topics_answer(
            req.__version__, await handle_create_topics(api, ctx, legacy_versions.create_topics_as_v2(req)))
    try:
        return await asyncio.wait_for(api.view.controller.create_topics(req), CREATE_TOPICS_TIMEOUT_S)
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
        reason = f"controller unreachable: {type(exc).__name__}: {exc}"
        log.warning("CreateTopics: %s", reason)
    version = req.__version__
    result_cls = response_type(19, version, "CreatableTopicResult")
    resp_cls = response_type(19, version, "CreateTopicsResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(
        build(result_cls, name=t.name, topic_id=None, error_code=ErrorCode.request_timed_out, error_message=reason,
              num_partitions=-1, replication_factor=-1, configs=None)
        for t in req.topics))


async def handle_init_producer_id(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp_cls = response_type(22, req.__version__, "InitProducerIdResponse")
    if req.transactional_id is not None:
        return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed,
                     producer_id=-1, producer_epoch=-1)
    identity = api.producer_ids.init(getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1))
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 producer_id=identity.producer_id, producer_epoch=identity.epoch)


async def handle_describe_cluster(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    broker_cls = response_type(60, version, "DescribeClusterBroker")
    resp_cls = response_type(60, version, "DescribeClusterResponse")
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type != 1:
        return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
                     error_message=f"endpoint type {endpoint_type} is not served by brokers", endpoint_type=endpoint_type,
                     cluster_id=api.view.cluster_id, controller_id=-1, brokers=(),
                     cluster_authorized_operations=-2147483648)
    brokers = live_brokers(api, listener_of(api, ctx))
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                 endpoint_type=1, cluster_id=api.view.cluster_id, controller_id=brokers[0][0] if brokers else -1,
                 brokers=tuple(build(broker_cls, broker_id=b, host=h, port=p, rack=r) for b, h, p, r in brokers),
                 cluster_authorized_operations=-2147483648)
