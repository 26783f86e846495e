"""The broker listener's request handlers, mounted on ``kafka_runtime.server``.

``BrokerApi(view)`` declares ``supported_apis`` ({api_key: (min, max)}, which the server
also uses to answer ApiVersions) and ``async handle(ctx, header, request)`` returning the
response entity of the request's version, or ``None`` when no response must be sent
(Produce with acks=0). The server must handle one connection's requests strictly in order
(await ``handle`` before decoding the next), as Kafka does.

Version choices (see ``/work/shared/spec/wire-notes.md``): Produce 3–10, Fetch 4–16
(v13+ by topic id; Metadata returns real topic ids), Metadata 0–13, ListOffsets 1–7,
CreateTopics 2–7, InitProducerId 0–4, DescribeCluster 0–1, DescribeLogDirs 1–4,
AlterReplicaLogDirs 1–2. kio cannot parse Produce v0–2, so Produce starts at 3: as a
consequence librdkafka 2.0.2 (kcat) only compresses with zstd (its gzip/snappy gates want
Produce v0 in the range, lz4's wants FindCoordinator); librdkafka 2.16 and kafka-python
compress with gzip, snappy and zstd.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable

from broker_impl.api import admin, fetch, log_dirs, metadata, produce
from broker_impl.api.purgatory import Purgatory
from broker_impl.api.view import BrokerView
from broker_impl.state.producers import ProducerIdAllocator, ProducerStateTable

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, INIT_PRODUCER_ID = 19, 22
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER = 34, 35, 60

SUPPORTED_APIS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 10),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 13),
    CREATE_TOPICS: (2, 7),
    INIT_PRODUCER_ID: (0, 4),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    DESCRIBE_CLUSTER: (0, 1),
}

Handler = Callable[["BrokerApi", Any], Awaitable[Any]]
_HANDLERS: dict[int, Handler] = {
    PRODUCE: produce.handle_produce,
    FETCH: fetch.handle_fetch,
    LIST_OFFSETS: admin.handle_list_offsets,
    METADATA: metadata.handle_metadata,
    CREATE_TOPICS: admin.handle_create_topics,
    INIT_PRODUCER_ID: admin.handle_init_producer_id,
    ALTER_REPLICA_LOG_DIRS: log_dirs.handle_alter_replica_log_dirs,
    DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    DESCRIBE_CLUSTER: admin.handle_describe_cluster,
}


class BrokerApi:
    def __init__(self, view: BrokerView, *, producer_id_base: int, producers: ProducerStateTable | None = None) -> None:
        self.view = view
        self.supported_apis = dict(SUPPORTED_APIS)
        self.purgatory = Purgatory()
        self.producers = producers if producers is not None else ProducerStateTable()
        self.producer_ids = ProducerIdAllocator(producer_id_base)

    async def handle(self, ctx: Any, header: Any, request: Any) -> Any | None:
        key = int(request.__api_key__)
        handler = _HANDLERS.get(key)
        if handler is None:
            raise KeyError(f"API {key} is not served by the broker listener")
        return await handler(self, request)

    def notify_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        """Something changed on a partition (append, HW, ISR, leadership): re-check its
        delayed produces and long-polling fetches."""
        self.purgatory.notify((topic_id, partition))

    def notify_all(self) -> None:
        self.purgatory.notify_all()
