"""A single-process broker for the data-plane tests, built from the project's real parts.

- ``kafka_runtime.server.KafkaServer`` on loopback serves :class:`BrokerApi`;
- the :class:`MetadataImage` is replayed from real metadata records, encoded into real v2
  batches and decoded again (``kafka_common.metadata.batches``);
- partition logs are ``broker_impl.storage`` ``PartitionLog``s in formatted temp dirs
  (``meta.properties``, ``load_log_dirs``, ``LogManager``);
- the controller channel is served in-process by the real pure controller
  (``controller_impl.state.ControllerState``): brokers register and get unfenced through
  it and CreateTopics returns its records (replayed into the image) and response.

The view is ``broker_impl.api.storage_view.LogManagerView`` with logs created on first use
(the runtime creates them from metadata changes instead).
"""

from __future__ import annotations

import os
import random
import uuid
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker_impl.api.entities import NO_THROTTLE, build, response_type
from broker_impl.api.handlers import BrokerApi
from broker_impl.api.storage_view import LogManagerView
from broker_impl.groups.coordinator_config import CoordinatorConfig
from broker_impl.groups.state.group import GroupConfig
from broker_impl.storage.log_manager import LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.startup import load_log_dirs
from controller_impl.state.controller import ControllerState
from kafka_common import ids, wire
from kafka_common import meta_properties as mp
from kafka_common.clock import ManualClock
from kafka_common.metadata.batches import decode_batches, encode_batch
from kafka_common.metadata.image import MetadataImage
from kafka_runtime import fsutil
from kafka_runtime.server import KafkaServer

CLUSTER_ID = ids.to_base64(uuid.UUID(int=0x5EED_0000_0000_0000_0000_0000_0000_0001))


class MetadataFeed:
    """Appends records the way the metadata log does: v2 batch bytes, decoded, replayed."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.next_offset = 0
        self.on_changes: Any = None  # the runtime's reaction to an applied batch

    def append(self, *records: Any) -> None:
        data = encode_batch(self.next_offset, list(records), timestamp_ms=0)
        for header, decoded in decode_batches(data):
            for i, rec in enumerate(decoded):
                self.image.replay(rec, header.base_offset + i)
            self.next_offset = header.base_offset + len(decoded)
        changes = self.image.drain_changes()
        if self.on_changes is not None:
            self.on_changes(changes)


class PureControllerChannel:
    """The controller channel served in-process by the real pure controller
    (``controller_impl.state.ControllerState``): records → metadata feed → response."""

    def __init__(self, feed: MetadataFeed, rng: random.Random, clock: ManualClock) -> None:
        self.feed = feed
        self.clock = clock
        self.state = ControllerState(feed.image, SimpleNamespace(
            cluster_id=CLUSTER_ID, broker_session_timeout_ms=9000, num_partitions=1, default_replication_factor=1,
            authorizer_enabled=False, super_users=frozenset()), clock.monotonic_ms, rng=rng)
        self.requests: list[Any] = []

    def _apply(self, result: Any) -> Any:
        if result.records:
            self.feed.append(*result.records)
        return result.response

    async def create_topics(self, request: Any) -> Any:
        self.requests.append(request)
        return self._apply(self.state.handle_create_topics(request, self.clock.monotonic_ms()))

    async def alter_configs(self, request: Any) -> Any:
        self.requests.append(request)
        handler = self.state.handle_alter_configs if int(request.__api_key__) == 33 \
            else self.state.handle_incremental_alter_configs
        return self._apply(handler(request, self.clock.monotonic_ms()))

    async def forward(self, request: Any) -> Any:
        self.requests.append(request)
        handler = {20: self.state.handle_delete_topics, 37: self.state.handle_create_partitions,
                   43: self.state.handle_elect_leaders, 45: self.state.handle_alter_partition_reassignments,
                   46: self.state.handle_list_partition_reassignments}[int(request.__api_key__)]
        return self._apply(handler(request, self.clock.monotonic_ms()))

    def register_and_unfence(self, broker_id: int, port: int, dir_ids: list[uuid.UUID], rng: random.Random) -> None:
        reg_mod = wire.request_module(62, 3)
        resp = self._apply(self.state.handle_broker_registration(wire.request_class(62, 3)(
            broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=ids.random_uuid(rng),
            listeners=(reg_mod.Listener(name="PLAINTEXT", host="127.0.0.1", port=port, security_protocol=0),),
            features=(), rack=None, is_migrating_zk_broker=False, log_dirs=tuple(dir_ids), previous_broker_epoch=-1),
            self.clock.monotonic_ms()))
        assert resp.error_code is ErrorCode.none, resp
        hb = self._apply(self.state.handle_broker_heartbeat(wire.request_class(63, 1)(
            broker_id=broker_id, broker_epoch=resp.broker_epoch, current_metadata_offset=self.feed.next_offset - 1,
            want_fence=False, want_shut_down=False, offline_log_dirs=()), self.clock.monotonic_ms()))
        assert hb.error_code is ErrorCode.none and not self.feed.image.brokers[broker_id].fenced, hb


class RecordingMover:
    def __init__(self) -> None:
        self.calls: list[tuple[uuid.UUID, int, uuid.UUID]] = []
        self.answer = 0

    async def alter_replica_log_dir(self, topic_id: uuid.UUID, partition: int, target_dir: uuid.UUID) -> int:
        self.calls.append((topic_id, partition, target_dir))
        return self.answer


def format_dir(path: str, node_id: int, rng: random.Random) -> uuid.UUID:
    os.makedirs(path, exist_ok=True)
    dir_id = ids.random_directory_id(rng)
    fsutil.atomic_write(os.path.join(path, mp.FILE_NAME), mp.render(
        mp.MetaProperties(node_id=node_id, cluster_id=CLUSTER_ID, directory_id=dir_id)).encode())
    return dir_id


class Broker:
    """One broker on loopback; ``peers`` are other registered broker ids (followers whose
    Fetch requests the tests send themselves)."""

    def __init__(self, tmp_path: Any, *, node_id: int = 1, seed: int = 7, n_dirs: int = 1,
                 peers: tuple[int, ...] = ()) -> None:
        self.rng = random.Random(seed)
        self.node_id = node_id
        self.peers = peers
        self.failures: list[tuple[str, int, str]] = []
        self.server_log: list[str] = []  # the listener's event lines (bad_request, handler_error)
        paths = [str(tmp_path / f"logs{i}") for i in range(n_dirs)]
        for p in paths:
            format_dir(p, node_id, self.rng)
        dir_set = load_log_dirs(paths, paths[0], node_id, self.rng, CLUSTER_ID)
        self.clock = ManualClock()
        self.lm = LogManager.open(dir_set, LogConfig(), on_failure=lambda *a: self.failures.append(a),
                                  now_ms=self.clock.monotonic_ms)
        self.image = MetadataImage()
        self.feed = MetadataFeed(self.image)
        self.controller = PureControllerChannel(self.feed, self.rng, self.clock)
        self.mover = RecordingMover()
        self.view = LogManagerView(node_id=node_id, cluster_id=CLUSTER_ID, listener_name="PLAINTEXT",
                                   image=self.image, log_manager=self.lm, controller=self.controller,
                                   mover=self.mover, now_ms=self.clock.monotonic_ms, create_logs_on_demand=True)
        # one broker: __consumer_offsets with RF 1, few partitions, no initial rebalance delay
        self.api = BrokerApi(self.view, producer_id_base=node_id << 32, group_config=CoordinatorConfig(
            offsets_partitions=3, offsets_replication_factor=1,
            groups=GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000)))
        self.feed.on_changes = self._on_changes
        self.server = KafkaServer(self.api, host="127.0.0.1", port=0, listener_name="PLAINTEXT",
                                  log=self.server_log.append)
        self.loop: Any = None

    def _on_changes(self, changes: Any) -> None:
        """What the runtime does after applying metadata: HW may move (ISR shrank), then
        waiters of the changed partitions re-check."""
        for topic_id, partition in changes.partitions:
            self.view.refresh_high_watermark(topic_id, partition)
        self.api.on_image_changes(changes)

    @property
    def dir_ids(self) -> list[uuid.UUID]:
        return [d.directory_id for d in self.lm.dir_set.data_dirs]

    async def start(self) -> None:
        await self.server.start()
        for b in (self.node_id, *self.peers):
            own = b == self.node_id
            self.controller.register_and_unfence(b, self.server.port if own else 1,
                                                 self.dir_ids if own else [ids.random_directory_id(self.rng)], self.rng)

    async def stop(self) -> None:
        await self.server.stop()
        self.lm.close()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def create_topic(self, name: str, partitions: int = 1, replicas: tuple[int, ...] | None = None) -> uuid.UUID:
        req_cls = wire.request_class(19, 7)
        mod = wire.request_module(19, 7)
        assignments = tuple(mod.CreatableReplicaAssignment(partition_index=i, broker_ids=replicas)
                            for i in range(partitions)) if replicas else ()
        await self.controller.create_topics(req_cls(topics=(mod.CreatableTopic(
            name=name, num_partitions=-1 if replicas else partitions, replication_factor=-1 if replicas else 1,
            assignments=assignments, configs=()),)))
        return self.image.topic_ids[name]
