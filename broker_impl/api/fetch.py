"""Fetch (API 1): whole batches from ``fetch_offset``, long-poll, consumers and followers.

- Topics by name (v4–v12) or by topic id (v13+, UNKNOWN_TOPIC_ID when unknown).
- Consumers (replica_id < 0) read up to the high watermark (also the last stable offset:
  there are no transactions); followers (replica_id ≥ 0, in ``replica_state`` from v15)
  read up to the log end offset, and each follower fetch is reported to the runtime
  (``BrokerView.on_follower_fetch``) *before* reading, so the high watermark in the answer
  already counts it. A replica fetch from a broker that is not a replica of the partition
  → NOT_LEADER_OR_FOLLOWER (and no progress is recorded).
- Only the leader answers (NOT_LEADER_OR_FOLLOWER); offline dir → KAFKA_STORAGE_ERROR;
  ``fetch_offset`` outside [log start, LEO] → OFFSET_OUT_OF_RANGE.
- At least one whole batch even beyond ``partition_max_bytes``/``max_bytes`` (the first
  partition with data); otherwise the limits hold.
- If fewer than ``min_bytes`` are ready, wait up to ``max_wait`` for an append / HW move.
- ``current_leader_epoch`` (v9+) older than the image's leader epoch → FENCED_LEADER_EPOCH,
  newer → UNKNOWN_LEADER_EPOCH (the client refreshes metadata).
- Followers (v12+) send ``last_fetched_epoch``: if the leader's log ends that epoch before
  ``fetch_offset`` (or does not know the epoch), the answer carries ``diverging_epoch``
  (epoch, end offset) and no records, so the follower truncates (KIP-320/595); an epoch
  older than all the leader knows → OFFSET_OUT_OF_RANGE. Uses the
  replica's ``end_offset_for_epoch`` when it has one.
- A replica fetch from a principal without CLUSTER_ACTION (authorizer enabled) →
  top-level CLUSTER_AUTHORIZATION_FAILED, as Kafka.
- No incremental fetch sessions: ``session_id`` is always 0 (full responses).

Reads run off the event loop (``BrokerView.replica_io``: the replica's log-dir worker in the
broker), one job per log dir for all that dir's partitions with data; a partition with
nothing to read (fetch offset at the HW/LEO) is answered from its offsets without a disk
trip. The long poll (fetch.min.bytes semantics) holds a purgatory ``Watch`` on its
partitions: it answers as soon as the accumulated bytes reach ``min_bytes``, or on
``max_wait``; each wake-up (append, HW move, leadership or offline change) re-checks and
re-reads only the partitions that changed, so a long poll over many idle partitions costs
nothing when another partition gets an append.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_impl.api.entities import NO_THROTTLE, build, ms, replica_error, replica_io, response_type

if TYPE_CHECKING:
    from broker_impl.api.handlers import BrokerApi

API_KEY = 1
MAX_WAIT_CAP_MS = 30_000


@dataclass(slots=True)
class _Target:
    topic_key: Any                 # name (v<13) or topic id (v13+) as sent
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class _Read:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging: tuple[int, int] | None = None   # (epoch, end offset) the follower must truncate to


def _replica_id(req: Any) -> int:
    if req.__version__ >= 15:
        return req.replica_state.replica_id
    return req.replica_id


def _targets(api: BrokerApi, req: Any) -> list[_Target]:
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
            out.append(_Target(key, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                               getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1)))
    return out


@dataclass(slots=True)
class _Plan:
    """A read that needs the replica's dir (decided on the loop, done on its worker)."""
    index: int
    replica: Any
    target: _Target
    upper: int
    high_watermark: int
    log_start_offset: int


def _read_group(plans: list[_Plan], budget: int, first: bool) -> list[Any]:
    """The blocking reads of one dir's partitions, in request order, on that dir's worker:
    each one's bytes or the exception it raised. The first partition with data gets at
    least one whole batch; after it, the response budget holds."""
    out: list[Any] = []
    for plan in plans:
        t = plan.target
        if budget <= 0 and not first:
            out.append(b"")
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


def _check_one(api: BrokerApi, i: int, t: _Target, follower: bool, by_id: bool) -> "_Read | _Plan":
    """Everything about one partition that needs no I/O (on the loop): its answer, or the
    read to do."""
    view = api.view
    if t.topic_id is None:
        return _Read(ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition)
    registration = view.image.partition(t.topic_id, t.partition)
    if registration is None:
        return _Read(ErrorCode.unknown_topic_or_partition)
    if view.is_partition_offline(t.topic_id, t.partition):
        return _Read(ErrorCode.kafka_storage_error)
    replica = view.local_replica(t.topic_id, t.partition) if registration.leader == view.node_id else None
    if replica is None:
        return _Read(ErrorCode.not_leader_or_follower)
    if t.current_leader_epoch >= 0 and t.current_leader_epoch != registration.leader_epoch:
        return _Read(ErrorCode.fenced_leader_epoch if t.current_leader_epoch < registration.leader_epoch
                     else ErrorCode.unknown_leader_epoch)
    try:
        # offsets and the epoch lookup take no lock and do no I/O (see view.py)
        leo = replica.log_end_offset
        start = replica.log_start_offset
        hw = replica.high_watermark
        epoch_lookup = getattr(replica, "end_offset_for_epoch", None)
        if follower and t.last_fetched_epoch >= 0 and epoch_lookup is not None:
            epoch, end = epoch_lookup(t.last_fetched_epoch)
            if epoch < 0 or end < 0:   # the leader has no epoch at or before it: start over
                return _Read(ErrorCode.offset_out_of_range, hw, start)
            if end < t.fetch_offset or epoch < t.last_fetched_epoch:
                return _Read(ErrorCode.none, hw, start, b"", (epoch, end))
        if t.fetch_offset < start or t.fetch_offset > leo:
            return _Read(ErrorCode.offset_out_of_range, hw, start)
        upper = leo if follower else hw
        if t.fetch_offset < upper:
            return _Plan(i, replica, t, upper, hw, start)
        return _Read(ErrorCode.none, hw, start, b"")
    except Exception as exc:
        mapped = replica_error(view, t.topic_id, t.partition, "read", exc)
        if mapped is None:
            raise
        return _Read(mapped[0])


async def _read_some(api: BrokerApi, targets: list[_Target], indexes: list[int], reads: "list[_Read | None]",
                     follower: bool, max_bytes: int, by_id: bool, strangers: set[int]) -> None:
    """(Re-)read ``indexes`` into ``reads``: the checks on the loop, then the reads that
    have data to get, one job per log dir (dirs in the order they first appear), within
    the response budget the other partitions' answers left."""
    view = api.view
    chosen = set(indexes)
    others = [r for j, r in enumerate(reads) if r is not None and j not in chosen]
    budget = max_bytes - sum(len(r.records) for r in others)
    have_data = any(r.records for r in others)
    groups: dict[Any, list[_Plan]] = {}
    for i in indexes:
        if i in strangers:
            reads[i] = _Read(ErrorCode.not_leader_or_follower)
            continue
        got = _check_one(api, i, targets[i], follower, by_id)
        if isinstance(got, _Read):
            reads[i] = got
        else:
            groups.setdefault(getattr(got.replica, "log_dir", id(got.replica)), []).append(got)
    for plans in groups.values():
        if budget <= 0 and have_data:
            for plan in plans:
                reads[plan.index] = _Read(ErrorCode.none, plan.high_watermark, plan.log_start_offset)
            continue
        results = await replica_io(view, plans[0].replica, _read_group, plans, budget, not have_data)
        for plan, res in zip(plans, results):
            t = plan.target
            if isinstance(res, Exception):
                mapped = replica_error(view, t.topic_id, t.partition, "read", res)
                if mapped is None:
                    raise res
                reads[plan.index] = _Read(mapped[0])
                continue
            reads[plan.index] = _Read(ErrorCode.none, plan.high_watermark, plan.log_start_offset, res)
            if res:
                have_data = True
                budget -= len(res)


async def handle_fetch(api: BrokerApi, ctx: Any, req: Any) -> Any:
    version = req.__version__
    by_id = version >= 13
    replica_id = _replica_id(req)
    follower = replica_id >= 0
    targets = _targets(api, req)
    max_bytes = getattr(req, "max_bytes", 2**31 - 1)
    if follower and not getattr(ctx, "cluster_action_allowed", True):
        # replica fetches need CLUSTER_ACTION (only brokers' principals) when authorizing
        return build(response_type(API_KEY, version, "FetchResponse"), throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed, session_id=0, responses=())
    strangers: set[int] = set()  # target indexes: the fetching broker is not a replica
    if follower:
        for i, t in enumerate(targets):
            reg = api.view.image.partition(t.topic_id, t.partition) if t.topic_id is not None else None
            if reg is None:
                continue
            if replica_id not in reg.replicas:
                strangers.add(i)
            elif reg.leader == api.view.node_id:
                api.view.on_follower_fetch(t.topic_id, t.partition, replica_id, t.fetch_offset)
                api.notify_partition(t.topic_id, t.partition)

    wait_ms = min(max(ms(req.max_wait), 0), MAX_WAIT_CAP_MS)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    keys = [(t.topic_id, t.partition) if t.topic_id is not None else None for t in targets]
    reads: list[_Read | None] = [None] * len(targets)
    min_bytes = max(req.min_bytes, 1)
    # watching from before the first read: an append while it reads is not missed
    with api.purgatory.watch(k for k in keys if k is not None) as watch:
        await _read_some(api, targets, list(range(len(targets))), reads, follower, max_bytes, by_id, strangers)
        while targets and wait_ms > 0:
            if (sum(len(r.records) for r in reads if r is not None) >= min_bytes
                    or any(r is not None and r.error is not ErrorCode.none for r in reads)):
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            changed = await watch.wait(remaining)
            if not changed:
                break   # max_wait passed
            # only the partitions that changed (append, HW, leadership, offline) are re-read
            await _read_some(api, targets, [i for i, k in enumerate(keys) if k in changed], reads, follower,
                             max_bytes, by_id, strangers)
    return _response(version, targets, reads)


def _response(version: int, targets: list[_Target], reads: list[_Read]) -> Any:
    part_cls = response_type(API_KEY, version, "PartitionData")
    topic_cls = response_type(API_KEY, version, "FetchableTopicResponse")
    resp_cls = response_type(API_KEY, version, "FetchResponse")
    grouped: dict[Any, list[Any]] = {}
    epoch_cls = response_type(API_KEY, version, "EpochEndOffset") if version >= 12 else None
    for t, r in zip(targets, reads):
        extra = {}
        if r.diverging is not None and epoch_cls is not None:
            extra["diverging_epoch"] = epoch_cls(epoch=r.diverging[0], end_offset=r.diverging[1])
        grouped.setdefault(t.topic_key, []).append(
            build(part_cls, partition_index=t.partition, error_code=r.error, high_watermark=r.high_watermark,
                  last_stable_offset=r.high_watermark, log_start_offset=r.log_start_offset,
                  aborted_transactions=None, preferred_read_replica=-1, records=r.records, **extra))
    topics = tuple(build(topic_cls, topic=key, topic_id=key, partitions=tuple(parts))
                   for key, parts in grouped.items())
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=topics)
