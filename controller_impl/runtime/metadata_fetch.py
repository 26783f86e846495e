"""Fetch (API 1) of ``__cluster_metadata`` partition 0 on a controller: voters replicate the
Raft log with it, brokers (observers, ``replica_id`` -1) read committed records with it.

Only the leader answers with data; any other controller answers NOT_LEADER_OR_FOLLOWER in
the partition with the leader it knows (``current_leader``, v12+) so the fetcher moves on.
A Fetch at the end of the log is parked on the leader until something is appended or
committed, or ``max_wait`` (bounded by ``metadata.fetch.max.wait.ms``) passes.
"""

from __future__ import annotations

import datetime
from typing import Any

from kafka_common import ids, wire
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.raft import messages as m
from controller_impl.runtime import raft_wire as rw


async def serve_fetch(runtime: Any, request: Any, version: int) -> Any:
    raft = runtime.raft
    log = runtime.log
    mod = wire.response_module(ApiKey.FETCH, version)
    cls = wire.response_class(ApiKey.FETCH, version)
    cluster_id = getattr(request, "cluster_id", None)
    if cluster_id is not None and cluster_id != runtime.cluster_id:
        return wire.error_response(ApiKey.FETCH, version, ErrorCode.inconsistent_cluster_id)
    by_id = version >= 13
    max_wait_ms = int(request.max_wait.total_seconds() * 1000) if request.max_wait else 0
    max_wait_ms = max(0, min(max_wait_ms, runtime.cfg.metadata_fetch_max_wait_ms))

    def wanted(topic: Any) -> bool:
        if by_id:
            return ids.from_wire(topic.topic_id) == ids.METADATA_TOPIC_ID
        return topic.topic == ids.METADATA_TOPIC

    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if not wanted(t) or p.partition != 0:
                code = ErrorCode.unknown_topic_id if by_id and not wanted(t) else ErrorCode.unknown_topic_or_partition
                st = raft.state
                answer = m.FetchAnswer(code, st.epoch, st.leader_id, st.high_watermark, log.start_offset)
                parts.append(_partition(mod, version, answer, b""))
                continue
            freq = rw.parse_fetch_partition(request, p)
            if freq.replica_id not in raft.voters or freq.replica_id == raft.node_id:
                freq = m.FetchRequest(-1, -1, freq.fetch_offset, -1)  # an observer
            answer = await raft.answer_fetch(freq, max_wait_ms)
            records = b""
            if answer.error == ErrorCode.none and answer.readable:
                records = log.read(answer.read_from, max(1, p.partition_max_bytes), limit=answer.read_limit)
            parts.append(_partition(mod, version, answer, records))
        topics.append(wire.make(mod.FetchableTopicResponse, topic=t.topic if not by_id else None,
                                topic_id=t.topic_id if by_id else None, partitions=tuple(parts)))
    return wire.make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                     session_id=0, responses=tuple(topics))


def _partition(mod: Any, version: int, answer: m.FetchAnswer, records: bytes) -> Any:
    if version >= 12:
        return rw.fetch_partition(mod, answer, records)
    return wire.make(mod.PartitionData, partition_index=0, error_code=answer.error,
                     high_watermark=answer.high_watermark, last_stable_offset=answer.high_watermark,
                     log_start_offset=answer.log_start_offset, aborted_transactions=None,
                     preferred_read_replica=-1, records=records)
