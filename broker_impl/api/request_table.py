"""The broker listener's one request table: ``{ApiKey: Handler}``.

Every API the client listener serves has one row here, and nothing else lists them:
ApiVersions advertises :func:`supported_apis` (the rows' versions, plus what the server adds
itself: ApiVersions, SASL), :meth:`BrokerApi.handle <broker_impl.api.handlers.BrokerApi.handle>`
dispatches by the row, and the listener decodes the versions kio lacks with
:func:`request_classes` (the rows' own schemas) before kio's index.

A row is ``Handler(versions, fn, request_classes)``: ``fn`` is ``async fn(api, ctx, request)``
of a handler module, typed against :class:`broker_impl.api.context.ApiContext`, returning the
response entity of the request's version, or ``None`` when no response must be sent (Produce
with acks=0); ``request_classes`` maps a version to the request class of a schema kio does not
ship (Produce v0–2, :mod:`broker_impl.api.legacy_produce`). Every handler runs on the event
loop, one connection's requests strictly in order (the listener awaits one before decoding the
next), as Kafka does.

Version choices: every version Kafka 3.9 serves for these APIs is served (Fetch v0–3 with the
records down-converted to message formats v0/v1, :mod:`broker_impl.api.down_convert`); the old
versions kio 0.6.5 lacks are :mod:`kafka_common.legacy_schemas`, their Kafka 3.9 semantics
:mod:`broker_impl.api.legacy_versions`. Why Produce from v0: librdkafka enables codecs from the
advertised ranges; librdkafka 2.0.2 (Debian's kcat) compresses with gzip/snappy only when
Produce v0 is in range (and every librdkafka needs FindCoordinator v0 in range for lz4).
The group APIs are Kafka 4.0's ranges for the classic protocol (OffsetCommit/OffsetFetch v10
address topics by id, KIP-848's consumer protocol: not served).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from kafka_common.wire import ApiKey
from broker_impl.api import admin, configs, delete_records, fetch, group_handlers, legacy_produce, log_dirs
from broker_impl.api import metadata, offset_handlers, operator_calls, produce, topic_admin

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext


@dataclasses.dataclass(frozen=True, slots=True)
class Handler:
    """How the listener serves one API (module docstring)."""

    versions: tuple[int, int]
    fn: Callable[[ApiContext, Any, Any], Awaitable[Any]]
    request_classes: Mapping[int, type] = dataclasses.field(default_factory=dict)  # version -> class kio lacks


_PRODUCE_V0_2 = MappingProxyType({v: legacy_produce.request_module(v).ProduceRequest
                                  for v in legacy_produce.VERSIONS})

REQUESTS: dict[ApiKey, Handler] = {
    # the data plane
    ApiKey.PRODUCE: Handler((0, 10), produce.handle_produce, _PRODUCE_V0_2),
    ApiKey.FETCH: Handler((0, 16), fetch.handle_fetch),  # v0-3: message formats v0/v1, down-converted
    ApiKey.LIST_OFFSETS: Handler((0, 7), admin.handle_list_offsets),  # v0: kafka_common.legacy_schemas
    ApiKey.METADATA: Handler((0, 13), metadata.handle_metadata),
    ApiKey.INIT_PRODUCER_ID: Handler((0, 4), admin.handle_init_producer_id),
    ApiKey.DELETE_RECORDS: Handler((0, 2), delete_records.handle_delete_records),
    # the cluster and its dirs
    ApiKey.DESCRIBE_CLUSTER: Handler((0, 1), admin.handle_describe_cluster),
    ApiKey.ALTER_REPLICA_LOG_DIRS: Handler((0, 2), log_dirs.handle_alter_replica_log_dirs),
    ApiKey.DESCRIBE_LOG_DIRS: Handler((0, 5), log_dirs.handle_describe_log_dirs),  # v5: IsCordoned (KIP-1066)
    # topics and configs: CreateTopics, DeleteTopics, CreatePartitions and the config changes
    # are forwarded to the active controller
    ApiKey.CREATE_TOPICS: Handler((0, 7), admin.handle_create_topics),  # v0-1: kafka_common.legacy_schemas
    ApiKey.DELETE_TOPICS: Handler((0, 6), topic_admin.handle_delete_topics),  # v0: kafka_common.legacy_schemas
    ApiKey.CREATE_PARTITIONS: Handler((0, 3), topic_admin.handle_create_partitions),
    ApiKey.DESCRIBE_CONFIGS: Handler((0, 4), configs.handle_describe_configs),
    ApiKey.ALTER_CONFIGS: Handler((0, 2), configs.handle_alter_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Handler((0, 1), configs.handle_incremental_alter_configs),
    # the classic group APIs (broker_impl.api.group_handlers, .offset_handlers)
    ApiKey.FIND_COORDINATOR: Handler((0, 6), group_handlers.handle_find_coordinator),  # v4+: batched keys
    ApiKey.JOIN_GROUP: Handler((0, 9), group_handlers.handle_join_group),
    ApiKey.SYNC_GROUP: Handler((0, 5), group_handlers.handle_sync_group),
    ApiKey.HEARTBEAT: Handler((0, 4), group_handlers.handle_heartbeat),
    ApiKey.LEAVE_GROUP: Handler((0, 5), group_handlers.handle_leave_group),
    ApiKey.LIST_GROUPS: Handler((0, 5), group_handlers.handle_list_groups),
    ApiKey.DESCRIBE_GROUPS: Handler((0, 6), group_handlers.handle_describe_groups),
    ApiKey.DELETE_GROUPS: Handler((0, 2), group_handlers.handle_delete_groups),
    ApiKey.OFFSET_COMMIT: Handler((0, 9), offset_handlers.handle_offset_commit),  # v0-1: legacy_schemas
    ApiKey.OFFSET_FETCH: Handler((0, 9), offset_handlers.handle_offset_fetch),  # v8+: several groups
    ApiKey.OFFSET_DELETE: Handler((0, 0), offset_handlers.handle_offset_delete),
    # the operator's calls, forwarded to the active controller (broker_impl.api.operator_calls)
    ApiKey.ELECT_LEADERS: Handler((0, 2), operator_calls.handle_elect_leaders),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Handler((0, 1), operator_calls.handle_alter_partition_reassignments),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Handler((0, 0), operator_calls.handle_list_partition_reassignments),
}


def supported_apis(table: Mapping[ApiKey, Handler] = REQUESTS) -> dict[int, tuple[int, int]]:
    """What the listener advertises: api key -> (min, max) version of every row."""
    return {key: h.versions for key, h in table.items()}


def request_classes(table: Mapping[ApiKey, Handler] = REQUESTS) -> dict[tuple[int, int], type]:
    """(api key, version) -> request class, for the versions whose schema a row brings itself."""
    return {(key, version): cls for key, h in table.items() for version, cls in h.request_classes.items()}
