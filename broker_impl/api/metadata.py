"""Metadata (API 3): brokers, topics with ids, leaders, ISR, offline replicas, auto-create.

- Brokers: registered, unfenced brokers that have an endpoint on the listener the request
  came in on (``ctx.listener_name``; ``BrokerView.listener_name`` without a context).
- ``controller_id``: clients cannot reach a KRaft controller, so (as Kafka) a live broker id
  is given — the lowest one.
- A partition's ``offline_replicas``: replicas whose broker is not registered, or whose
  assigned dir is not online in that broker's registration (LOST and unknown dirs count
  as offline; UNASSIGNED/MIGRATING as online — ``BrokerRegistration.has_online_dir``).
- No leader → LEADER_NOT_AVAILABLE on the partition.
- Topic lists: v0 empty = all; v1+ ``None`` = all, ``()`` = none.
- Unknown topic + ``allow_auto_topic_creation`` (always true below v4) + broker config
  ``auto.create.topics.enable`` → CreateTopics through the controller channel with the
  broker's ``num.partitions``/``default.replication.factor``; the answer for that topic is
  LEADER_NOT_AVAILABLE (the client retries until the image has it).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, response_type
from kafka_common import wire
from kafka_common.ids import from_wire
from kafka_common.metadata.model import NO_LEADER

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

API_KEY = ApiKey.METADATA
CREATE_TOPICS_KEY = ApiKey.CREATE_TOPICS
CREATE_TOPICS_VERSION = 7
AUTO_CREATE_TIMEOUT_S = 5.0
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})   # Metadata marks it is_internal, as Kafka does
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
log = logging.getLogger(__name__)


def valid_topic_name(name: str | None) -> bool:
    return bool(name) and name not in (".", "..") and _LEGAL_TOPIC.match(name) is not None  # type: ignore[arg-type]


def listener_of(api: ApiContext, ctx: Any) -> str:
    """The listener the request came in on (Kafka answers with that listener's endpoints)."""
    return getattr(ctx, "listener_name", None) or api.view.listener_name


def live_brokers(api: ApiContext, listener_name: str) -> list[tuple[int, str, int, str | None]]:
    out = []
    for broker_id, reg in sorted(api.view.image.brokers.items()):
        if reg.fenced:
            continue
        endpoint = reg.endpoint(listener_name)
        if endpoint is not None:
            out.append((broker_id, endpoint.host, endpoint.port, reg.rack))
    return out


def offline_replicas(api: ApiContext, replicas: tuple[int, ...], directories: tuple[Any, ...]) -> tuple[int, ...]:
    brokers = api.view.image.brokers
    out = []
    for broker_id, dir_id in zip(replicas, directories):
        reg = brokers.get(broker_id)
        if reg is None or not reg.has_online_dir(dir_id):
            out.append(broker_id)
    return tuple(out)


async def auto_create(api: ApiContext, names: list[str]) -> None:
    req_cls = wire.request_class(CREATE_TOPICS_KEY, CREATE_TOPICS_VERSION)
    topic_cls = getattr(wire.request_module(CREATE_TOPICS_KEY, CREATE_TOPICS_VERSION), "CreatableTopic")
    request = build(req_cls, topics=tuple(
        build(topic_cls, name=n, num_partitions=api.view.num_partitions,
              replication_factor=api.view.default_replication_factor, assignments=(), configs=())
        for n in names), validate_only=False)
    try:
        response = await asyncio.wait_for(api.view.controller.create_topics(request), AUTO_CREATE_TIMEOUT_S)
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
        log.warning("auto-create of %s failed: %s", names, exc)
        return
    for t in response.topics:
        if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.warning("auto-create of %s: %s %s", t.name, t.error_code.name, t.error_message)


async def handle_metadata(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    view = api.view
    image = view.image
    topics_req = req.topics
    list_all = topics_req is None or (version == 0 and len(topics_req) == 0)
    allow_auto = getattr(req, "allow_auto_topic_creation", True) and view.auto_create_topics

    wanted: list[tuple[str | None, Any]] = []  # (name, topic_id) as asked
    if list_all:
        wanted = [(t.name, t.topic_id) for t in image.topics.values()]
    else:
        for t in topics_req:
            name = getattr(t, "name", None)
            tid = from_wire(getattr(t, "topic_id", None))
            if name is None and tid.int != 0:
                reg = image.topics.get(tid)
                wanted.append((reg.name if reg else None, tid))
            else:
                wanted.append((name, image.topic_ids.get(name) if name is not None else None))

    to_create = [n for n, tid in wanted if tid is None and n is not None and valid_topic_name(n) and allow_auto]
    if to_create:
        await auto_create(api, sorted(set(to_create)))
        wanted = [(n, image.topic_ids.get(n)) if tid is None and n in to_create else (n, tid) for n, tid in wanted]

    part_cls = response_type(API_KEY, version, "MetadataResponsePartition")
    topic_cls = response_type(API_KEY, version, "MetadataResponseTopic")
    broker_cls = response_type(API_KEY, version, "MetadataResponseBroker")
    resp_cls = response_type(API_KEY, version, "MetadataResponse")
    topics = []
    for name, tid in wanted:
        if tid is None or tid not in image.topics:
            if name is None:
                error = ErrorCode.unknown_topic_id
            elif not valid_topic_name(name):
                error = ErrorCode.invalid_topic_exception
            elif name in to_create:
                error = ErrorCode.leader_not_available
            else:
                error = ErrorCode.unknown_topic_or_partition
            topics.append(build(topic_cls, error_code=error, name=name, topic_id=None if name else tid,
                                is_internal=False, partitions=()))
            continue
        parts = []
        for pid, p in sorted(image.partitions_of(tid).items()):
            parts.append(build(
                part_cls,
                error_code=ErrorCode.leader_not_available if p.leader == NO_LEADER else ErrorCode.none,
                partition_index=pid, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas), isr_nodes=tuple(p.isr),
                offline_replicas=offline_replicas(api, p.replicas, p.directories)))
        topics.append(build(topic_cls, error_code=ErrorCode.none, name=image.topics[tid].name, topic_id=tid,
                            is_internal=image.topics[tid].name in INTERNAL_TOPICS, partitions=tuple(parts)))
    brokers = live_brokers(api, listener_of(api, ctx))
    return build(resp_cls, throttle_time=NO_THROTTLE,
                 brokers=tuple(build(broker_cls, node_id=b, host=h, port=pt, rack=r) for b, h, pt, r in brokers),
                 cluster_id=view.cluster_id, controller_id=brokers[0][0] if brokers else -1,
                 topics=tuple(topics), error_code=ErrorCode.none, cluster_authorized_operations=-2147483648)
