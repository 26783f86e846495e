"""The classic group APIs on the broker listener: kio requests → the coordinator → kio responses.

Versions (Kafka 4.0's ranges for the classic protocol, all in kio 0.6.5):
FindCoordinator 0–6 (v4+ batched ``coordinator_keys``), JoinGroup 0–9, SyncGroup 0–5,
Heartbeat 0–4, LeaveGroup 0–5, OffsetCommit 0–9, OffsetFetch 0–9 (v8+ several groups per
request), ListGroups 0–5, DescribeGroups 0–6, DeleteGroups 0–2, OffsetDelete 0: their rows in
:data:`broker_impl.api.request_table.REQUESTS`. (OffsetCommit/OffsetFetch v10 address topics
by id, KIP-848's consumer protocol: not served.)

Every group request is first checked against :meth:`GroupCoordinator.status`: a group
this broker does not coordinate → NOT_COORDINATOR, one whose partition is loading →
COORDINATOR_LOAD_IN_PROGRESS (clients find the coordinator again / retry). The offset APIs
(OffsetCommit, OffsetFetch, OffsetDelete) are in :mod:`.offset_handlers`. FindCoordinator
for transactions (key type 1) and share groups (2) → COORDINATOR_NOT_AVAILABLE: there is
no transaction or share coordinator.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, error, ms, response_type
from broker_impl.api.metadata import listener_of
from broker_impl.groups.state import codes as E
from broker_impl.groups.state import records as R
from broker_impl.groups.state.model import GroupState, JoinResult, SyncResult

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT
(LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS) = (
    ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS)


def _peer_host(ctx: Any) -> str:
    peer = getattr(ctx, "peer", "") or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


# ---------------------------------------------------------------------- FindCoordinator
async def handle_find_coordinator(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    resp_cls = response_type(FIND_COORDINATOR, version, "FindCoordinatorResponse")
    key_type = int(getattr(req, "key_type", 0))
    listener = listener_of(api, ctx)

    def one(key: str) -> tuple[int, int, str, int, str | None]:
        if key_type != 0:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1, "this cluster has no transaction or share coordinator"
        if not key:
            return E.INVALID_REQUEST, -1, "", -1, "empty group id"
        return api.groups.find(key, listener)

    if version < 4:
        code, node, host, port, message = one(req.key)
        return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code), error_message=message,
                     node_id=node, host=host, port=port)
    coord_cls = response_type(FIND_COORDINATOR, version, "Coordinator")
    out = []
    for key in req.coordinator_keys:
        code, node, host, port, message = one(key)
        out.append(build(coord_cls, key=key, node_id=node, host=host, port=port, error_code=error(code),
                         error_message=message))
    return build(resp_cls, throttle_time=NO_THROTTLE, coordinators=tuple(out))


# ---------------------------------------------------------------------- JoinGroup / SyncGroup
def _join_response(version: int, r: JoinResult) -> Any:
    member_cls = response_type(JOIN_GROUP, version, "JoinGroupResponseMember")
    resp_cls = response_type(JOIN_GROUP, version, "JoinGroupResponse")
    protocol_name = r.protocol_name if r.protocol_name is not None or version >= 7 else ""
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(r.error), generation_id=r.generation,
                 protocol_type=r.protocol_type, protocol_name=protocol_name, leader=r.leader,
                 skip_assignment=r.skip_assignment, member_id=r.member_id,
                 members=tuple(build(member_cls, member_id=m, group_instance_id=i, metadata=meta)
                               for m, i, meta in r.members))


async def handle_join_group(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    status = api.groups.status(req.group_id)
    if status != E.NONE:
        return _join_response(version, JoinResult(status, member_id=req.member_id))
    coord = api.groups
    session_ms = ms(req.session_timeout)
    rebalance_ms = ms(getattr(req, "rebalance_timeout", None), session_ms) if version >= 1 else session_ms
    token, fut = coord.new_waiter()
    immediate, effects = coord.groups.join(
        req.group_id, member_id=req.member_id, instance_id=getattr(req, "group_instance_id", None),
        protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        client_id=getattr(ctx, "client_id", None) or "", client_host=_peer_host(ctx),
        require_known_member_id=version >= 4, token=token, now_ms=coord.now_ms())
    coord.execute(effects)
    if immediate is not None:
        coord.drop_waiter(token)
        return _join_response(version, immediate)
    result = await fut
    return _join_response(version, result)


def _sync_response(version: int, r: SyncResult) -> Any:
    resp_cls = response_type(SYNC_GROUP, version, "SyncGroupResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(r.error), protocol_type=r.protocol_type,
                 protocol_name=r.protocol_name, assignment=r.assignment)


async def handle_sync_group(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    status = api.groups.status(req.group_id)
    if status != E.NONE:
        return _sync_response(version, SyncResult(status))
    coord = api.groups
    token, fut = coord.new_waiter()
    immediate, effects = coord.groups.sync(
        req.group_id, member_id=req.member_id, instance_id=getattr(req, "group_instance_id", None),
        generation=req.generation_id, protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments=[(a.member_id, bytes(a.assignment)) for a in req.assignments], token=token,
        now_ms=coord.now_ms())
    coord.execute(effects)
    if immediate is not None:
        coord.drop_waiter(token)
        return _sync_response(version, immediate)
    return _sync_response(version, await fut)


# ---------------------------------------------------------------------- Heartbeat / LeaveGroup
async def handle_heartbeat(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp_cls = response_type(HEARTBEAT, req.__version__, "HeartbeatResponse")
    code = api.groups.status(req.group_id)
    if code == E.NONE:
        code = api.groups.groups.heartbeat(req.group_id, member_id=req.member_id,
                                           instance_id=getattr(req, "group_instance_id", None),
                                           generation=req.generation_id, now_ms=api.groups.now_ms())
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code))


async def handle_leave_group(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    resp_cls = response_type(LEAVE_GROUP, version, "LeaveGroupResponse")
    if version < 3:
        members = [(req.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    code = api.groups.status(req.group_id)
    per_member = [code] * len(members)
    if code == E.NONE:
        code, per_member, effects = api.groups.groups.leave(req.group_id, members, api.groups.now_ms())
        api.groups.execute(effects)
    if version < 3:
        return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code if code else per_member[0]))
    member_cls = response_type(LEAVE_GROUP, version, "MemberResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code), members=tuple(
        build(member_cls, member_id=m, group_instance_id=i, error_code=error(c))
        for (m, i), c in zip(members, per_member)))


# ---------------------------------------------------------------------- List / Describe / Delete
async def handle_list_groups(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    resp_cls = response_type(LIST_GROUPS, version, "ListGroupsResponse")
    group_cls = response_type(LIST_GROUPS, version, "ListedGroup")
    coord = api.groups
    coord.status("-")  # starts the coordinator if this is its first request
    states = {s.lower() for s in (getattr(req, "states_filter", None) or ())}
    types = {t.lower() for t in (getattr(req, "types_filter", None) or ())}
    if types and "classic" not in types:
        groups = []
    else:
        groups = [g for g in coord.coordinated_groups() if not states or g.state.value.lower() in states]
    code = E.COORDINATOR_LOAD_IN_PROGRESS if coord.loading() and version < 4 else E.NONE
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code), groups=tuple(
        build(group_cls, group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
              group_type="classic")
        for g in groups))


async def handle_describe_groups(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    resp_cls = response_type(DESCRIBE_GROUPS, version, "DescribeGroupsResponse")
    group_cls = response_type(DESCRIBE_GROUPS, version, "DescribedGroup")
    member_cls = response_type(DESCRIBE_GROUPS, version, "DescribedGroupMember")
    coord = api.groups
    out = []
    for gid in req.groups:
        code = coord.status(gid)
        g = coord.groups.get(gid) if code == E.NONE else None
        if g is None:
            if code == E.NONE and version >= 6:
                code = E.GROUP_ID_NOT_FOUND
            out.append(build(group_cls, error_code=error(code), error_message=None, group_id=gid,
                             group_state=GroupState.DEAD.value, protocol_type="", protocol_data="", members=(),
                             authorized_operations=-2147483648))
            continue
        stable = g.state is GroupState.STABLE
        members = tuple(
            build(member_cls, member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata(g.protocol) if stable else b"",
                  member_assignment=m.assignment if stable else b"")
            for m in g.members.values())
        out.append(build(group_cls, error_code=error(E.NONE), error_message=None, group_id=gid,
                         group_state=g.state.value, protocol_type=g.protocol_type or "",
                         protocol_data=(g.protocol or "") if stable else "", members=members,
                         authorized_operations=-2147483648))
    return build(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(out))


async def handle_delete_groups(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    resp_cls = response_type(DELETE_GROUPS, version, "DeleteGroupsResponse")
    result_cls = response_type(DELETE_GROUPS, version, "DeletableGroupResult")
    coord = api.groups

    async def one(gid: str) -> int:
        code = coord.status(gid)
        if code != E.NONE:
            return code
        code = coord.groups.delete_group(gid, coord.now_ms())
        if code != E.NONE:
            return code
        g = coord.groups.groups[gid]
        recs = [(R.encode_key(R.OffsetKey(gid, t, p)), None) for (t, p) in g.offsets]
        recs.append((R.encode_key(R.GroupKey(gid)), None))
        written = await coord.write(gid, recs)
        if written == E.NONE:
            coord.groups.forget(gid)
        else:
            coord.groups.undelete(gid, coord.now_ms())
        return written

    codes = await asyncio.gather(*(one(gid) for gid in req.groups_names))
    return build(resp_cls, throttle_time=NO_THROTTLE, results=tuple(
        build(result_cls, group_id=gid, error_code=error(c)) for gid, c in zip(req.groups_names, codes)))
