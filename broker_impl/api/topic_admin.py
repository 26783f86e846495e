"""DeleteTopics (20) and CreatePartitions (37) on the broker: forwarded unchanged to the
active controller on the data channel (as CreateTopics is), which validates them and writes
the records (:mod:`controller_impl.state.topic_admin`). No answer from the controller →
REQUEST_TIMED_OUT on every topic, with the reason.

The deletion itself reaches this broker's storage through the metadata it replays: a
``RemoveTopicRecord`` makes the replica manager delete the topic's logs (``DeleteLog``:
renamed ``<topic>-<p>.<uuid>-delete``, then removed on the dir's storage worker); a replica in
an offline dir is deleted at the next start-up as a stray.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, response_type
from kafka_common.ids import ZERO_UUID

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

log = logging.getLogger(__name__)
DELETE_TOPICS, CREATE_PARTITIONS = ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS
FORWARD_TIMEOUT_S = 30.0


async def _forward(api: ApiContext, req: Any, what: str) -> tuple[Any, str]:
    try:
        return await asyncio.wait_for(api.view.controller.forward(req), FORWARD_TIMEOUT_S), ""
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
        reason = f"controller unreachable: {type(exc).__name__}: {exc}"
        log.warning("%s: %s", what, reason)
        return None, reason


async def handle_delete_topics(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp, reason = await _forward(api, req, "DeleteTopics")
    if resp is not None:
        return resp
    version = req.__version__
    result_cls = response_type(DELETE_TOPICS, version, "DeletableTopicResult")
    wanted = [(t.name, t.topic_id or ZERO_UUID) for t in req.topics] if version >= 6 else \
        [(n, ZERO_UUID) for n in req.topic_names]
    return build(response_type(DELETE_TOPICS, version, "DeleteTopicsResponse"), throttle_time=NO_THROTTLE,
                 responses=tuple(build(result_cls, name=n, topic_id=tid, error_code=ErrorCode.request_timed_out,
                                       error_message=reason) for n, tid in wanted))


async def handle_create_partitions(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp, reason = await _forward(api, req, "CreatePartitions")
    if resp is not None:
        return resp
    version = req.__version__
    result_cls = response_type(CREATE_PARTITIONS, version, "CreatePartitionsTopicResult")
    return build(response_type(CREATE_PARTITIONS, version, "CreatePartitionsResponse"), throttle_time=NO_THROTTLE,
                 results=tuple(build(result_cls, name=t.name, error_code=ErrorCode.request_timed_out,
                                     error_message=reason) for t in req.topics))
