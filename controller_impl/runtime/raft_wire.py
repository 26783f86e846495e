"""kio values ↔ the pure Raft messages (``controller_impl.raft.messages``).

Versions spoken between voters: Vote v2 (pre-vote, KIP-996), BeginQuorumEpoch v0,
EndQuorumEpoch v0, Fetch v13 (replica id, current leader epoch, last fetched epoch;
diverging epoch / current leader / snapshot id come back as tagged fields), FetchSnapshot
v0. All name topic ``__cluster_metadata`` partition 0. DescribeQuorum v0–v2 is answered.
"""

from __future__ import annotations

import datetime
from typing import Any

from controller_impl.errors import ControllerError
from kafka_common import ids, wire
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.raft import messages as m
from kafka_runtime.snapshot_fetch import fetch_snapshot_request, parse_fetch_snapshot_response  # noqa: F401 (re-exported)

(VOTE, BEGIN, END, DESCRIBE, FETCH_SNAPSHOT, FETCH) = (
    ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.DESCRIBE_QUORUM, ApiKey.FETCH_SNAPSHOT,
    ApiKey.FETCH)
RAFT_VERSIONS: dict[int, tuple[int, int]] = {VOTE: (0, 2), BEGIN: (0, 0), END: (0, 0), DESCRIBE: (0, 2),
                                             FETCH_SNAPSHOT: (0, 0)}
VOTER_FETCH_VERSION = 13
TOPIC = ids.METADATA_TOPIC


class RaftWireError(ControllerError, ValueError):
    """A Raft request that does not name exactly __cluster_metadata partition 0."""


def _one_partition(request: Any, name_attr: str = "topic_name") -> Any:
    topics = request.topics or ()
    if len(topics) != 1 or getattr(topics[0], name_attr) != TOPIC or len(topics[0].partitions or ()) != 1 \
            or _index(topics[0].partitions[0]) != 0:
        raise RaftWireError(f"expected {TOPIC} partition 0")
    return topics[0].partitions[0]


def _index(p: Any) -> int:
    return getattr(p, "partition_index", getattr(p, "partition", 0))


# -- Vote ---------------------------------------------------------------------------------
def vote_request(cluster_id: str, req: m.VoteRequest, to: int, version: int = 2) -> Any:
    mod = wire.request_module(VOTE, version)
    part = wire.make(mod.PartitionData, partition_index=0, replica_epoch=req.candidate_epoch,
                     replica_id=req.candidate_id, replica_directory_id=None, voter_directory_id=None,
                     last_offset_epoch=req.last_epoch, last_offset=req.last_epoch_end_offset,
                     pre_vote=req.pre_vote)
    return wire.make(wire.request_class(VOTE, version), cluster_id=cluster_id, voter_id=to,
                     topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),))


def parse_vote_request(request: Any) -> m.VoteRequest:
    p = _one_partition(request)
    return m.VoteRequest(p.replica_id, p.replica_epoch, p.last_offset_epoch, p.last_offset,
                         bool(getattr(p, "pre_vote", False)))


def vote_response(resp: m.VoteResponse, version: int) -> Any:
    mod = wire.response_module(VOTE, version)
    part = wire.make(mod.PartitionData, partition_index=0, error_code=resp.error, leader_id=resp.leader_id,
                     leader_epoch=resp.epoch, vote_granted=resp.vote_granted)
    return wire.make(wire.response_class(VOTE, version), error_code=ErrorCode.none, node_endpoints=(),
                     topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),))


def parse_vote_response(resp: Any) -> m.VoteResponse:
    if resp.error_code != ErrorCode.none:
        raise RaftWireError(f"Vote: {resp.error_code.name}")
    p = _one_partition(resp)
    return m.VoteResponse(p.error_code, p.leader_epoch, p.leader_id, p.vote_granted)


# -- BeginQuorumEpoch / EndQuorumEpoch ----------------------------------------------------
def begin_request(cluster_id: str, req: m.BeginEpochRequest) -> Any:
    mod = wire.request_module(BEGIN, 0)
    part = mod.PartitionData(partition_index=0, leader_id=req.leader_id, leader_epoch=req.leader_epoch)
    return wire.request_class(BEGIN, 0)(cluster_id=cluster_id, topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),))


def end_request(cluster_id: str, req: m.EndEpochRequest) -> Any:
    mod = wire.request_module(END, 0)
    part = mod.PartitionData(partition_index=0, leader_id=req.leader_id, leader_epoch=req.leader_epoch,
                             preferred_successors=tuple(req.preferred_successors))
    return wire.request_class(END, 0)(cluster_id=cluster_id, topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),))


def parse_begin_request(request: Any) -> m.BeginEpochRequest:
    p = _one_partition(request)
    return m.BeginEpochRequest(p.leader_id, p.leader_epoch)


def parse_end_request(request: Any) -> m.EndEpochRequest:
    p = _one_partition(request)
    return m.EndEpochRequest(p.leader_id, p.leader_epoch, tuple(p.preferred_successors or ()))


def epoch_response(api_key: int, resp: m.EpochResponse, version: int) -> Any:
    mod = wire.response_module(api_key, version)
    part = wire.make(mod.PartitionData, partition_index=0, error_code=resp.error, leader_id=resp.leader_id,
                     leader_epoch=resp.epoch)
    return wire.make(wire.response_class(api_key, version), error_code=ErrorCode.none, node_endpoints=(),
                     topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),))


def parse_epoch_response(resp: Any) -> m.EpochResponse:
    if resp.error_code != ErrorCode.none:
        raise RaftWireError(f"{type(resp).__name__}: {resp.error_code.name}")
    p = _one_partition(resp)
    return m.EpochResponse(p.error_code, p.leader_epoch, p.leader_id)


# -- Fetch between voters -----------------------------------------------------------------
def voter_fetch_request(cluster_id: str, req: m.FetchRequest, max_wait_ms: int, max_bytes: int) -> Any:
    v = VOTER_FETCH_VERSION
    mod = wire.request_module(FETCH, v)
    part = wire.make(mod.FetchPartition, partition=0, current_leader_epoch=req.leader_epoch,
                     fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch,
                     log_start_offset=-1, partition_max_bytes=max_bytes)
    topic = wire.make(mod.FetchTopic, topic=TOPIC, topic_id=ids.METADATA_TOPIC_ID, partitions=(part,))
    return wire.make(wire.request_class(FETCH, v), cluster_id=cluster_id, replica_id=req.replica_id,
                     max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
                     isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                     forgotten_topics_data=(), rack_id="")


def fetch_replica_id(request: Any) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def parse_fetch_partition(request: Any, part: Any) -> m.FetchRequest:
    return m.FetchRequest(fetch_replica_id(request), int(part.current_leader_epoch), int(part.fetch_offset),
                          int(part.last_fetched_epoch))


def fetch_partition(mod: Any, answer: m.FetchAnswer, records: bytes) -> Any:
    div = answer.diverging
    snap = answer.snapshot_id
    return wire.make(mod.PartitionData, partition_index=0, error_code=answer.error,
                     high_watermark=answer.high_watermark, last_stable_offset=answer.high_watermark,
                     log_start_offset=answer.log_start_offset,
                     diverging_epoch=mod.EpochEndOffset(epoch=div[0], end_offset=div[1]) if div else mod.EpochEndOffset(),
                     current_leader=mod.LeaderIdAndEpoch(leader_id=answer.leader_id, leader_epoch=answer.epoch),
                     snapshot_id=mod.SnapshotId(end_offset=snap[0], epoch=snap[1]) if snap else mod.SnapshotId(),
                     aborted_transactions=None, preferred_read_replica=-1, records=records)


def parse_fetch_response(resp: Any) -> tuple[m.FetchResponse, bytes]:
    if resp.error_code != ErrorCode.none:
        raise RaftWireError(f"Fetch: {resp.error_code.name}")
    if len(resp.responses or ()) != 1 or len(resp.responses[0].partitions or ()) != 1:
        raise RaftWireError("Fetch: expected one partition")
    p = resp.responses[0].partitions[0]
    div = p.diverging_epoch
    snap = p.snapshot_id
    leader = p.current_leader
    out = m.FetchResponse(p.error_code, leader.leader_epoch, leader.leader_id, p.high_watermark,
                          (div.epoch, div.end_offset) if div.end_offset >= 0 else None,
                          (snap.end_offset, snap.epoch) if snap.end_offset >= 0 else None)
    return out, bytes(p.records or b"")


# -- FetchSnapshot ------------------------------------------------------------------------
def parse_fetch_snapshot_request(request: Any) -> tuple[int, tuple[int, int], int]:
    p = _one_partition(request, "name")
    return int(p.current_leader_epoch), (int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch)), int(p.position)


def fetch_snapshot_response(error: ErrorCode, snapshot_id: tuple[int, int], leader_id: int, epoch: int,
                            size: int, position: int, data: bytes) -> Any:
    mod = wire.response_module(FETCH_SNAPSHOT, 0)
    part = mod.PartitionSnapshot(index=0, error_code=error,
                                 snapshot_id=mod.SnapshotId(end_offset=snapshot_id[0], epoch=snapshot_id[1]),
                                 current_leader=mod.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch),
                                 size=size, position=position, unaligned_records=data)
    return wire.make(wire.response_class(FETCH_SNAPSHOT, 0), throttle_time=datetime.timedelta(0),
                     error_code=ErrorCode.none, topics=(mod.TopicSnapshot(name=TOPIC, partitions=(part,)),))


# -- DescribeQuorum -----------------------------------------------------------------------
def describe_request(version: int = 0) -> Any:
    mod = wire.request_module(DESCRIBE, version)
    return wire.request_class(DESCRIBE, version)(
        topics=(mod.TopicData(topic_name=TOPIC, partitions=(mod.PartitionData(partition_index=0),)),))


def describe_response(version: int, error: ErrorCode, leader_id: int, epoch: int, hw: int,
                      voters: list[tuple[int, int, int, int]]) -> Any:
    """``voters``: (id, log end offset, last fetch ms since epoch, last caught-up ms), -1 unknown."""
    mod = wire.response_module(DESCRIBE, version)
    states = tuple(wire.make(mod.ReplicaState, replica_id=v, replica_directory_id=None, log_end_offset=leo,
                             last_fetch_timestamp=fetch_ts, last_caught_up_timestamp=caught_ts)
                   for v, leo, fetch_ts, caught_ts in voters)
    part = wire.make(mod.PartitionData, partition_index=0, error_code=error, error_message=None,
                     leader_id=leader_id, leader_epoch=epoch, high_watermark=hw, current_voters=states,
                     observers=())
    return wire.make(wire.response_class(DESCRIBE, version), error_code=ErrorCode.none, error_message=None,
                     topics=(mod.TopicData(topic_name=TOPIC, partitions=(part,)),), nodes=())


def parse_describe_response(resp: Any) -> dict:
    p = _one_partition(resp)
    return {"error": p.error_code.name, "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
            "high_watermark": p.high_watermark,
            "voters": [{"id": s.replica_id, "log_end_offset": s.log_end_offset,
                        "last_fetch_timestamp": getattr(s, "last_fetch_timestamp", -1),
                        "last_caught_up_timestamp": getattr(s, "last_caught_up_timestamp", -1)} for s in p.current_voters]}
