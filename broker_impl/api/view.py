"""What the client-facing handlers need from the broker: a narrow, explicit protocol.

The handlers (:mod:`broker_impl.api.handlers`) read and act only through these protocols;
the runtime (``broker_impl.runtime``) implements them over its metadata image, its
partition logs, its log-dir state, its controller channel and its dir mover.

``BrokerView``
    ``node_id``, ``cluster_id``, ``listener_name`` (the listener whose endpoints Metadata
    returns), ``image`` (a :class:`MetadataImageLike`, replayed by the runtime),
    ``min_insync_replicas(topic_id)`` and ``topic_config(topic_id, name)`` (the topic's
    configs in force, from the image's ConfigRecords and ``static_config``: this broker's
    server.properties), ``auto_create_topics`` / ``num_partitions`` /
    ``default_replication_factor`` (Metadata auto-create), ``local_replica(topic_id, p)``
    (the hosted current log or ``None``), ``is_partition_offline(topic_id, p)`` (its dir is
    offline → KAFKA_STORAGE_ERROR), ``log_dirs()`` (DescribeLogDirs / AlterReplicaLogDirs),
    ``on_leader_append(topic_id, p)`` / ``on_follower_fetch(topic_id, p, replica_id,
    fetch_offset, last_fetched_epoch)`` (progress: the view updates the follower's LEO, the
    ISR bookkeeping and the high watermark — only for a valid position, see
    :mod:`broker_impl.state.fetch_position` — then returns), ``controller`` (a
    :class:`ControllerChannel`) and ``mover`` (a :class:`ReplicaMover`).

``LocalReplica``
    One partition log hosted here — ``broker_impl.storage.partition_log.PartitionLog``
    satisfies it as is. ``append_as_leader(records, leader_epoch) -> (base, last)``
    validates the v2 batches (CRC-32C), assigns offsets from the LEO (rewriting each
    batch's baseOffset in place) and stamps the leader epoch; it also checks idempotent
    producers' sequences against the partition's producer state (a known producer's retried
    batch → its original offsets, nothing appended; ``error_code`` 45/47 when refused);
    ``read`` returns whole batches.
    Errors: an exception in ``BrokerView.storage_exceptions`` (or a plain ``OSError``)
    means the dir failed → KAFKA_STORAGE_ERROR (the storage layer's failure channel is the
    one inlet that reports the dir; the handlers only answer); any other
    exception carrying an integer ``error_code`` (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
    OFFSET_OUT_OF_RANGE, …) is answered with that code. ``offset_for_timestamp(ts) ->
    int | None`` (base offset of the first batch whose max timestamp is ≥ ts) is optional:
    without it ListOffsets by timestamp scans batch headers through ``read``.

Blocking I/O never runs on the event loop: the handlers call every replica operation that
may touch the disk (``append_as_leader``, ``read``, ``offset_for_timestamp``,
``end_offset_for_epoch``) through ``await BrokerView.replica_io(replica, fn, *args)``, which
the broker runtime runs on the replica's log-dir worker thread (``broker_impl.runtime.dir_io``;
a slow or hung dir stalls only its own partitions) and a test view may run inline. Plain
offset properties (``log_start_offset``, ``log_end_offset``, ``high_watermark``) are read
on the loop without I/O or locks. Produce holds ``partition_lock(topic, p)`` across its
sequence check → append → producer-state record, so one partition's appends keep request
order across connections (responses on one connection stay in request order: the server
answers a connection's requests one after the other).

After every leader append the handlers call ``BrokerView.on_leader_append`` and after a
follower fetch ``on_follower_fetch``: the runtime moves the high watermark (min LEO of the
ISR) there.

Wake-ups: the handlers wake their own waiters after a leader append and after
``on_follower_fetch``; the runtime calls ``BrokerApi.notify_partition(topic_id, p)`` on
every other change that can complete a delayed produce or a long-polling fetch (ISR
shrink, leadership change, high watermark moved by anything else).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from kafka_common.metadata.model import BrokerRegistration, PartitionRegistration, TopicRegistration


@dataclass(frozen=True, slots=True)
class ReplicaDirEntry:
    """One log in a dir, for DescribeLogDirs."""
    topic_name: str
    partition: int
    size_bytes: int
    offset_lag: int  # current log: HW - LEO lag as Kafka (max(0, HW - LEO)); future log: current LEO - future LEO
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    path: str
    directory_id: uuid.UUID
    online: bool
    replicas: tuple[ReplicaDirEntry, ...] = ()
    total_bytes: int = -1
    usable_bytes: int = -1
    is_cordoned: bool = False  # KIP-1066 (DescribeLogDirs v5)


class MetadataImageLike(Protocol):
    """The subset of ``kafka_common.metadata.image.MetadataImage`` the handlers read."""
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[uuid.UUID, TopicRegistration]
    topic_ids: Mapping[str, uuid.UUID]

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None: ...

    def partitions_of(self, topic_id: uuid.UUID) -> Mapping[int, PartitionRegistration]: ...


class LocalReplica(Protocol):
    log_dir: str   # the log dir it lives in (reads are grouped per dir, one job per dir worker)

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of the newest epoch at or before ``epoch``; (-1, -1) if none.
        Lock-free and without I/O."""
        ...

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> tuple[int, int]:
        """Validate and append v2 batches; offsets from the LEO; (first offset, last offset)."""
        ...

    def read(self, offset: int, max_bytes: int, upper_offset: int | None = None, min_one: bool = True) -> bytes:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` (the first
        whole if ``min_one``), stopping before a batch whose base offset is ≥ ``upper_offset``."""
        ...

    def read_tail(self, offset: int, max_bytes: int, upper_offset: int | None = None,
                  min_one: bool = True) -> bytes | None:
        """``read`` from the newest batches kept in memory, without a lock or I/O (on the
        loop); None when ``offset`` is not among them."""
        ...


class ControllerChannel(Protocol):
    async def create_topics(self, request: Any) -> Any:
        """Forward a kio ``CreateTopicsRequest`` (any version 2..7) to the active controller;
        return the controller's ``CreateTopicsResponse`` of the same version. Raise
        ``ConnectionError``/``TimeoutError`` when no controller answers."""
        ...

    async def alter_configs(self, request: Any) -> Any:
        """The same for an ``AlterConfigsRequest`` or ``IncrementalAlterConfigsRequest``."""
        ...

    async def forward(self, request: Any) -> Any:
        """The same for any other request the controller serves for clients (DeleteTopics,
        CreatePartitions, ElectLeaders, Alter/ListPartitionReassignments): sent as it is, the
        controller's answer returned."""
        ...


class ReplicaMover(Protocol):
    async def alter_replica_log_dir(self, topic_id: uuid.UUID, partition: int, target_dir: uuid.UUID) -> int:
        """Start moving the local replica to ``target_dir`` (a future log there, swapped in once caught up); return a Kafka
        error code (0 = accepted; REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, …)."""
        ...


class BrokerView(Protocol):
    node_id: int
    cluster_id: str
    listener_name: str
    image: MetadataImageLike
    auto_create_topics: bool
    num_partitions: int
    default_replication_factor: int
    controller: ControllerChannel
    mover: ReplicaMover
    storage_exceptions: tuple[type[BaseException], ...]

    static_config: Any  # kafka_common.topic_config.StaticBrokerConfig (server.properties)

    def min_insync_replicas(self, topic_id: uuid.UUID) -> int: ...

    def topic_config(self, topic_id: uuid.UUID, name: str) -> Any:
        """The typed value in force of topic config ``name`` (kafka_common.topic_config)."""
        ...

    def local_replica(self, topic_id: uuid.UUID, partition: int) -> LocalReplica | None: ...

    def is_partition_offline(self, topic_id: uuid.UUID, partition: int) -> bool: ...

    def log_dirs(self) -> list[LogDirInfo]: ...

    def on_leader_append(self, topic_id: uuid.UUID, partition: int) -> None: ...

    def on_follower_fetch(self, topic_id: uuid.UUID, partition: int, replica_id: int,
                          fetch_offset: int, last_fetched_epoch: int) -> None: ...

    async def replica_io(self, replica: LocalReplica, fn: Any, *args: Any) -> Any:
        """Run the blocking replica operation ``fn(*args)`` off the event loop (on the
        replica's log-dir worker); exceptions are re-raised to the caller."""
        ...

    def partition_lock(self, topic: str, partition: int) -> Any:
        """The ``asyncio.Lock`` serialising appends of one partition."""
        ...

