"""Produce (API 0): validate opaque v2 batches, idempotence checks, append, acks 0/1/all.

Per partition, in this order (first failing rule answers): topic/partition known
(UNKNOWN_TOPIC_OR_PARTITION) → partition's dir offline (KAFKA_STORAGE_ERROR) → this broker
leads it and hosts the log (NOT_LEADER_OR_FOLLOWER) → for acks=all, |ISR| ≥
min.insync.replicas of the topic (NOT_ENOUGH_REPLICAS) → batches are magic-2
(UNSUPPORTED_FOR_MESSAGE_FORMAT; Produce v0–2's message formats v0/v1 are first up-converted
to one v2 batch, :mod:`up_convert`) with whole headers (CORRUPT_MESSAGE; the log checks the CRCs
as it appends) → no batch over the topic's max.message.bytes (MESSAGE_TOO_LARGE) → append, where
the log checks producer sequences (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH;
duplicates answer NONE with their original offsets; see ``PartitionLog.append_as_leader``)
(an OSError → KAFKA_STORAGE_ERROR and the runtime is told).

acks=all waits (purgatory) until the high watermark passes the last appended offset, or
the request timeout (REQUEST_TIMED_OUT); if the ISR shrank below min.insync.replicas by
then: NOT_ENOUGH_REPLICAS_AFTER_APPEND. The appends (queued, each
partition's lock taken in request order) and that wait are returned as a
:class:`kafka_runtime.request_context.DeferredResponse`: the listener goes on with the connection's
next requests (librdkafka pipelines one Produce per partition batch) while this one appends
and replicates, and the answers still leave in request order — a connection's acks=all
throughput is not one request per append hop plus replication round trip. acks=0 returns ``None``: no
response is sent.

The append runs off the event loop (``BrokerView.replica_io``: the partition's log-dir
worker in the broker), the partitions of one request concurrently, each under its
``partition_lock`` (check → append → record of one partition never interleave); the
requests queued behind a partition's lock append in one dir job (:mod:`.append_queue`).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_impl.api import append_queue
from broker_impl.api import up_convert
from broker_impl.api.configs import batch_too_large
from broker_impl.api.entities import NO_THROTTLE, build, ms, replica_error, response_type
from kafka_common import batch_header as bh
from kafka_common.wire import ApiKey
from kafka_runtime.request_context import DeferredResponse

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

API_KEY = ApiKey.PRODUCE


@dataclass(slots=True)
class _PartitionResult:
    index: int
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    wait_offset: int = -1            # acks=all: HW must reach this (last offset + 1)
    topic_id: uuid.UUID | None = None


def _validate(records: bytes | None) -> tuple[ErrorCode, str | None, list[bh.BatchHeader]]:
    if not records:
        return ErrorCode.corrupt_message, "no record batches", []
    headers: list[bh.BatchHeader] = []
    pos = 0
    total = len(records)
    while pos < total:
        if total - pos >= 17 and records[pos + 16] != bh.MAGIC_V2:
            return ErrorCode.unsupported_for_message_format, f"magic {records[pos + 16]} (only v2 batches)", []
        try:
            header = bh.read_header(records, pos)
        except bh.CorruptBatch as exc:
            return ErrorCode.corrupt_message, str(exc), []
        if pos + header.size_bytes > total:
            return ErrorCode.corrupt_message, f"truncated batch at byte {pos}", []
        if header.record_count != header.last_offset_delta + 1 and not header.is_control:
            return ErrorCode.corrupt_message, f"record count {header.record_count} != lastOffsetDelta+1", []
        headers.append(header)
        pos += header.size_bytes
    return ErrorCode.none, None, headers


async def _append_partition(api: ApiContext, topic_id: uuid.UUID | None, index: int, records: bytes | None,
                            acks: int) -> _PartitionResult:
    """Under the partition's lock (appends of one partition stay in order across connections,
    and its producer state is checked and recorded around its own append only), together
    with the appends queued behind it: one dir job for them all (:mod:`.append_queue`)."""
    view = api.view
    reg = view.image.topics.get(topic_id) if topic_id is not None else None
    item = (api, topic_id, index, records, acks)
    if reg is None:
        return (await _append_many([item]))[0]   # refused without the lock: no such topic
    return await append_queue.combined(view.partition_lock(reg.name, index), item, _append_many)


def _check(api: ApiContext, topic_id: uuid.UUID | None, index: int, records: bytes | None,
           acks: int) -> "_PartitionResult | tuple[Any, int]":
    """The refusal of one partition's append, or (its replica, the leader epoch) to append with."""
    view = api.view
    if topic_id is None or view.image.partition(topic_id, index) is None:
        return _PartitionResult(index, ErrorCode.unknown_topic_or_partition)
    registration = view.image.partition(topic_id, index)
    if view.is_partition_offline(topic_id, index):
        return _PartitionResult(index, ErrorCode.kafka_storage_error, message="partition's log dir is offline")
    replica = view.local_replica(topic_id, index) if registration.leader == view.node_id else None
    if replica is None:
        return _PartitionResult(index, ErrorCode.not_leader_or_follower)
    min_isr = view.min_insync_replicas(topic_id)
    if acks == -1 and len(registration.isr) < min_isr:
        return _PartitionResult(index, ErrorCode.not_enough_replicas,
                                message=f"ISR {list(registration.isr)} smaller than min.insync.replicas={min_isr}")
    err, message, headers = _validate(records)
    if err is not ErrorCode.none:
        return _PartitionResult(index, err, message=message)
    too_large = batch_too_large(view, topic_id, headers)  # the topic's max.message.bytes
    if too_large is not None:
        return _PartitionResult(index, ErrorCode.message_too_large, message=too_large)
    return replica, registration.leader_epoch


def _append_all(replica: Any, appends: list[tuple[bytes, int]]) -> list[Any]:
    """On the replica's dir worker: each request's batches in turn, each one's offsets or
    the exception it raised (a bad sequence refuses that request only)."""
    out: list[Any] = []
    for records, epoch in appends:
        try:
            out.append(replica.append_as_leader(records, epoch))
        except Exception as exc:
            out.append(exc)
    return out


async def _append_many(items: list[tuple[Any, uuid.UUID | None, int, bytes | None, int]]) -> list[Any]:
    """The queued appends of one partition (under its lock): the checks on the loop, then one
    dir job for those that pass. Producer sequences are checked by the log itself,
    atomically with each append, against the partition's producer state (fed by every leader
    and follower append, rebuilt from the log): a known producer's retried batch comes back
    with its original offsets. Per item its result, or the exception of a bug."""
    out: list[Any] = [None] * len(items)
    jobs: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
    for i, (api, topic_id, index, records, acks) in enumerate(items):
        got = _check(api, topic_id, index, records, acks)
        if isinstance(got, _PartitionResult):
            out[i] = got
        else:
            jobs.setdefault(id(got[0]), (got[0], []))[1].append((i, got[1]))
    for replica, members in jobs.values():
        api = items[members[0][0]][0]
        view = api.view
        try:
            res = await view.replica_io(replica, _append_all, replica, [(items[i][3], epoch) for i, epoch in members])
        except Exception as exc:   # the job's flush failed (dir offline): none of them is acked
            res = [exc] * len(members)
        appended = None
        for (i, _epoch), r in zip(members, res):
            _api, topic_id, index, _records, _acks = items[i]
            if isinstance(r, BaseException):
                mapped = replica_error(view, topic_id, index, "append", r)
                out[i] = r if mapped is None else _PartitionResult(index, mapped[0], message=mapped[1])
                continue
            base_offset, last_offset = r
            appended = (topic_id, index)
            out[i] = _PartitionResult(index, ErrorCode.none, base_offset=base_offset,
                                      log_start_offset=replica.log_start_offset,
                                      wait_offset=last_offset + 1, topic_id=topic_id)
        if appended is not None:
            view.on_leader_append(*appended)
            api.notify_partition(*appended)
    return out


def _done(result: _PartitionResult) -> "asyncio.Future[_PartitionResult]":
    fut: asyncio.Future[_PartitionResult] = asyncio.get_running_loop().create_future()
    fut.set_result(result)
    return fut


async def handle_produce(api: ApiContext, ctx: Any, req: Any) -> Any | None:
    version = req.__version__
    acks = req.acks
    by_id = version >= 13
    per_topic: list[tuple[Any, list[_PartitionResult]]] = []
    for topic in req.topic_data:
        if by_id:
            topic_id = topic.topic_id
            topic_key: Any = topic_id
        else:
            topic_key = topic.name
            topic_id = api.view.image.topic_ids.get(topic.name)
        results: list[Any] = []
        for pd in topic.partition_data:
            if acks not in (-1, 0, 1):
                results.append(_done(_PartitionResult(pd.index, ErrorCode.invalid_required_acks)))
            elif req.transactional_id is not None:
                results.append(_done(_PartitionResult(pd.index, ErrorCode.transactional_id_authorization_failed,
                                                      message="transactions are not supported")))
            elif version < 3 and up_convert.is_legacy(pd.records):   # message format v0/v1
                try:
                    batch = up_convert.up_convert(pd.records)
                except up_convert.Invalid as exc:
                    results.append(_done(_PartitionResult(pd.index, ErrorCode[exc.error], message=str(exc))))
                else:
                    results.append(_append_partition(api, topic_id, pd.index, batch, acks))
            else:  # each partition appends on its own dir's worker, concurrently
                results.append(_append_partition(api, topic_id, pd.index, pd.records, acks))
        per_topic.append((topic_key, results))
    # one partition with acks=all (librdkafka sends one per request): its append runs in
    # the deferred answer's own task — started in request order like the tasks below — with
    # no task and gather of its own
    if acks != -1 or sum(len(rs) for _, rs in per_topic) != 1:
        for _, rs in per_topic:
            rs[:] = [asyncio.ensure_future(r) if asyncio.iscoroutine(r) else r for r in rs]
    if acks == -1:
        # the appends are queued (each partition's lock taken in request order, so a later
        # request's append to the same partition comes after); the connection goes on with
        # its next request while they run and replicate (the answers stay in order)
        return DeferredResponse(_replicated_response(api, version, per_topic, ms(req.timeout)))
    resolved = await _resolve(per_topic)
    if acks == 0:
        return None
    return _response(version, resolved)


async def _resolve(per_topic: list[tuple[Any, list["asyncio.Future[_PartitionResult]"]]]
                   ) -> list[tuple[Any, list[_PartitionResult]]]:
    calls = [f for _, fs in per_topic for f in fs]
    done = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
    it = iter(done)
    return [(key, [next(it) for _ in fs]) for key, fs in per_topic]


async def _replicated_response(api: ApiContext, version: int, per_topic: list[tuple[Any, list[Any]]],
                               timeout_ms: int) -> Any:
    resolved = await _resolve(per_topic)
    await _await_replication(api, [r for _, rs in resolved for r in rs], timeout_ms)
    return _response(version, resolved)


async def _await_replication(api: ApiContext, results: list[_PartitionResult], timeout_ms: int) -> None:
    pending = [r for r in results if r.error is ErrorCode.none and r.wait_offset >= 0]
    if not pending:
        return
    view = api.view

    def settled(r: _PartitionResult) -> bool:
        """Replicated, or it never will be here (leadership moved, dir offline)."""
        assert r.topic_id is not None
        registration = view.image.partition(r.topic_id, r.index)
        if registration is None or registration.leader != view.node_id:
            return True
        if view.is_partition_offline(r.topic_id, r.index):
            return True
        replica = view.local_replica(r.topic_id, r.index)
        return replica is None or replica.high_watermark >= r.wait_offset

    keys = [(r.topic_id, r.index) for r in pending]
    await api.purgatory.wait_until(keys, lambda: all(settled(r) for r in pending), timeout_ms / 1000)
    for r in pending:
        assert r.topic_id is not None
        registration = view.image.partition(r.topic_id, r.index)
        replica = view.local_replica(r.topic_id, r.index)
        if registration is None or registration.leader != view.node_id or replica is None:
            r.error, r.message = ErrorCode.not_leader_or_follower, "leadership moved before the ISR had the batch"
        elif view.is_partition_offline(r.topic_id, r.index):
            r.error = ErrorCode.kafka_storage_error
        elif replica.high_watermark < r.wait_offset:
            r.error, r.message = ErrorCode.request_timed_out, "ISR did not replicate within the timeout"
        elif len(registration.isr) < view.min_insync_replicas(r.topic_id):
            r.error = ErrorCode.not_enough_replicas_after_append


def _response(version: int, per_topic: list[tuple[Any, list[_PartitionResult]]]) -> Any:
    part_cls = response_type(API_KEY, version, "PartitionProduceResponse")
    topic_cls = response_type(API_KEY, version, "TopicProduceResponse")
    resp_cls = response_type(API_KEY, version, "ProduceResponse")
    topics = []
    for topic_key, results in per_topic:
        parts = tuple(
            build(part_cls, index=r.index, error_code=r.error,
                  base_offset=r.base_offset if r.error is ErrorCode.none else -1,
                  log_append_time=None, log_start_offset=r.log_start_offset,
                  record_errors=(), error_message=r.message if r.error is not ErrorCode.none else None)
            for r in results)
        topics.append(build(topic_cls, name=topic_key, topic_id=topic_key, partition_responses=parts))
    return build(resp_cls, responses=tuple(topics), throttle_time=NO_THROTTLE)
