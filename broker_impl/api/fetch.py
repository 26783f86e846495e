"""Fetch (API 1): whole batches from ``fetch_offset``, long-poll, consumers and followers.

- Topics by name (v0–v12) or by topic id (v13+, UNKNOWN_TOPIC_ID when unknown).
- v0–3 (Kafka 3.9's floor): the records down-converted to message format v0 (v0–1) or v1
  (v2–3), :mod:`broker_impl.api.down_convert`; a codec that cannot be converted →
  UNSUPPORTED_COMPRESSION_TYPE. v0–5: KAFKA_STORAGE_ERROR answered as
  NOT_LEADER_OR_FOLLOWER (Kafka's rule: those clients would not retry a storage error).
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
  older than all the leader knows → OFFSET_OUT_OF_RANGE. The rule is
  :func:`broker_impl.state.fetch_position.follower_position`, shared with the leader's ISR
  bookkeeping (a divergent fetch is no progress).
- A replica fetch from a principal without CLUSTER_ACTION (authorizer enabled) →
  top-level CLUSTER_AUTHORIZATION_FAILED, as Kafka.
- Incremental fetch sessions (KIP-227) for replica fetches (v13+), see
  :mod:`broker_impl.api.fetch_session`; consumers get ``session_id`` 0 (full responses).

Reads run off the event loop (``BrokerView.replica_io``: the replica's log-dir worker in the
broker), one job per log dir for all that dir's partitions with data — unless the data
asked for is among the newest appended batches, which the log keeps in memory
(``PartitionLog.read_tail``, 64 KiB per partition: a follower at the tail needs no disk
trip); a partition with
nothing to read (fetch offset at the HW/LEO) is answered from its offsets without a disk
trip. The long poll (fetch.min.bytes semantics) holds a purgatory ``Watch`` on its
partitions: it answers as soon as the accumulated bytes reach ``min_bytes``, or on
``max_wait``; each wake-up (append, HW move, leadership or offline change) re-checks and
re-reads only the partitions that changed, so a long poll over many idle partitions costs
nothing when another partition gets an append. The per-partition checks and reads are in
:mod:`broker_impl.api.fetch_read`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_impl.api import down_convert, fetch_session
from broker_impl.api.entities import NO_THROTTLE, build, ms, response_type
from broker_impl.api.fetch_read import FetchTarget, PartitionRead, fetch_targets, read_some, replica_id_of
from kafka_common.wire import ApiKey

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

API_KEY = ApiKey.FETCH
MAX_WAIT_CAP_MS = 30_000


def _key(t: FetchTarget) -> tuple[Any, int]:
    return (t.topic_key, t.partition)


def _record_progress(api: ApiContext, replica_id: int, targets: list[FetchTarget], indexes: "range | list[int]",
                     strangers: set[int]) -> None:
    """A follower fetched these partitions at these offsets: ISR/HW bookkeeping (before
    reading, so the answer's HW counts it). A broker that is no replica of a partition
    gets NOT_LEADER_OR_FOLLOWER for it and records no progress."""
    view = api.view
    for i in indexes:
        t = targets[i]
        reg = view.image.partition(t.topic_id, t.partition) if t.topic_id is not None else None
        if reg is None:
            continue
        if replica_id not in reg.replicas:
            strangers.add(i)
        elif reg.leader == view.node_id:
            replica = view.local_replica(t.topic_id, t.partition)
            hw = replica.high_watermark if replica is not None else None
            view.on_follower_fetch(t.topic_id, t.partition, replica_id, t.fetch_offset, t.last_fetched_epoch)
            if replica is None or replica.high_watermark != hw:   # acks=all waiters, consumers
                api.notify_partition(t.topic_id, t.partition)


def _top_error(version: int, code: ErrorCode, session_id: int = 0) -> Any:
    return build(response_type(API_KEY, version, "FetchResponse"), throttle_time=NO_THROTTLE,
                 error_code=code, session_id=session_id, responses=())


async def handle_fetch(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    by_id = version >= 13
    replica_id = replica_id_of(req)
    follower = replica_id >= 0
    targets = fetch_targets(api, req)
    max_bytes = getattr(req, "max_bytes", 2**31 - 1)
    if follower and not getattr(ctx, "cluster_action_allowed", True):
        # replica fetches need CLUSTER_ACTION (only brokers' principals) when authorizing
        return _top_error(version, ErrorCode.cluster_authorization_failed)

    # fetch sessions (KIP-227, broker_impl.api.fetch_session): replica fetches only
    sessions = api.fetch_sessions
    session_id = getattr(req, "session_id", 0) or 0
    session_epoch = getattr(req, "session_epoch", -1)
    session = None
    incremental = False
    if sessions is not None and version >= 7:
        if session_id != 0:
            found = sessions.get(session_id)
            if session_epoch == -1:          # the fetcher closes its session: a full fetch
                if found is not None:
                    sessions.remove(session_id)
            elif found is None or found.replica_id != replica_id:
                return _top_error(version, ErrorCode.fetch_session_id_not_found)
            elif session_epoch != found.epoch:
                return _top_error(version, ErrorCode.invalid_fetch_session_epoch)
            else:
                session, incremental = found, True
        elif session_epoch == 0 and follower and by_id:
            session = sessions.create(replica_id, targets, _key)

    strangers: set[int] = set()  # target indexes: the fetching broker is not a replica
    if incremental:
        assert session is not None
        forgotten = [(ft.topic_id, p) for ft in getattr(req, "forgotten_topics_data", ()) for p in ft.partitions]
        fetch_session.apply_incremental(session, targets, forgotten, _key)
        session.epoch = fetch_session.next_epoch(session.epoch)
        session.last_used = time.monotonic()
        # look only at what may have changed: named in the request, notified since the last
        # answer, or left unfinished by its byte budget
        look = session.dirty | session.watch.drain()
        session.dirty = set()
        named = {_key(t) for t in targets}
        targets = targets + [session.parts[k].target for k in look if k in session.parts and k not in named]
        now_ms = time.monotonic() * 1000
        if follower:
            _record_progress(api, replica_id, targets, range(len(targets)), strangers)
            if now_ms - session.last_refresh_ms >= fetch_session.REFRESH_MS:
                # the follower's unchanged partitions: still fetched (ISR "caught up" time)
                session.last_refresh_ms = now_ms
                seen = {_key(t) for t in targets}
                rest = [cp.target for k, cp in session.parts.items() if k not in seen]
                _record_progress(api, replica_id, rest, range(len(rest)), set())
    elif follower:
        _record_progress(api, replica_id, targets, range(len(targets)), strangers)
    if session is not None:
        session.watch.drain()   # its own progress notifications (just above) are no change to read

    wait_ms = min(max(ms(req.max_wait), 0), MAX_WAIT_CAP_MS)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    keys = [(t.topic_id, t.partition) if t.topic_id is not None else None for t in targets]
    reads: list[PartitionRead | None] = [None] * len(targets)
    skipped: set[int] = set()
    min_bytes = max(req.min_bytes, 1)
    # watching from before the first read: an append while it reads is not missed (a
    # session's own watch runs between its fetches too)
    own_watch = session is None
    watch = api.purgatory.watch(k for k in keys if k is not None) if own_watch else session.watch
    if session is not None:
        session.busy = True
    try:
        await read_some(api, targets, list(range(len(targets))), reads, follower, max_bytes, by_id, strangers,
                         skipped)
        while wait_ms > 0:
            if (sum(len(r.records) for r in reads if r is not None) >= min_bytes
                    or any(r is not None and r.error is not ErrorCode.none for r in reads)):
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            changed = await watch.wait(remaining)
            if not changed:
                break   # max_wait passed
            # only the partitions that changed (append, HW, leadership, offline) are (re-)read
            index = {k: i for i, k in enumerate(keys)}
            again = []
            for k in changed:
                i = index.get(k)
                if i is None and session is not None and k in session.parts:   # a session partition joins
                    targets.append(session.parts[k].target)
                    keys.append(k)
                    reads.append(None)
                    i = len(targets) - 1
                if i is not None:
                    again.append(i)
            await read_some(api, targets, again, reads, follower, max_bytes, by_id, strangers, skipped)
    finally:
        if own_watch:
            watch.close()
        if session is not None:
            session.busy = False
    if session is None:
        return _response(version, targets, reads, 0)
    # a session's answer: full (just created) or the partitions that changed; offsets sent
    # are remembered, budget-skipped partitions looked at again next time
    out_t, out_r = [], []
    for i, (t, r) in enumerate(zip(targets, reads)):
        cached = session.parts.get(_key(t))
        if r is None or cached is None:
            continue
        if i in skipped:
            session.dirty.add(_key(t))
        if not incremental or fetch_session.must_answer(cached, r.error, r.records, r.diverging, r.high_watermark,
                                                        r.log_start_offset, ErrorCode.none):
            cached.last_hw, cached.last_log_start = r.high_watermark, r.log_start_offset
            out_t.append(t)
            out_r.append(r)
    return _response(version, out_t, out_r, session.id)


def legacy_fetch_read(version: int, t: FetchTarget, r: PartitionRead) -> PartitionRead:
    """A read for Fetch v0-3: its records as the version's message format
    (:mod:`broker_impl.api.down_convert`); a codec it cannot convert →
    UNSUPPORTED_COMPRESSION_TYPE with no records."""
    try:
        records = down_convert.down_convert(r.records, down_convert.magic_for(version), t.fetch_offset)
        error = r.error
    except down_convert.Unconvertible:
        records, error = b"", ErrorCode.unsupported_compression_type
    return dataclasses.replace(r, records=records, error=error)


def _response(version: int, targets: list[FetchTarget], reads: list[PartitionRead], session_id: int = 0) -> Any:
    part_cls = response_type(API_KEY, version, "PartitionData")
    topic_cls = response_type(API_KEY, version, "FetchableTopicResponse")
    resp_cls = response_type(API_KEY, version, "FetchResponse")
    grouped: dict[Any, list[Any]] = {}
    epoch_cls = response_type(API_KEY, version, "EpochEndOffset") if version >= 12 else None
    for t, r in zip(targets, reads):
        extra = {}
        if version < 4 and r.records:  # message format v0/v1: the records down-converted
            r = legacy_fetch_read(version, t, r)
        if version <= 5 and r.error is ErrorCode.kafka_storage_error:
            # Kafka's rule: clients of Fetch ≤ 5 may not know KAFKA_STORAGE_ERROR (they would
            # give up); NOT_LEADER_OR_FOLLOWER makes them refresh metadata and retry
            r = dataclasses.replace(r, error=ErrorCode.not_leader_or_follower)
        if r.diverging is not None and epoch_cls is not None:
            extra["diverging_epoch"] = epoch_cls(epoch=r.diverging[0], end_offset=r.diverging[1])
        grouped.setdefault(t.topic_key, []).append(
            build(part_cls, partition_index=t.partition, error_code=r.error, high_watermark=r.high_watermark,
                  last_stable_offset=r.high_watermark, log_start_offset=r.log_start_offset,
                  aborted_transactions=None, preferred_read_replica=-1, records=r.records, **extra))
    topics = tuple(build(topic_cls, topic=key, topic_id=key, partitions=tuple(parts))
                   for key, parts in grouped.items())
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=session_id,
                 responses=topics)
