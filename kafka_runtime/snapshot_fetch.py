"""FetchSnapshot (API 59) of ``__cluster_metadata`` partition 0, client side: a voter or a
broker whose next offset is below the leader's log start fetches the snapshot the leader
named in its Fetch answer (``snapshot_id``), in chunks, then goes on from its end offset."""

from __future__ import annotations

from typing import Any

from kafka_common import ids, wire
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.client import ClientError, KafkaClient

CHUNK_BYTES = 4 << 20


def fetch_snapshot_request(cluster_id: str | None, replica_id: int, epoch: int, snapshot_id: tuple[int, int],
                           position: int, max_bytes: int) -> Any:
    mod = wire.request_module(ApiKey.FETCH_SNAPSHOT, 0)
    part = mod.PartitionSnapshot(partition=0, current_leader_epoch=epoch,
                                 snapshot_id=mod.SnapshotId(end_offset=snapshot_id[0], epoch=snapshot_id[1]),
                                 position=position)
    return wire.make(wire.request_class(ApiKey.FETCH_SNAPSHOT, 0), cluster_id=cluster_id, replica_id=replica_id,
                     max_bytes=max_bytes, topics=(mod.TopicSnapshot(name=ids.METADATA_TOPIC, partitions=(part,)),))


def parse_fetch_snapshot_response(resp: Any) -> tuple[ErrorCode, int, int, int, bytes]:
    """(error, size, position, leader id, bytes)."""
    if resp.error_code != ErrorCode.none:
        return resp.error_code, 0, 0, -1, b""
    topics = resp.topics or ()
    if len(topics) != 1 or len(topics[0].partitions or ()) != 1:
        return ErrorCode.unknown_topic_or_partition, 0, 0, -1, b""
    p = topics[0].partitions[0]
    return p.error_code, int(p.size), int(p.position), int(p.current_leader.leader_id), bytes(p.unaligned_records or b"")


async def fetch_snapshot(client: KafkaClient, snapshot_id: tuple[int, int], *, cluster_id: str | None = None,
                         replica_id: int = -1, epoch: int = -1, timeout_s: float = 30.0) -> bytes:
    """The whole snapshot's bytes; ClientError on any refusal."""
    chunks: list[bytes] = []
    position = 0
    while True:
        resp = await client.request(fetch_snapshot_request(cluster_id, replica_id, epoch, snapshot_id, position,
                                                           CHUNK_BYTES), timeout_s=timeout_s)
        error, size, pos, _, data = parse_fetch_snapshot_response(resp)
        if error != ErrorCode.none or pos != position:
            raise ClientError(f"FetchSnapshot {snapshot_id}: {error.name} at position {pos}")
        chunks.append(data)
        position += len(data)
        if position >= size or not data:
            return b"".join(chunks)
