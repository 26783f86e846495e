"""The committed-offset group APIs: OffsetCommit 0–9, OffsetFetch 0–9 (v8+ several groups per
request; both v0 answered UNSUPPORTED_VERSION per partition as Kafka 3.9 in KRaft does, see
:mod:`broker_impl.api.legacy_versions`) and OffsetDelete 0, kio requests → the coordinator → kio responses. Rows of
:data:`broker_impl.api.request_table.REQUESTS`; each request is first checked against
:meth:`GroupCoordinator.status` like every group request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_common.wire import ApiKey
from broker_impl.api import legacy_versions
from broker_impl.api.entities import NO_THROTTLE, build, error, response_type
from broker_impl.groups.state import codes as E
from broker_impl.groups.state import records as R
from broker_impl.groups.state.model import OffsetEntry

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.OFFSET_DELETE


# ---------------------------------------------------------------------- OffsetCommit
async def handle_offset_commit(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    if version == 0:
        return legacy_versions.offset_commit_v0(req)
    coord = api.groups
    part_cls = response_type(OFFSET_COMMIT, version, "OffsetCommitResponsePartition")
    topic_cls = response_type(OFFSET_COMMIT, version, "OffsetCommitResponseTopic")
    resp_cls = response_type(OFFSET_COMMIT, version, "OffsetCommitResponse")
    group_id = req.group_id
    code = coord.status(group_id)
    if code == E.NONE:
        code = coord.groups.validate_commit(group_id, member_id=req.member_id,
                                            instance_id=getattr(req, "group_instance_id", None),
                                            generation=req.generation_id_or_member_epoch, now_ms=coord.now_ms())
    results: dict[tuple[str, int], int] = {}
    entries: list[tuple[str, int, OffsetEntry]] = []
    image = api.view.image
    max_meta = coord.config.groups.offset_metadata_max_bytes
    now_wall = coord.wall_ms()
    for t in req.topics:
        tid = image.topic_ids.get(t.name)
        for p in t.partitions:
            key = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if code != E.NONE:
                results[key] = code
            elif tid is None or image.partition(tid, p.partition_index) is None:
                results[key] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > max_meta:
                results[key] = E.OFFSET_METADATA_TOO_LARGE
            else:
                commit_ms = getattr(p, "commit_timestamp", -1)  # v1 only; -1 = now
                entries.append((t.name, p.partition_index, OffsetEntry(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1), metadata,
                    now_wall if commit_ms == -1 else commit_ms)))
    if entries:
        recs = [(R.encode_key(R.OffsetKey(group_id, topic, partition)), R.encode_offset(entry))
                for topic, partition, entry in entries]
        written = await coord.write(group_id, recs)
        if written == E.NONE:
            coord.groups.commit(group_id, entries)
        for topic, partition, _entry in entries:
            results[(topic, partition)] = written
    return build(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(part_cls, partition_index=p.partition_index, error_code=error(results[(t.name, p.partition_index)]))
            for p in t.partitions))
        for t in req.topics))


# ---------------------------------------------------------------------- OffsetFetch
def _fetch_group(api: ApiContext, version: int, group_id: str, topics: Any) -> tuple[int, list[tuple[str, list[Any]]]]:
    """(group error, [(topic, [(partition, offset, epoch, metadata, error)])])."""
    coord = api.groups
    code = coord.status(group_id)
    if code != E.NONE:
        if topics is None:
            return code, []
        return code, [(t.name, [(p, -1, -1, "", code) for p in t.partition_indexes]) for t in topics]
    g = coord.groups.get(group_id)
    offsets = g.offsets if g is not None else {}
    if topics is None:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), entry in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, entry.offset, entry.leader_epoch, entry.metadata, E.NONE))
        return E.NONE, list(by_topic.items())
    out = []
    for t in topics:
        parts = []
        for p in t.partition_indexes:
            entry = offsets.get((t.name, p))
            parts.append((p, entry.offset, entry.leader_epoch, entry.metadata, E.NONE) if entry is not None
                         else (p, -1, -1, "", E.NONE))
        out.append((t.name, parts))
    return E.NONE, out


async def handle_offset_fetch(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    if version == 0:
        return legacy_versions.offset_fetch_v0(req)
    resp_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponse")
    if version >= 8:
        group_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponseGroup")
        topic_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponseTopics")
        part_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponsePartitions")
        groups = []
        for g in req.groups:
            code, topics = _fetch_group(api, version, g.group_id, g.topics)
            groups.append(build(group_cls, group_id=g.group_id, error_code=error(code), topics=tuple(
                build(topic_cls, name=name, partitions=tuple(
                    build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                          error_code=error(c)) for p, o, e, m, c in parts))
                for name, parts in topics)))
        return build(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponseTopic")
    part_cls = response_type(OFFSET_FETCH, version, "OffsetFetchResponsePartition")
    code, topics = _fetch_group(api, version, req.group_id, req.topics)
    if version < 2 and req.topics is None:
        code, topics = E.INVALID_REQUEST, []
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code), topics=tuple(
        build(topic_cls, name=name, partitions=tuple(
            build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                  error_code=error(c)) for p, o, e, m, c in parts))
        for name, parts in topics))



async def handle_offset_delete(api: ApiContext, ctx: Any, req: Any) -> Any:
    resp_cls = response_type(OFFSET_DELETE, 0, "OffsetDeleteResponse")
    topic_cls = response_type(OFFSET_DELETE, 0, "OffsetDeleteResponseTopic")
    part_cls = response_type(OFFSET_DELETE, 0, "OffsetDeleteResponsePartition")
    coord = api.groups
    gid = req.group_id
    code = coord.status(gid)
    per_topic: dict[str, int] = {}
    if code == E.NONE:
        code, per_topic = coord.groups.offset_delete_errors(gid, [t.name for t in req.topics])
    results: dict[tuple[str, int], int] = {}
    if code == E.NONE:
        image = api.view.image
        deletable = []
        for t in req.topics:
            tid = image.topic_ids.get(t.name)
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if tid is None or image.partition(tid, p.partition_index) is None:
                    results[key] = E.UNKNOWN_TOPIC_OR_PARTITION
                elif per_topic.get(t.name, E.NONE) != E.NONE:
                    results[key] = per_topic[t.name]
                else:
                    results[key] = E.NONE
                    deletable.append(key)
        g = coord.groups.get(gid)
        present = [k for k in deletable if g is not None and k in g.offsets]
        if present:
            written = await coord.write(gid, [(R.encode_key(R.OffsetKey(gid, t, p)), None) for t, p in present])
            if written == E.NONE:
                coord.groups.delete_offsets(gid, present)
            else:
                code = written
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=error(code), topics=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(part_cls, partition_index=p.partition_index,
                  error_code=error(results.get((t.name, p.partition_index), E.NONE) if code == E.NONE else E.NONE))
            for p in t.partitions))
        for t in req.topics) if code == E.NONE else ())

