"""Fetch's per-partition work: what a request asks for (:class:`FetchTarget`), the checks that
need no I/O (leadership, epochs, offset range, follower divergence — on the loop), and the
reads: from the log's in-memory tail when the data is there, else one job per log dir on
that dir's worker (``BrokerView.replica_io``), within the response's byte budget. Used by
:func:`broker_impl.api.fetch.handle_fetch`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_impl.api.entities import replica_error
from broker_impl.state.fetch_position import Position, follower_position

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext


@dataclass(slots=True)
class FetchTarget:
    topic_key: Any                 # name (v<13) or topic id (v13+) as sent
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class PartitionRead:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging: tuple[int, int] | None = None   # (epoch, end offset) the follower must truncate to


def replica_id_of(req: Any) -> int:
    if req.__version__ >= 15:
        return req.replica_state.replica_id
    return req.replica_id


def fetch_targets(api: ApiContext, req: Any) -> list[FetchTarget]:
    by_id = req.__version__ >= 13
    out = []
    for topic in req.topics:
        if by_id:
            key = topic.topic_id
            topic_id = key if key is not None and key in api.view.image.topics else None
        else:
            key = topic.topic
            topic_id = api.view.image.topic_ids.get(key)
        for p in topic.partitions:
            out.append(FetchTarget(key, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                               getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1)))
    return out


@dataclass(slots=True)
class ReadPlan:
    """A read that needs the replica's dir (decided on the loop, done on its worker)."""
    index: int
    replica: Any
    target: FetchTarget
    upper: int
    high_watermark: int
    log_start_offset: int


def _read_group(plans: list[ReadPlan], budget: int, first: bool) -> list[Any]:
    """The blocking reads of one dir's partitions, in request order, on that dir's worker:
    each one's bytes or the exception it raised. The first partition with data gets at
    least one whole batch; after it, the response budget holds."""
    out: list[Any] = []
    for plan in plans:
        t = plan.target
        if budget <= 0 and not first:
            out.append(None)   # skipped: the budget is spent
            continue
        try:
            data = plan.replica.read(t.fetch_offset, max(1, min(t.max_bytes, budget)), plan.upper, first)
        except Exception as exc:
            out.append(exc)
            continue
        if data:
            first = False
            budget -= len(data)
        out.append(data)
    return out


def _check_one(api: ApiContext, i: int, t: FetchTarget, follower: bool, by_id: bool) -> "PartitionRead | ReadPlan":
    """Everything about one partition that needs no I/O (on the loop): its answer, or the
    read to do."""
    view = api.view
    if t.topic_id is None:
        return PartitionRead(ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition)
    registration = view.image.partition(t.topic_id, t.partition)
    if registration is None:
        return PartitionRead(ErrorCode.unknown_topic_or_partition)
    if view.is_partition_offline(t.topic_id, t.partition):
        return PartitionRead(ErrorCode.kafka_storage_error)
    replica = view.local_replica(t.topic_id, t.partition) if registration.leader == view.node_id else None
    if replica is None:
        return PartitionRead(ErrorCode.not_leader_or_follower)
    if t.current_leader_epoch >= 0 and t.current_leader_epoch != registration.leader_epoch:
        return PartitionRead(ErrorCode.fenced_leader_epoch if t.current_leader_epoch < registration.leader_epoch
                     else ErrorCode.unknown_leader_epoch)
    try:
        # offsets and the epoch lookup take no lock and do no I/O (see view.py)
        leo = replica.log_end_offset
        start = replica.log_start_offset
        hw = replica.high_watermark
        if follower:
            pos = follower_position(replica, t.fetch_offset, t.last_fetched_epoch)
            if pos.position is Position.DIVERGING:
                return PartitionRead(ErrorCode.none, hw, start, b"", pos.diverging)
            if not pos.valid:
                return PartitionRead(ErrorCode.offset_out_of_range, hw, start)
        elif t.fetch_offset < start or t.fetch_offset > leo:
            return PartitionRead(ErrorCode.offset_out_of_range, hw, start)
        upper = leo if follower else hw
        if t.fetch_offset < upper:
            return ReadPlan(i, replica, t, upper, hw, start)
        return PartitionRead(ErrorCode.none, hw, start, b"")
    except Exception as exc:
        mapped = replica_error(view, t.topic_id, t.partition, "read", exc)
        if mapped is None:
            raise
        return PartitionRead(mapped[0])


async def read_some(api: ApiContext, targets: list[FetchTarget], indexes: list[int], reads: "list[PartitionRead | None]",
                     follower: bool, max_bytes: int, by_id: bool, strangers: set[int],
                     skipped: "set[int] | None" = None) -> None:
    """(Re-)read ``indexes`` into ``reads``: the checks on the loop, then the reads that
    have data to get, one job per log dir (dirs in the order they first appear), within
    the response budget the other partitions' answers left."""
    view = api.view
    chosen = set(indexes)
    others = [r for j, r in enumerate(reads) if r is not None and j not in chosen]
    budget = max_bytes - sum(len(r.records) for r in others)
    have_data = any(r.records for r in others)
    groups: dict[Any, list[ReadPlan]] = {}
    for i in indexes:
        if i in strangers:
            reads[i] = PartitionRead(ErrorCode.not_leader_or_follower)
            continue
        got = _check_one(api, i, targets[i], follower, by_id)
        if isinstance(got, PartitionRead):
            reads[i] = got
            continue
        t = got.target
        if budget > 0 or not have_data:
            # the newest batches are kept in memory: no trip to the dir's worker
            data = got.replica.read_tail(t.fetch_offset, max(1, min(t.max_bytes, budget)), got.upper, not have_data)
            if data is not None:
                reads[i] = PartitionRead(ErrorCode.none, got.high_watermark, got.log_start_offset, data)
                if data:
                    have_data = True
                    budget -= len(data)
                continue
        groups.setdefault(got.replica.log_dir, []).append(got)
    for plans in groups.values():
        if budget <= 0 and have_data:
            for plan in plans:
                reads[plan.index] = PartitionRead(ErrorCode.none, plan.high_watermark, plan.log_start_offset)
                if skipped is not None:
                    skipped.add(plan.index)
            continue
        results = await view.replica_io(plans[0].replica, _read_group, plans, budget, not have_data)
        for plan, res in zip(plans, results):
            t = plan.target
            if isinstance(res, Exception):
                mapped = replica_error(view, t.topic_id, t.partition, "read", res)
                if mapped is None:
                    raise res
                reads[plan.index] = PartitionRead(mapped[0])
                continue
            if res is None:
                if skipped is not None:
                    skipped.add(plan.index)
                res = b""
            reads[plan.index] = PartitionRead(ErrorCode.none, plan.high_watermark, plan.log_start_offset, res)
            if res:
                have_data = True
                budget -= len(res)

