"""Protocol-level helpers: v2 record batches built byte by byte, request builders, and a
raw connection that decodes responses with any class (e.g. DescribeLogDirsResponseV4)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from datetime import timedelta
from typing import Any

import crc32c

from kafka_common import framing, wire
from kafka_common.varint import encode_varint


def _record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varint(ts_delta) + encode_varint(offset_delta)
    body += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
    body += encode_varint(0)
    return encode_varint(len(body)) + bytes(body)


def make_batch(values: list[bytes], *, producer_id: int = -1, epoch: int = -1, base_seq: int = -1,
               base_timestamp: int = 1_700_000_000_000, magic: int = 2, key: bytes | None = None) -> bytes:
    records = b"".join(_record(i, i, key, v) for i, v in enumerate(values))
    n = len(values)
    after_crc = struct.pack(">hiqqqhii", 0, n - 1, base_timestamp, base_timestamp + n - 1,
                            producer_id, epoch, base_seq, n) + records
    crc = crc32c.crc32c(after_crc)
    body = struct.pack(">ibI", 0, magic, crc) + after_crc  # leaderEpoch, magic, crc
    return struct.pack(">qi", 0, len(body)) + body


def produce_request(version: int, topic: str, partition: int | list[int], records: bytes | None, *, acks: int = -1,
                    timeout_ms: int = 10_000) -> Any:
    """One topic; ``partition`` a list: the same records to each of them in one request."""
    mod = wire.request_module(0, version)
    partitions = partition if isinstance(partition, list) else [partition]
    return wire.request_class(0, version)(
        transactional_id=None, acks=acks, timeout=timedelta(milliseconds=timeout_ms),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=tuple(
            mod.PartitionProduceData(index=p, records=records) for p in partitions)),))


def init_producer_id_request(version: int = 4) -> Any:
    """InitProducerId for an idempotent (non-transactional) producer: a new id, epoch 0."""
    return wire.make(wire.request_class(22, version), transactional_id=None,
                     transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1)


def fetch_request(version: int, topic: str | uuid.UUID, partition: int, offset: int, *, replica_id: int = -1,
                  max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20,
                  current_leader_epoch: int = -1, last_fetched_epoch: int = -1) -> Any:
    mod = wire.request_module(1, version)
    cls = wire.request_class(1, version)
    part = wire.make(mod.FetchPartition, partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
                     current_leader_epoch=current_leader_epoch, log_start_offset=-1,
                     last_fetched_epoch=last_fetched_epoch)
    topic_kw = {"topic_id": topic} if version >= 13 else {"topic": topic}
    kwargs: dict[str, Any] = dict(max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                                  max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                                  topics=(mod.FetchTopic(partitions=(part,), **topic_kw),),
                                  forgotten_topics_data=(), rack_id="")
    if version >= 15:
        kwargs["replica_state"] = mod.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        kwargs["replica_id"] = replica_id
    return wire.make(cls, **kwargs)


class RawConnection:
    """One connection; requests answered in order; responses decoded with a given class."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._cid = 0

    @classmethod
    async def open(cls, port: int) -> "RawConnection":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, request: Any) -> int:
        self._cid += 1
        self.writer.write(framing.encode_frame(wire.encode_request(request, self._cid, "dataplane-test")))
        return self._cid

    async def receive(self, response_cls: type, timeout_s: float = 20.0) -> tuple[int, Any]:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout_s))[0]
        frame = await asyncio.wait_for(self.reader.readexactly(size), timeout_s)
        header, n = wire.decode(response_cls.__header_schema__, frame)
        body, m = wire.decode(response_cls, frame, n)
        assert n + m == len(frame), "trailing bytes in response"
        return header.correlation_id, body

    async def call(self, request: Any, response_cls: type | None = None) -> Any:
        cid = self.send(request)
        cls = response_cls or wire.response_class(type(request).__api_key__, type(request).__version__)
        got, body = await self.receive(cls)
        assert got == cid, f"correlation id {got} != {cid}"
        return body

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def init_producer_id(port: int) -> tuple[int, int]:
    """(producer id, epoch) the broker on ``port`` hands an idempotent producer; fails the
    caller unless InitProducerId answers without error."""
    c = await RawConnection.open(port)
    try:
        resp = await c.call(init_producer_id_request())
    finally:
        await c.close()
    assert int(resp.error_code.value) == 0, resp
    return resp.producer_id, resp.producer_epoch
