"""ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46).

Forwarded unchanged to the active controller over the controller channel, as CreateTopics
is (the controller decides: :mod:`controller_impl.state.elections` and
:mod:`controller_impl.state.reassignment`); no answer from the controller within
:data:`FORWARD_TIMEOUT_S` → REQUEST_TIMED_OUT with the reason (per partition for
ElectLeaders naming partitions, at the top level otherwise). The brokers act on the
committed result through their metadata long-poll: a new leader starts leading, a new
replica is created (on an online, not cordoned dir) and fetches, a removed one stops and
its log is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, response_type

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

log = logging.getLogger(__name__)
(ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS) = (
    ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS)
FORWARD_TIMEOUT_S = 30.0
_NAMES = {ELECT_LEADERS: "ElectLeaders", ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
          LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments"}


async def _forward(api: ApiContext, req: Any) -> tuple[Any, str]:
    key = int(req.__api_key__)
    try:
        return await asyncio.wait_for(api.view.controller.forward(req), FORWARD_TIMEOUT_S), ""
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
        reason = f"controller unreachable: {type(exc).__name__}: {exc}"
        log.warning("%s: %s", _NAMES[key], reason)
        return None, reason


async def handle_elect_leaders(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp, reason = await _forward(api, req)
    if resp is not None:
        return resp
    version = req.__version__
    part_cls = response_type(ELECT_LEADERS, version, "PartitionResult")
    topic_cls = response_type(ELECT_LEADERS, version, "ReplicaElectionResult")
    resp_cls = response_type(ELECT_LEADERS, version, "ElectLeadersResponse")
    results = tuple(
        build(topic_cls, topic=t.topic, partition_result=tuple(
            build(part_cls, partition_id=p, error_code=ErrorCode.request_timed_out, error_message=reason)
            for p in t.partitions))
        for t in (req.topic_partitions or ()))
    return build(resp_cls, throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.request_timed_out if req.topic_partitions is None else ErrorCode.none,
                 replica_election_results=results)


async def handle_alter_partition_reassignments(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp, reason = await _forward(api, req)
    if resp is not None:
        return resp
    resp_cls = response_type(ALTER_PARTITION_REASSIGNMENTS, req.__version__, "AlterPartitionReassignmentsResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.request_timed_out,
                 error_message=reason, responses=())


async def handle_list_partition_reassignments(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp, reason = await _forward(api, req)
    if resp is not None:
        return resp
    resp_cls = response_type(LIST_PARTITION_REASSIGNMENTS, req.__version__, "ListPartitionReassignmentsResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.request_timed_out,
                 error_message=reason, topics=())
