"""A ready :class:`~broker_impl.api.view.BrokerView` over ``MetadataImage`` + ``LogManager``.

The runtime can mount :class:`BrokerApi` on this view as is, or subclass it: everything
that is a plain lookup is done here; what belongs to the replica manager is exposed as
state and hooks:

- ``local_replica`` returns the hosted current log; with ``create_logs_on_demand`` it also
  creates a missing log for a partition this broker replicates (in its assigned dir, or a
  placement choice for UNASSIGNED/reserved ids) — tests and single-process setups; the
  runtime normally creates logs from metadata changes and leaves this off.
- ``is_partition_offline``: the partition's log (or its assigned dir) is in an offline dir.
- ``log_dirs``: every configured data dir with its id, online state, volume usage and its
  current and future logs (future lag = current LEO - future LEO).
- High watermark (leader): min LEO over the ISR, the leader's own LEO plus the followers'
  last fetch offsets (``follower_leo``), moved forward only, after each leader append,
  follower fetch and :meth:`refresh_high_watermark` (call it when the ISR changes).
- Follower progress for ISR management: ``follower_leo[(topic_id, p, broker)]`` and
  ``caught_up_ms[(topic_id, p, broker)]`` (last time the follower fetched at the leader's
  LEO, Kafka's lastCaughtUpTimeMs), recorded only for a valid fetch position
  (:func:`broker_impl.state.fetch_position.follower_position`).
- ``replica_io(replica, fn, *args)`` (async) runs a blocking replica operation; here inline
  (single-process tests), in the broker runtime on the replica's log-dir worker thread
  (``broker_impl.runtime.dir_io``). ``partition_lock(topic, p)``: the per-partition
  ``asyncio.Lock`` the Produce handler holds across check → append → record.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from typing import Any, Callable

from broker_impl.api.view import LogDirInfo, ReplicaDirEntry
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.log_manager import LogManager
from broker_impl.state.fetch_position import follower_position
from broker_impl.storage.partition_log import PartitionLog
from kafka_common import ids
from kafka_common import topic_config as tc
from kafka_common.config import default_text

PartitionKey = tuple[uuid.UUID, int]


class LogManagerView:
    storage_exceptions: tuple[type[BaseException], ...] = (KafkaStorageError,)

    def __init__(self, *, node_id: int, cluster_id: str, listener_name: str, image: Any, log_manager: LogManager,
                 controller: Any, mover: Any, now_ms: Callable[[], int], auto_create_topics: bool = True,
                 num_partitions: int = 1, default_replication_factor: int = 1, min_insync_replicas: int = 1,
                 create_logs_on_demand: bool = False, static_config: Any = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.listener_name = listener_name
        self.image = image
        self.lm = log_manager
        self.controller = controller
        self.mover = mover
        self.now_ms = now_ms
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        # min.insync.replicas and the other topic configs resolve through static_config
        # (server.properties) under the image's dynamic configs (kafka_common.topic_config)
        self.static_config = static_config if static_config is not None else tc.static_from_server_config(
            {"min.insync.replicas": str(min_insync_replicas)}, default_text)
        self.create_logs_on_demand = create_logs_on_demand
        self.follower_leo: dict[tuple[uuid.UUID, int, int], int] = {}
        self.caught_up_ms: dict[tuple[uuid.UUID, int, int], int] = {}
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._config_cache: dict[tuple[uuid.UUID, str], Any] = {}
        self._config_stamp: tuple | None = None   # (image.last_offset, configs, static config) of the cache

    # --- blocking replica operations -----------------------------------------------------
    async def replica_io(self, replica: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` (a blocking operation on ``replica``); inline in this view."""
        return fn(*args)

    def partition_lock(self, topic: str, partition: int) -> asyncio.Lock:
        key = (topic, partition)
        lock = self._partition_locks.get(key)
        if lock is None:
            lock = self._partition_locks[key] = asyncio.Lock()
        return lock

    # --- lookups -------------------------------------------------------------------------
    def min_insync_replicas(self, topic_id: uuid.UUID) -> int:
        return int(self.topic_config(topic_id, "min.insync.replicas"))

    def topic_config(self, topic_id: uuid.UUID, name: str) -> Any:
        """The value in force, resolved once per metadata change: Produce asks for two of
        them per partition, and resolving walks every config layer."""
        image = self.image
        configs = getattr(image, "configs", {})
        stamp = (getattr(image, "last_offset", None), id(configs), id(self.static_config))
        if stamp != self._config_stamp:
            self._config_cache = {}
            self._config_stamp = stamp
        key = (topic_id, name)
        try:
            return self._config_cache[key]
        except KeyError:
            pass
        value = tc.topic_value(self.topic_name(topic_id) or "", name, self.node_id, configs, self.static_config)
        self._config_cache[key] = value
        return value

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        reg = self.image.topics.get(topic_id)
        return reg.name if reg is not None else None

    def local_replica(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None:
        reg = self.image.partition(topic_id, partition)
        name = self.topic_name(topic_id)
        if reg is None or name is None or self.node_id not in reg.replicas:
            return None
        log = self.lm.get_log(name, partition)
        if log is not None or not self.create_logs_on_demand or self.is_partition_offline(topic_id, partition):
            return log
        dir_id = reg.directory(self.node_id)
        path = None if ids.is_reserved(dir_id) else self.lm.path_of(dir_id)
        try:
            return self.lm.get_or_create_log(topic_id, name, partition, path)
        except KafkaStorageError:
            return None

    def is_partition_offline(self, topic_id: uuid.UUID, partition: int) -> bool:
        reg = self.image.partition(topic_id, partition)
        name = self.topic_name(topic_id)
        if reg is None or name is None or self.node_id not in reg.replicas:
            return False
        if self.lm.offline_partition(name, partition) is not None:
            return True
        log = self.lm.get_log(name, partition)
        if log is not None:
            return not self.lm.is_online(log.log_dir)
        path = self.lm.path_of(reg.directory(self.node_id))
        return path is not None and not self.lm.is_online(path)

    def dir_online(self, dir_id: uuid.UUID | None, path: str) -> bool:
        """Dir status (here the log manager's; the broker runtime asks its core)."""
        return self.lm.is_online(path)

    def dir_cordoned(self, dir_id: uuid.UUID | None) -> bool:
        """KIP-1066 (the runtime's view knows ``cordoned.log.dirs``)."""
        return False

    def log_dirs(self) -> list[LogDirInfo]:
        out = []
        for d in self.lm.dir_set.data_dirs:
            online = self.dir_online(d.directory_id, d.path)
            entries = []
            if online:
                for log in self.lm.logs_in(d.path, include_future=True):
                    current = self.lm.get_log(log.topic, log.partition)
                    future = current is not log
                    if future:
                        lag = max(0, current.log_end_offset - log.log_end_offset) if current is not None else 0
                    else:
                        lag = max(0, log.high_watermark - log.log_end_offset)
                    entries.append(ReplicaDirEntry(log.topic, log.partition, log.size_bytes, lag, future))
            total = usable = -1
            if online:
                try:
                    usage = shutil.disk_usage(d.path)
                    total, usable = usage.total, usage.free
                except OSError:
                    pass
            out.append(LogDirInfo(d.path, d.directory_id or ids.ZERO_UUID, online, tuple(entries), total, usable,
                                  self.dir_cordoned(d.directory_id)))
        return out

    # --- progress ------------------------------------------------------------------------
    def refresh_high_watermark(self, topic_id: uuid.UUID, partition: int) -> bool:
        """Move the leader's HW to min LEO of the ISR (never backwards); True if it moved."""
        reg = self.image.partition(topic_id, partition)
        name = self.topic_name(topic_id)
        if reg is None or name is None or reg.leader != self.node_id:
            return False
        log = self.lm.get_log(name, partition)
        if log is None:
            return False
        leos = [log.log_end_offset if b == self.node_id else self.follower_leo.get((topic_id, partition, b), 0)
                for b in reg.isr]
        hw = min(leos) if leos else log.log_end_offset
        if hw > log.high_watermark:
            log.high_watermark = hw
            return True
        return False

    def on_leader_append(self, topic_id: uuid.UUID, partition: int) -> None:
        self.refresh_high_watermark(topic_id, partition)

    def on_follower_fetch(self, topic_id: uuid.UUID, partition: int, replica_id: int, fetch_offset: int,
                          last_fetched_epoch: int) -> None:
        name = self.topic_name(topic_id)
        log = self.lm.get_log(name, partition) if name is not None else None
        if log is None or not follower_position(log, fetch_offset, last_fetched_epoch).valid:
            return  # a divergent or out-of-range position is no progress
        key = (topic_id, partition, replica_id)
        self.follower_leo[key] = fetch_offset
        if fetch_offset >= log.log_end_offset:
            self.caught_up_ms[key] = self.now_ms()
        self.refresh_high_watermark(topic_id, partition)
