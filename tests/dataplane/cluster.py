"""A single-process broker for the data-plane tests: image + logs + BrokerView + listener.

Interim parts (replaced when the owners' modules land): ``MemImage`` stands in for
``kafka_common.metadata.image.MetadataImage`` (A1), ``MemLog`` for
``broker_impl.storage`` PartitionLog (B), ``LocalController`` for the controller channel
(it creates topics straight in the image, as the controller's records would).
"""

from __future__ import annotations

import bisect
import random
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker_impl.api.entities import NO_THROTTLE, build, response_type
from broker_impl.api.handlers import BrokerApi
from broker_impl.api.view import AppendResult, LogDirInfo, ReplicaDirEntry
from kafka_common import batch_header as bh
from kafka_common.ids import random_directory_id, random_uuid
from kafka_common.metadata.model import BrokerRegistration, Endpoint, PartitionRegistration, TopicRegistration

from tests.dataplane.wire_server import WireServer


class MemImage:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[uuid.UUID, TopicRegistration] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        return self._partitions.get(topic_id, {}).get(partition_id)

    def partitions_of(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        return self._partitions.get(topic_id, {})

    def add_topic(self, name: str, topic_id: uuid.UUID, parts: list[PartitionRegistration]) -> None:
        self.topics[topic_id] = TopicRegistration(name, topic_id)
        self.topic_ids[name] = topic_id
        self._partitions[topic_id] = {p.partition_id: p for p in parts}

    def set_partition(self, p: PartitionRegistration) -> None:
        self._partitions[p.topic_id][p.partition_id] = p


class MemLog:
    """Opaque v2 batches in memory; offsets assigned on append (baseOffset rewritten)."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._batches: list[tuple[int, int, int, bytes]] = []  # base, next, max_ts, bytes
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.size_bytes = 0

    def append_as_leader(self, batches: bytearray, leader_epoch: int) -> AppendResult:
        base = self.log_end_offset
        offset = base
        for pos, header in list(bh.iter_batches(batches, check_crc=False)):
            bh.set_base_offset(batches, pos, offset)
            bh.set_partition_leader_epoch(batches, pos, leader_epoch)
            data = bytes(batches[pos:pos + header.size_bytes])
            self._bases.append(offset)
            self._batches.append((offset, offset + header.last_offset_delta + 1, header.max_timestamp, data))
            offset += header.last_offset_delta + 1
            self.size_bytes += len(data)
        self.log_end_offset = offset
        return AppendResult(base, offset - 1, self.log_start_offset)

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int) -> bytes:
        i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        out = bytearray()
        while i < len(self._batches):
            base, nxt, _ts, data = self._batches[i]
            if nxt <= fetch_offset:
                i += 1
                continue
            if nxt > max_offset or (out and len(out) + len(data) > max_bytes):
                break
            out += data
            i += 1
        return bytes(out)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        for base, _nxt, max_ts, _data in self._batches:
            if max_ts >= timestamp_ms:
                return base, max_ts
        return None


@dataclass
class TestBrokerView:
    node_id: int
    cluster_id: str
    image: MemImage
    dirs: list[LogDirInfo]
    listener_name: str = "PLAINTEXT"
    auto_create_topics: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_isr: int = 1
    storage_exceptions: tuple[type[BaseException], ...] = (OSError,)
    controller: Any = None
    mover: Any = None
    logs: dict[tuple[uuid.UUID, int], MemLog] = field(default_factory=dict)
    offline_dirs: set[uuid.UUID] = field(default_factory=set)
    follower_leo: dict[tuple[uuid.UUID, int, int], int] = field(default_factory=dict)
    storage_errors: list[tuple[Any, ...]] = field(default_factory=list)
    api: BrokerApi | None = None

    def min_insync_replicas(self, topic_id: uuid.UUID) -> int:
        return self.min_isr

    def local_replica(self, topic_id: uuid.UUID, partition: int) -> MemLog | None:
        p = self.image.partition(topic_id, partition)
        if p is None or self.node_id not in p.replicas:
            return None
        return self.logs.setdefault((topic_id, partition), _LeaderLog(self, topic_id, partition))

    def is_partition_offline(self, topic_id: uuid.UUID, partition: int) -> bool:
        p = self.image.partition(topic_id, partition)
        return p is not None and self.node_id in p.replicas and p.directory(self.node_id) in self.offline_dirs

    def log_dirs(self) -> list[LogDirInfo]:
        out = []
        for d in self.dirs:
            entries = []
            for (tid, part), log in sorted(self.logs.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                p = self.image.partition(tid, part)
                if p is not None and p.directory(self.node_id) in (d.directory_id,) or len(self.dirs) == 1:
                    entries.append(ReplicaDirEntry(self.image.topics[tid].name, part, log.size_bytes,
                                                   max(0, log.high_watermark - log.log_end_offset)))
            out.append(LogDirInfo(d.path, d.directory_id, d.directory_id not in self.offline_dirs, tuple(entries)))
        return out

    def update_hw(self, topic_id: uuid.UUID, partition: int) -> None:
        p = self.image.partition(topic_id, partition)
        log = self.logs.get((topic_id, partition))
        if p is None or log is None:
            return
        leos = [log.log_end_offset if r == self.node_id else self.follower_leo.get((topic_id, partition, r), 0)
                for r in p.isr]
        hw = min(leos) if leos else log.log_end_offset
        if hw > log.high_watermark:
            log.high_watermark = hw

    def on_follower_fetch(self, topic_id: uuid.UUID, partition: int, replica_id: int, fetch_offset: int) -> None:
        self.follower_leo[(topic_id, partition, replica_id)] = fetch_offset
        self.update_hw(topic_id, partition)

    def on_storage_error(self, topic_id: uuid.UUID, partition: int, op: str, exc: BaseException) -> None:
        self.storage_errors.append((topic_id, partition, op, exc))


class _LeaderLog(MemLog):
    def __init__(self, view: TestBrokerView, topic_id: uuid.UUID, partition: int) -> None:
        super().__init__()
        self._view, self._key = view, (topic_id, partition)
        self.fail_appends: OSError | None = None

    def append_as_leader(self, batches: bytearray, leader_epoch: int) -> AppendResult:
        if self.fail_appends is not None:
            raise self.fail_appends
        result = super().append_as_leader(batches, leader_epoch)
        self._view.update_hw(*self._key)
        return result


class LocalController:
    """CreateTopics applied straight to the image (replicas round-robin over live brokers)."""

    def __init__(self, view: TestBrokerView, rng: random.Random) -> None:
        self.view = view
        self.rng = rng
        self.requests: list[Any] = []

    async def create_topics(self, request: Any) -> Any:
        self.requests.append(request)
        image = self.view.image
        version = request.__version__
        results = []
        brokers = sorted(b for b, r in image.brokers.items() if not r.fenced)
        for t in request.topics:
            if t.name in image.topic_ids:
                results.append((t.name, None, ErrorCode.topic_already_exists, -1, -1))
                continue
            n = t.num_partitions if t.num_partitions > 0 else self.view.num_partitions
            rf = t.replication_factor if t.replication_factor > 0 else self.view.default_replication_factor
            if rf > len(brokers):
                results.append((t.name, None, ErrorCode.invalid_replication_factor, -1, -1))
                continue
            tid = random_uuid(self.rng)
            parts = []
            for i in range(n):
                if t.assignments:
                    replicas = tuple(next(a.broker_ids for a in t.assignments if a.partition_index == i))
                else:
                    replicas = tuple(brokers[(i + k) % len(brokers)] for k in range(rf))
                dirs = tuple(image.brokers[r].log_dirs[0] for r in replicas)
                parts.append(PartitionRegistration(tid, i, replicas, replicas, replicas[0], 0, 0, dirs))
            if not request.validate_only:
                image.add_topic(t.name, tid, parts)
            results.append((t.name, tid, ErrorCode.none, n, rf))
        result_cls = response_type(19, version, "CreatableTopicResult")
        return build(response_type(19, version, "CreateTopicsResponse"), throttle_time=NO_THROTTLE, topics=tuple(
            build(result_cls, name=name, topic_id=tid, error_code=err, error_message=None, num_partitions=n,
                  replication_factor=rf, configs=()) for name, tid, err, n, rf in results))


class RecordingMover:
    def __init__(self) -> None:
        self.calls: list[tuple[uuid.UUID, int, uuid.UUID]] = []

    async def alter_replica_log_dir(self, topic_id: uuid.UUID, partition: int, target_dir: uuid.UUID) -> int:
        self.calls.append((topic_id, partition, target_dir))
        return 0


class Broker:
    """One broker: image with this node registered, dirs, view, BrokerApi, listener."""

    def __init__(self, tmp_path: Any, *, node_id: int = 1, seed: int = 7, n_dirs: int = 1,
                 extra_brokers: tuple[int, ...] = ()) -> None:
        self.rng = random.Random(seed)
        self.image = MemImage()
        dirs = []
        for i in range(n_dirs):
            path = tmp_path / f"logs{i}"
            path.mkdir()
            dirs.append(LogDirInfo(str(path), random_directory_id(self.rng), True))
        self.view = TestBrokerView(node_id=node_id, cluster_id="dataplane-test-cluster", image=self.image, dirs=dirs)
        self.view.controller = LocalController(self.view, self.rng)
        self.view.mover = RecordingMover()
        self.api = BrokerApi(self.view, producer_id_base=node_id << 32)
        self.view.api = self.api
        self.server = WireServer(self.api)
        self._extra = extra_brokers
        self._node_id = node_id

    async def start(self) -> None:
        await self.server.start()
        for b in (self._node_id, *self._extra):
            self.image.brokers[b] = BrokerRegistration(
                broker_id=b, epoch=1, incarnation_id=random_uuid(self.rng),
                endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", self.server.port if b == self._node_id else 1),),
                rack=None, fenced=False, in_controlled_shutdown=False,
                log_dirs=tuple(sorted(d.directory_id for d in self.view.dirs)) if b == self._node_id
                else (random_directory_id(self.rng),))

    async def stop(self) -> None:
        await self.server.stop()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"


def batch_base_offsets(data: bytes) -> list[int]:
    return [struct.unpack_from(">q", data, pos)[0] for pos, _h in bh.iter_batches(data)]
