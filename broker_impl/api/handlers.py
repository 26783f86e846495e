"""The broker listener's request handlers, mounted on ``kafka_runtime.server``.

``BrokerApi(view)`` declares ``supported_apis`` ({api_key: (min, max)}, which the server
also uses to answer ApiVersions) and ``async handle(ctx, header, request)`` returning the
response entity of the request's version, or ``None`` when no response must be sent
(Produce with acks=0). The server must handle one connection's requests strictly in order
(await ``handle`` before decoding the next), as Kafka does.

Version choices: Produce 0–10 (v0–2 through our
own schemas in :mod:`legacy_produce`, since kio has none), Fetch 4–16 (v13+ by topic id;
Metadata returns real topic ids), Metadata 0–13, ListOffsets 1–7, CreateTopics 2–7,
InitProducerId 0–4, FindCoordinator 0–3, DescribeCluster 0–1, DescribeLogDirs 1–4,
AlterReplicaLogDirs 1–2.

Why Produce from v0 and FindCoordinator at all: librdkafka enables codecs from the
advertised ranges. librdkafka 2.0.2 (Debian's kcat) compresses with gzip/snappy only when
Produce v0 is in range, and every librdkafka needs FindCoordinator v0 for lz4; without
them it silently sends uncompressed batches. FindCoordinator is answered truthfully: this
cluster has no group or transaction coordinator → COORDINATOR_NOT_AVAILABLE.

The listener must consult ``request_classes`` ({(api_key, version): kio-style class})
before ``kafka_common.wire.request_class`` so that Produce v0–2 decode.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable

from broker_impl.api import admin, fetch, legacy_produce, log_dirs, metadata, produce
from broker_impl.api.fetch_session import FetchSessionCache
from broker_impl.api.purgatory import Purgatory
from broker_impl.api.view import BrokerView
from broker_impl.state.producers import ProducerIdAllocator

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR = 10
CREATE_TOPICS, INIT_PRODUCER_ID = 19, 22
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER = 34, 35, 60

SUPPORTED_APIS: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 10),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 13),
    FIND_COORDINATOR: (0, 3),
    CREATE_TOPICS: (2, 7),
    INIT_PRODUCER_ID: (0, 4),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    DESCRIBE_CLUSTER: (0, 1),
}

Handler = Callable[["BrokerApi", Any, Any], Awaitable[Any]]
_HANDLERS: dict[int, Handler] = {
    PRODUCE: produce.handle_produce,
    FETCH: fetch.handle_fetch,
    LIST_OFFSETS: admin.handle_list_offsets,
    METADATA: metadata.handle_metadata,
    FIND_COORDINATOR: admin.handle_find_coordinator,
    CREATE_TOPICS: admin.handle_create_topics,
    INIT_PRODUCER_ID: admin.handle_init_producer_id,
    ALTER_REPLICA_LOG_DIRS: log_dirs.handle_alter_replica_log_dirs,
    DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    DESCRIBE_CLUSTER: admin.handle_describe_cluster,
}


class BrokerApi:
    def __init__(self, view: BrokerView, *, producer_id_base: int) -> None:
        self.view = view
        self.supported_apis = dict(SUPPORTED_APIS)
        # Request schemas kio 0.6.5 lacks; the listener must look here before kio's index.
        self.request_classes: dict[tuple[int, int], type] = dict(legacy_produce.REQUEST_CLASSES)
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(self.purgatory)   # replica fetches (KIP-227)
        # sequence state lives with each partition log (PartitionLog.producer_state)
        self.producer_ids = ProducerIdAllocator(producer_id_base)

    async def handle(self, ctx: Any, header: Any, request: Any) -> Any | None:
        key = int(request.__api_key__)
        handler = _HANDLERS.get(key)
        if handler is None:
            raise KeyError(f"API {key} is not served by the broker listener")
        return await handler(self, ctx, request)

    def notify_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        """Something changed on a partition (append, HW, ISR, leadership): re-check its
        delayed produces and long-polling fetches."""
        self.purgatory.notify((topic_id, partition))

    def notify_all(self) -> None:
        self.purgatory.notify_all()

    def on_image_changes(self, changes: Any) -> None:
        """After the runtime applied a metadata batch: wake waiters of every partition it
        changed (leadership/ISR moves complete or fail delayed produces and fetches).
        ``changes`` is the ``ImageChanges`` value the runtime drained from the image for its
        replica management (only ``.partitions`` keys are read)."""
        for topic_id, partition in changes.partitions:
            self.notify_partition(topic_id, partition)
