"""The broker listener's request handlers, mounted on ``kafka_runtime.server``.

``BrokerApi(view)`` declares ``supported_apis`` ({api_key: (min, max)}, which the server
also uses to answer ApiVersions) and ``async handle(ctx, header, request)`` returning the
response entity of the request's version, or ``None`` when no response must be sent
(Produce with acks=0). The server must handle one connection's requests strictly in order
(await ``handle`` before decoding the next), as Kafka does.

Version choices: Produce 0–10 (v0–2 through our
own schemas in :mod:`legacy_produce`, since kio has none), Fetch 0–16 (v13+ by topic id;
Metadata returns real topic ids), Metadata 0–13, ListOffsets 0–7, CreateTopics 0–7,
InitProducerId 0–4, DescribeCluster 0–1, DescribeLogDirs 0–4, AlterReplicaLogDirs 0–2,
DeleteRecords 0–2, DescribeConfigs 0–4, AlterConfigs 0–2,
IncrementalAlterConfigs 0–1 (the last two forwarded to the controller), DeleteTopics 0–6
and CreatePartitions 0–3 (forwarded, :mod:`topic_admin`), and the classic
group APIs of :mod:`broker_impl.api.group_handlers` (FindCoordinator 0–6, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete). ApiVersions advertises exactly this table. Every version
Kafka 3.9 serves for these APIs is served (Fetch v0–3 with the records down-converted to
message formats v0/v1, :mod:`down_convert`); the old versions kio 0.6.5 lacks are
:mod:`kafka_common.legacy_schemas`, their Kafka 3.9 semantics :mod:`legacy_versions`.

Why Produce from v0: librdkafka enables codecs from the advertised ranges; librdkafka 2.0.2
(Debian's kcat) compresses with gzip/snappy only when Produce v0 is in range (and every
librdkafka needs FindCoordinator v0 in range for lz4 — served for real now, v0–6).

The listener must consult ``request_classes`` ({(api_key, version): kio-style class})
before ``kafka_common.wire.request_class`` so that Produce v0–2 decode.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Awaitable, Callable

from kafka_common.wire import ApiKey
from broker_impl.api import admin, configs, delete_records, fetch, legacy_produce, log_dirs, metadata, produce
from broker_impl.api import topic_admin
from broker_impl.api.fetch_session import FetchSessionCache
from broker_impl.api import operator_calls
from broker_impl.api import group_handlers
from broker_impl.groups.coordinator import GroupCoordinator
from broker_impl.groups.coordinator_config import CoordinatorConfig
from broker_impl.api.purgatory import Purgatory
from broker_impl.api.view import BrokerView
from broker_impl.state.producers import ProducerIdAllocator

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA
(CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID) = (
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_RECORDS, ApiKey.INIT_PRODUCER_ID)
(DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS) = (
    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
(ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER) = (
    ApiKey.ALTER_REPLICA_LOG_DIRS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.DESCRIBE_CLUSTER)

SUPPORTED_APIS: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 10),
    FETCH: (0, 16),                  # v0-3: message formats v0/v1, down-converted
    LIST_OFFSETS: (0, 7),            # v0 and the other old versions kio lacks:
    METADATA: (0, 13),
    CREATE_TOPICS: (0, 7),           # kafka_common.legacy_schemas (Kafka 3.9's floor)
    INIT_PRODUCER_ID: (0, 4),
    ALTER_REPLICA_LOG_DIRS: (0, 2),
    DESCRIBE_LOG_DIRS: (0, 5),  # v5: IsCordoned (KIP-1066)
    DESCRIBE_CLUSTER: (0, 1),
    DELETE_RECORDS: (0, 2),
    DESCRIBE_CONFIGS: (0, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    topic_admin.DELETE_TOPICS: (0, 6),           # v0: kafka_common.legacy_schemas
    topic_admin.CREATE_PARTITIONS: (0, 3),
    **group_handlers.SUPPORTED_APIS,
    **operator_calls.SUPPORTED_APIS,
}

Handler = Callable[["BrokerApi", Any, Any], Awaitable[Any]]
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
    DELETE_RECORDS: delete_records.handle_delete_records,
    DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ALTER_CONFIGS: configs.handle_alter_configs,
    INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
    topic_admin.DELETE_TOPICS: topic_admin.handle_delete_topics,
    topic_admin.CREATE_PARTITIONS: topic_admin.handle_create_partitions,
    **group_handlers.HANDLERS,
    **operator_calls.HANDLERS,
}


class BrokerApi:
    def __init__(self, view: BrokerView, *, producer_id_base: int,
                 group_config: CoordinatorConfig | None = None, events: Any = None) -> None:
        self.view = view
        self.supported_apis = dict(SUPPORTED_APIS)
        # Request schemas kio 0.6.5 lacks; the listener must look here before kio's index.
        self.request_classes: dict[tuple[int, int], type] = dict(legacy_produce.REQUEST_CLASSES)
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(self.purgatory)   # replica fetches (KIP-227)
        # sequence state lives with each partition log (PartitionLog.producer_state)
        self.producer_ids = ProducerIdAllocator(producer_id_base)
        # classic consumer groups: coordinator of the __consumer_offsets partitions led here
        self.groups = GroupCoordinator(view, self.purgatory, self.notify_partition,
                                       group_config or CoordinatorConfig(),
                                       emit=events.emit if events is not None else None)

    async def handle(self, ctx: Any, header: Any, request: Any) -> Any | None:
        key = int(request.__api_key__)
        handler = _HANDLERS.get(key)
        if handler is None:
            raise KeyError(f"API {key} is not served by the broker listener")
        return await handler(self, ctx, request)

    def notify_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        """Something changed on a partition (append, HW, ISR, leadership): re-check its
        delayed produces and long-polling fetches; the group coordinator follows its offsets
        partitions (leadership, local dir offline)."""
        self.purgatory.notify((topic_id, partition))
        self.groups.on_partition_changed(topic_id, partition)

    def notify_all(self) -> None:
        self.purgatory.notify_all()

    def on_image_changes(self, changes: Any) -> None:
        """After the runtime applied a metadata batch: wake waiters of every partition it
        changed (leadership/ISR moves complete or fail delayed produces and fetches).
        ``changes`` is the ``ImageChanges`` value the runtime drained from the image for its
        replica management (only ``.partitions`` keys are read)."""
        self.groups.start()  # on the loop: the coordinator follows the image from now on
        for topic_id, partition in changes.partitions:
            self.notify_partition(topic_id, partition)
        if changes.removed_topics:
            self.groups.reconcile_all()
