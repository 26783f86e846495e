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
broker); a partition with nothing to read (fetch offset at the HW/LEO) is answered from
its offsets without a disk trip. The long poll waits, without I/O, until a target's
leadership, offline state or offsets change (:func:`_signature`), then reads again.
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


def _read_replica(replica: Any, t: _Target, upper: int, budget: int, first: bool) -> bytes:
    """The blocking part of one partition's read (on the replica's dir worker)."""
    return replica.read(t.fetch_offset, max(1, min(t.max_bytes, budget)), upper, first)


async def _read_one(api: BrokerApi, t: _Target, follower: bool, budget: int, first: bool, by_id: bool) -> _Read:
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
        data = b""
        if t.fetch_offset < upper and (budget > 0 or first):
            data = await replica_io(view, replica, _read_replica, replica, t, upper, budget, first)
        return _Read(ErrorCode.none, hw, start, data)
    except Exception as exc:
        mapped = replica_error(view, t.topic_id, t.partition, "read", exc)
        if mapped is None:
            raise
        return _Read(mapped[0])


async def _read_all(api: BrokerApi, targets: list[_Target], follower: bool, max_bytes: int, by_id: bool,
                    strangers: set[int] = frozenset()) -> list[_Read]:  # type: ignore[assignment]
    budget = max_bytes
    reads = []
    any_data = False
    for i, t in enumerate(targets):
        if i in strangers:
            reads.append(_Read(ErrorCode.not_leader_or_follower))
            continue
        r = await _read_one(api, t, follower, budget, not any_data, by_id)
        if r.records:
            any_data = True
            budget -= len(r.records)
        reads.append(r)
    return reads


def _signature(api: BrokerApi, targets: list[_Target]) -> tuple:
    """What a long-polling fetch waits to change (read without I/O): leadership, offline
    state and the offsets of each target's replica."""
    view = api.view
    out = []
    for t in targets:
        reg = view.image.partition(t.topic_id, t.partition) if t.topic_id is not None else None
        if reg is None:
            out.append(None)
            continue
        offline = view.is_partition_offline(t.topic_id, t.partition)
        replica = view.local_replica(t.topic_id, t.partition) if reg.leader == view.node_id and not offline else None
        out.append((reg.leader, reg.leader_epoch, offline, id(replica),
                    None if replica is None else (replica.log_start_offset, replica.log_end_offset,
                                                  replica.high_watermark)))
    return tuple(out)


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
    keys = [(t.topic_id, t.partition) for t in targets if t.topic_id is not None]
    while True:
        before = _signature(api, targets)
        reads = await _read_all(api, targets, follower, max_bytes, by_id, strangers)
        if (sum(len(r.records) for r in reads) >= max(req.min_bytes, 1)
                or any(r.error is not ErrorCode.none for r in reads) or not targets or wait_ms <= 0):
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if not await api.purgatory.wait_until(keys, lambda: _signature(api, targets) != before, remaining):
            break
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
