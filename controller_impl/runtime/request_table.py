"""The CONTROLLER listener's one request table: ``{ApiKey: Handler}``.

Every API the listener serves has one row here, and nothing else lists them: ApiVersions
advertises :func:`supported_apis` (the rows' versions, plus what the server adds itself:
ApiVersions, SASL), :meth:`ControllerRuntime.handle` dispatches by the row, and the write
path (:class:`~controller_impl.runtime.leader_writes.LeaderWrites`) reads how to run it.

A row is either

- a **state** handler: a method of the pure :class:`ControllerState` (``fn(state, request,
  now_ms) -> ControllerResult``), run by the active controller through the write path;
  ``reason`` is written on the partition_change events of what it changed, ``inline`` runs
  it on the loop (O(1) work: a thread hop would cost more), ``atomic`` writes its records as
  one batch whatever their number (all or nothing; the others are split into batches of
  ``MAX_RECORDS_PER_BATCH`` as Kafka's controller does), ``not_active`` builds the answer of
  a controller that is not the active one when the response has no top-level error code;
- or **served** by the Raft node or the metadata Fetch: ``serve(host, request, version)``,
  on every controller, leader or not.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import TYPE_CHECKING, Any, Callable

from kafka_common import wire
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.runtime import raft_wire as rw
from controller_impl.runtime.metadata_fetch import serve_fetch
from controller_impl.state import configs
from controller_impl.state.controller import ControllerState

if TYPE_CHECKING:
    from controller_impl.runtime.host import ControllerHost

ZERO = datetime.timedelta(0)


@dataclasses.dataclass(frozen=True)
class Handler:
    """How the listener serves one API (module docstring)."""

    versions: tuple[int, int]
    fn: Callable[..., Any] | None = None  # a ControllerState method (a state handler)
    reason: str = ""
    inline: bool = False
    atomic: bool = False
    not_active: Callable[[Any, int, str], Any] | None = None  # (request, version, why) -> response
    serve: Callable[[ControllerHost, Any, int], Any] | None = None  # async; a served API


def _create_topics_not_active(request: Any, version: int, why: str) -> Any:
    """CreateTopics has per-topic errors only."""
    mod = wire.response_module(ApiKey.CREATE_TOPICS, version)
    topics = tuple(wire.make(mod.CreatableTopicResult, name=t.name, topic_id=None,
                             error_code=ErrorCode.not_controller, error_message=why,
                             num_partitions=-1, replication_factor=-1, configs=None)
                   for t in request.topics)
    return wire.make(wire.response_class(ApiKey.CREATE_TOPICS, version), throttle_time=ZERO, topics=topics)


def _configs_not_active(key: int) -> Callable[[Any, int, str], Any]:
    """AlterConfigs / IncrementalAlterConfigs: per-resource errors only."""
    return lambda request, version, why: configs.not_controller_response(key, request, why)


def _raft(key: int, call: Callable[[Any, Any, int], Any]) -> Callable[[ControllerHost, Any, int], Any]:
    """A Raft RPC answered by the node; a request that does not name the metadata
    partition is answered INVALID_REQUEST."""
    async def serve(host: ControllerHost, request: Any, version: int) -> Any:
        try:
            return call(host.raft, request, version)
        except rw.RaftWireError as exc:
            return wire.error_response(key, version, ErrorCode.invalid_request, str(exc))
    return serve


S = ControllerState
REQUESTS: dict[ApiKey, Handler] = {
    # the broker lifecycle
    ApiKey.BROKER_REGISTRATION: Handler((2, 4), S.handle_broker_registration, "broker_registration",  # v2+: LogDirs
                                        inline=True, atomic=True),
    # v1+ carries OfflineLogDirs, v2 CordonedLogDirs (KIP-1066); inline unless dirs went offline
    ApiKey.BROKER_HEARTBEAT: Handler((1, 2), S.handle_broker_heartbeat, "heartbeat", inline=True),
    ApiKey.UNREGISTER_BROKER: Handler((0, 0), S.handle_unregister_broker, "unregister_broker"),
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: Handler((0, 0), S.handle_assign_replicas_to_dirs, "assign_replicas_to_dirs"),
    ApiKey.ALTER_PARTITION: Handler((2, 3), S.handle_alter_partition, "alter_partition"),  # topic ids
    # forwarded by brokers
    ApiKey.CREATE_TOPICS: Handler((2, 7), S.handle_create_topics, "create_topics", atomic=True,
                                  not_active=_create_topics_not_active),
    ApiKey.DELETE_TOPICS: Handler((0, 6), S.handle_delete_topics, "delete_topics"),  # v0: legacy_schemas
    ApiKey.CREATE_PARTITIONS: Handler((0, 3), S.handle_create_partitions, "create_partitions", atomic=True),
    ApiKey.ALTER_CONFIGS: Handler((0, 2), S.handle_alter_configs, "alter_configs",
                                  not_active=_configs_not_active(ApiKey.ALTER_CONFIGS)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Handler((0, 1), S.handle_incremental_alter_configs,
                                              "incremental_alter_configs",
                                              not_active=_configs_not_active(ApiKey.INCREMENTAL_ALTER_CONFIGS)),
    # the operator's calls (controller_impl.state.operator_ops)
    ApiKey.ELECT_LEADERS: Handler((0, 2), S.handle_elect_leaders, "elect_leaders"),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Handler((0, 1), S.handle_alter_partition_reassignments,
                                                  "alter_partition_reassignments"),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Handler((0, 0), S.handle_list_partition_reassignments,
                                                 "list_partition_reassignments"),
    # served on every controller: the metadata log's Fetch (voters and brokers) and Raft's RPCs
    ApiKey.FETCH: Handler((4, 17), serve=serve_fetch),
    ApiKey.VOTE: Handler(rw.RAFT_VERSIONS[rw.VOTE],
                         serve=_raft(rw.VOTE, lambda raft, req, v: raft.handle_vote(req, v))),
    ApiKey.BEGIN_QUORUM_EPOCH: Handler(rw.RAFT_VERSIONS[rw.BEGIN],
                                       serve=_raft(rw.BEGIN, lambda raft, req, v: raft.handle_begin(req, v))),
    ApiKey.END_QUORUM_EPOCH: Handler(rw.RAFT_VERSIONS[rw.END],
                                     serve=_raft(rw.END, lambda raft, req, v: raft.handle_end(req, v))),
    ApiKey.FETCH_SNAPSHOT: Handler(rw.RAFT_VERSIONS[rw.FETCH_SNAPSHOT],
                                   serve=_raft(rw.FETCH_SNAPSHOT, lambda raft, req, v: raft.handle_fetch_snapshot(req))),
    ApiKey.DESCRIBE_QUORUM: Handler(rw.RAFT_VERSIONS[rw.DESCRIBE],
                                    serve=_raft(rw.DESCRIBE, lambda raft, req, v: raft.describe(v))),
}
# the active controller's own work on timers, through the same write path
TICK = Handler((0, 0), S.tick, "session_timeout")  # session expiry fencing
UNCLEAN_ELECTIONS = Handler((0, 0), S.handle_unclean_elections, "unclean_election")
LEADER_BALANCE = Handler((0, 0), S.handle_leader_balance, "leader_rebalance")


def supported_apis(table: dict[ApiKey, Handler] = REQUESTS) -> dict[int, tuple[int, int]]:
    """What the listener advertises: api key -> (min, max) version of every row."""
    return {key: h.versions for key, h in table.items()}
