"""Talk to a real controller the way brokers do (tests, `jbodlab demo`, the lab, the
benchmarks), with the requests of :mod:`kafka_common.controller_protocol`.

* :class:`SimBroker` — one "broker": a :class:`KafkaClient` that sends BrokerRegistration /
  BrokerHeartbeat / AssignReplicasToDirs requests; :func:`create_topic` sends CreateTopics.
* :class:`MetadataReader` — reads the committed records back through Fetch of
  ``__cluster_metadata`` and replays them into its own :class:`MetadataImage`.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

from kafka_common import controller_protocol as cp
from kafka_common import ids
from kafka_common.wire import ApiKey, ErrorCode
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.image import MetadataImage
from kafka_runtime.client import KafkaClient
from kafka_runtime.snapshot_fetch import fetch_snapshot


class SimBroker:
    """One broker's controller channel, built on the real client."""

    def __init__(self, broker_id: int, dirs: list[uuid.UUID], *, cluster_id: str,
                 port: int = 9092, incarnation: uuid.UUID | None = None) -> None:
        self.broker_id = broker_id
        self.dirs = dirs
        self.cluster_id = cluster_id
        self.port = port
        self.incarnation = incarnation or ids.random_uuid(random.SystemRandom())
        self.epoch = -1
        self.offline: list[uuid.UUID] = []
        self.client: KafkaClient | None = None

    async def connect(self, host: str, port: int, sasl: tuple[str, str] | None = None) -> None:
        self.client = await KafkaClient.connect(host, port, client_id=f"broker-{self.broker_id}", sasl=sasl)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def registration_request(self, version: int = cp.REGISTRATION[1]) -> Any:
        return cp.broker_registration(version, broker_id=self.broker_id, cluster_id=self.cluster_id,
                                      incarnation_id=self.incarnation, log_dirs=self.dirs,
                                      listeners=[("PLAINTEXT", "127.0.0.1", self.port, cp.PLAINTEXT)])

    async def register(self) -> Any:
        assert self.client is not None
        resp = await self.client.request(self.registration_request())
        if resp.error_code == ErrorCode.none:
            self.epoch = resp.broker_epoch
        return resp

    def heartbeat_request(self, metadata_offset: int, *, want_fence: bool = False) -> Any:
        return cp.broker_heartbeat(cp.HEARTBEAT[1], broker_id=self.broker_id, broker_epoch=self.epoch,
                                   current_metadata_offset=metadata_offset, want_fence=want_fence,
                                   offline_log_dirs=self.offline)

    async def heartbeat(self, metadata_offset: int, *, want_fence: bool = False) -> Any:
        assert self.client is not None
        return await self.client.request(self.heartbeat_request(metadata_offset, want_fence=want_fence))

    async def assign(self, assignments: dict[uuid.UUID, list[tuple[uuid.UUID, int]]]) -> Any:
        """AssignReplicasToDirs: {dir_id: [(topic_id, partition), …]}."""
        assert self.client is not None
        return await self.client.request(cp.assign_replicas_to_dirs(
            cp.ASSIGN[1], broker_id=self.broker_id, broker_epoch=self.epoch,
            by_directory=cp.group_by_dir(assignments)))


async def create_topic(client: KafkaClient, name: str, partitions: int, replication_factor: int,
                       *, assignments: dict[int, list[int]] | None = None,
                       version: int = cp.CREATE_TOPICS[1]) -> Any:
    return await client.request(cp.create_topics(version, name, partitions, replication_factor,
                                                 assignments=assignments))


class MetadataReader:
    """Fetches ``__cluster_metadata`` from the controller and replays it."""

    def __init__(self, client: KafkaClient, *, version: int | None = None) -> None:
        self.client = client
        self.version = version if version is not None else client.pick_version(ApiKey.FETCH, *cp.METADATA_FETCH)
        self.image = MetadataImage()
        self.records: list[tuple[int, Any]] = []
        self.next_offset = 0
        self.high_watermark = 0
        self.snapshot_end = 0  # > 0: records below it came as a snapshot (not in .records)

    def fetch_request(self, max_wait_ms: int, max_bytes: int = 8 << 20) -> Any:
        return cp.metadata_fetch(self.version, fetch_offset=self.next_offset, max_wait_ms=max_wait_ms,
                                 max_bytes=max_bytes)

    async def fetch_once(self, max_wait_ms: int = 0) -> int:
        """One Fetch; replays what came back; returns how many records."""
        resp = await self.client.request(self.fetch_request(max_wait_ms))
        if resp.error_code != ErrorCode.none:
            raise RuntimeError(f"Fetch failed: {resp.error_code.name}")
        part = resp.responses[0].partitions[0]
        if part.error_code != ErrorCode.none:
            raise RuntimeError(f"Fetch of __cluster_metadata-0 failed: {part.error_code.name}")
        self.high_watermark = part.high_watermark
        count = 0
        snap = getattr(part, "snapshot_id", None)
        if snap is not None and snap.end_offset > self.next_offset:
            # behind the leader's log start: load its snapshot, go on from its end
            blob = await fetch_snapshot(self.client, (snap.end_offset, snap.epoch))
            self.image, end, _ = snapshot_format.decode(blob)
            self.next_offset = end
            self.snapshot_end = end
            return end
        if part.records:
            for header, recs in decode_batches(bytes(part.records)):
                for i, rec in enumerate(recs):
                    offset = header.base_offset + i
                    if offset < self.next_offset:
                        continue
                    self.image.replay(rec, offset)
                    self.records.append((offset, rec))
                    self.next_offset = offset + 1
                    count += 1
        return count

    async def catch_up(self, timeout_s: float = 10.0) -> int:
        """Fetch until next_offset reaches the high watermark seen; returns records read."""
        total = 0
        deadline = time.monotonic() + timeout_s
        while True:
            total += await self.fetch_once(0)
            if self.next_offset >= self.high_watermark:
                return total
            if time.monotonic() > deadline:
                raise TimeoutError(f"metadata fetch stuck at {self.next_offset} < {self.high_watermark}")
