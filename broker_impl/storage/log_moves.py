"""A partition's log moving out of its place: to a future replica in another dir of the broker
(AlterReplicaLogDirs, Kafka's ``-future`` logs: created, copied into by the mover, swapped in
for the current log or deleted), or off the broker (:meth:`LogMoves.delete_log`, Kafka's
``asyncDelete``, in two halves). A part of :class:`broker_impl.storage.log_manager.LogManager`
(its ``moves``), holding no state of its own: the logs are the manager's tables, reached
through the :class:`MovesHost` protocol with the manager's table lock, per-partition locks and
:meth:`~broker_impl.storage.log_manager.LogManager._install` (a log made outside the table
lock goes in only while its dir is online).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from typing import Callable, Protocol

from kafka_runtime import fsutil
from broker_impl.storage.errors import KafkaStorageError, LogNotFound
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig, partition_dir_name
from broker_impl.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)
Key = tuple[str, int]


class MovesHost(Protocol):
    """The log manager as its deletions and future replicas see it."""
    channel: DirFailureChannel
    _now_ms: Callable[[], int]
    _lock: threading.RLock                  # the tables; no disk I/O under it
    _logs: dict[Key, PartitionLog]
    _futures: dict[Key, PartitionLog]
    _doubles: dict[Key, list[PartitionLog]]   # a partition's other incarnations (strays-to-be)

    def _config(self, topic: str) -> LogConfig: ...
    def _key_lock(self, key: Key) -> threading.Lock: ...
    def _path_of_id(self, dir_id: uuid.UUID) -> str: ...
    def path_of(self, dir_id: uuid.UUID) -> str | None: ...
    def _require_data_dir(self, dir_path: str) -> str: ...

    def _install(self, table: dict[Key, PartitionLog], key: Key, plog: PartitionLog,
                 op: str = "create_log") -> PartitionLog | None: ...


class LogMoves:
    __slots__ = ("host",)

    def __init__(self, host: MovesHost) -> None:
        self.host = host

    def create_future_log(self, topic_id: uuid.UUID | None, topic: str, partition: int, dir_path: str | None = None,
                          *, dir_id: uuid.UUID | None = None) -> PartitionLog:
        lm = self.host
        key = (topic, partition)
        if dir_id is not None:
            dir_path = lm._path_of_id(dir_id)
        assert dir_path is not None, "create_future_log needs a dir"
        with lm._key_lock(key):
            with lm._lock:
                existing = lm._futures.get(key)
                current = lm._logs.get(key)
            if existing is not None:
                return existing
            path = lm._require_data_dir(dir_path)
            if current is not None and current.log_dir == path:
                raise ValueError(f"{topic}-{partition} already lives in {path}")
            name = f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}-future"
            plog = PartitionLog.create(path, topic, partition, topic_id, lm._config(topic), lm.channel, lm._now_ms,
                                       dir_name=name)
            lm._install(lm._futures, key, plog)
            return plog

    def delete_future_log(self, topic: str, partition: int) -> None:
        lm = self.host
        with lm._key_lock((topic, partition)):
            with lm._lock:
                plog = lm._futures.pop((topic, partition), None)
            if plog is not None:
                plog.delete()

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """Swap: the future log becomes ``<topic>-<p>`` in its dir, the old current is deleted.
        The disk work runs outside the table lock (readers see the old current until the
        tables switch); a future dir that went offline meanwhile fails the swap."""
        lm = self.host
        key = (topic, partition)
        with lm._key_lock(key):
            with lm._lock:
                future = lm._futures.get(key)
                current = lm._logs.get(key)
            if future is None:
                raise LogNotFound(f"no future log for {topic}-{partition}")
            hw = current.high_watermark if current is not None else future.high_watermark
            try:
                future.flush()
                future.close()
                final = os.path.join(future.log_dir, partition_dir_name(topic, partition))
                with lm.channel.io(future.log_dir, "roll"):
                    os.rename(future.path, final)
                    fsutil.fsync_dir(future.log_dir)
                new = PartitionLog.load(future.log_dir, os.path.basename(final), lm._config(topic), lm.channel,
                                        lm._now_ms, recovery_point=future.log_end_offset, high_watermark=hw,
                                        clean_shutdown=True)
            finally:
                with lm._lock:    # closed (and maybe renamed): no longer a future to write to
                    if lm._futures.get(key) is future:
                        del lm._futures[key]
            old = lm._install(lm._logs, key, new, "roll")
            if old is not None:
                try:
                    old.delete()
                except KafkaStorageError as exc:  # the old dir failed: the new copy is what counts
                    log.error("could not delete the old replica of %s-%s: %s", topic, partition, exc)
            return new

    def delete_log(self, topic: str, partition: int, *, dir_id: uuid.UUID | None = None) -> str:
        """Kafka's ``asyncDelete``, its first half: close the log of ``topic``-``partition`` (the
        one in ``dir_id`` when given: a stray beside a re-created topic's log) and rename its
        dir ``<topic>-<p>.<uuid hex>-delete`` (the parent synced); returns the new path, for
        :meth:`remove_deleted`. The name is free at once for a new incarnation; a ``-delete``
        dir left by a crash is removed at the next start-up."""
        lm = self.host
        key = (topic, partition)
        path = lm.path_of(dir_id) if dir_id is not None else None
        with lm._key_lock(key):
            with lm._lock:
                plog = lm._logs.get(key)
                if plog is not None and (path is None or plog.log_dir == os.path.abspath(path)):
                    del lm._logs[key]
                    doubles = lm._doubles.get(key)
                    if doubles:   # the other incarnation's log takes the partition's place
                        lm._logs[key] = doubles.pop(0)
                else:
                    doubles = lm._doubles.get(key, [])
                    plog = next((d for d in doubles if path is not None and d.log_dir == os.path.abspath(path)), None)
                    if plog is not None:
                        doubles.remove(plog)
                if not lm._doubles.get(key):
                    lm._doubles.pop(key, None)
            if plog is None:
                raise LogNotFound(f"no log for {topic}-{partition}" + (f" in {path}" if path else ""))
            plog.close()
            new = os.path.join(plog.log_dir, f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}-delete")
            with lm.channel.io(plog.log_dir, "delete_log"):
                os.rename(plog.path, new)
                fsutil.fsync_dir(plog.log_dir)
            return new

    def remove_deleted(self, path: str) -> None:
        """The second half: remove a ``-delete`` dir and everything in it (an OSError there is
        a failure of its log dir, as any other)."""
        lm = self.host
        log_dir = os.path.dirname(os.path.abspath(path))
        with lm.channel.io(log_dir, "delete_log"):
            if os.path.lexists(path):
                shutil.rmtree(path)
