"""All partition logs of a broker across its log dirs (Kafka's LogManager), with the one
failure path for every OSError on a dir (the dir goes offline, reported once).

Start-up (as the broker runtime does it)::

    dirs = load_log_dirs(cfg.log_dirs, cfg.metadata_log_dir, cfg.node_id, random.SystemRandom(),
                         cluster_id=cfg.cluster_id or None)            # LogDirStartupError → exit 1
    lm = LogManager.open(dirs, LogConfig.from_server_config(cfg),
                         on_failure=failure_callback_by_id(dirs, report),  # report(DirFailure)
                         now_ms=clock.monotonic_ms)

``on_failure(dir_path, errno, op)`` fires once per dir, synchronously in the thread that hit
the error; ``failure_callback_by_id`` (both in :mod:`.failure`) maps the path to the dir id
at the storage edge, so nothing above storage looks at paths. The operation that failed
raises :class:`KafkaStorageError` (answer KAFKA_STORAGE_ERROR); after that every operation on
the dir fails at once without touching the disk.

Calls::

    lm.get_or_create_log(topic_id, topic, partition, dir_path=None, *, dir_id=None) -> PartitionLog
        existing log wins (wherever it is); else create in ``dir_path`` (must be an online data
        dir) or, when None, in the least-loaded online dir, falling through to the next dir if
        creation fails. Never re-creates a partition that was in an offline dir with the same
        topic id (KAFKA-16234); a new topic id may be created elsewhere (KAFKA-16157).
    lm.get_log(topic, partition) / lm.logs_in(dir_path) / lm.all_logs()
    lm.existing_logs() -> [(topic, partition, topic_id, dir_path, is_future)]   at start
    lm.pick_dir() -> path                  Kafka §4.4: fewest logs (current + future), ties by
                                           configured order
    lm.mark_offline(dir_path) -> [(topic, partition, topic_id)]   close and forget its logs
    lm.mark_dir_offline(dir_id)            the same by directory id (the core's MarkDirOffline)
    lm.delete_log(topic, partition, dir_id=None) -> renamed path   ``…-delete`` (then
    lm.remove_deleted(path))               removed by the caller, on the dir's worker)
    lm.create_future_log(topic_id, topic, partition, dir_path), lm.future_log(topic, partition),
    lm.replace_current_with_future(topic, partition), lm.delete_future_log(topic, partition)
    lm.flush_all(), lm.maybe_flush_all(now_ms, only_dir=None)
    lm.checkpoint_high_watermarks(only_dir=None), lm.checkpoint_recovery_points(only_dir=None)
                                           -> failed dir paths (only_dir: one dir's round)
    lm.probe_targets()                     the dirs to probe: log.dirs AND a separate
                                           metadata.log.dir (its failure must halt the broker)
    lm.probe_dir(dir_path), lm.probe_all() -> failed dir paths
    lm.close()                             flush, checkpoints, clean-shutdown marker
    lm.online_dirs(), lm.offline_dirs(), lm.is_online(dir_path), lm.dir_set

Files per log dir (checkpoints, ``.kafka_cleanshutdown``, ``.lock``): :mod:`.log_dir_loading`.

Locking: ``_lock`` guards the tables only and is never held across disk I/O, so a hung dir
cannot stall creation or deletion in the others (the broker runs these per dir); operations
on one partition are serialised by that partition's own lock. A log created (or swapped in)
while its dir went offline is closed, not installed (KafkaStorageError).

Dirs that fail while ``open`` loads them (lock, checkpoints, segments: op ``lock``/``load``)
are reported through ``on_failure`` during ``open``: the runtime must accept callbacks
before its core exists (queue them), or read ``lm.channel.offline_dirs()`` afterwards.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Callable

from kafka_common import ids
from kafka_runtime import fsutil
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import InconsistentTopicId, KafkaStorageError, LogNotFound
from broker_impl.storage.failure import DirFailureChannel, OnFailure
from broker_impl.storage.log_config import LogConfig, partition_dir_name
from broker_impl.storage.log_dir_loading import CLEAN_SHUTDOWN_FILE, Key, LogDirLoader
from broker_impl.storage.log_moves import LogMoves
from broker_impl.storage.log_maintenance import LogMaintenance
from broker_impl.storage.partition_log import PartitionLog
from broker_impl.storage.startup import LogDirSet

log = logging.getLogger(__name__)


class LogManager:
    """The tables of logs and the dirs; three parts, each holding a reference to the manager
    as its host protocol: ``loader`` (:class:`~.log_dir_loading.LogDirLoader`: start-up, the
    dirs' locks), ``maintenance`` (:class:`~.log_maintenance.LogMaintenance`: the periodic
    work), ``moves`` (:class:`~.log_moves.LogMoves`: deletion, future replicas and their swap)."""

    def __init__(self, dir_set: LogDirSet, config: LogConfig, *, on_failure: OnFailure | None,
                 now_ms: Callable[[], int]) -> None:
        self.dir_set = dir_set
        self.config = config
        # per-topic log config (segment size/age, retention); the runtime sets it from the
        # topic configs of its metadata image; None = ``config`` for every topic
        self.config_for: Callable[[str], LogConfig] | None = None
        self.channel = DirFailureChannel(on_failure)
        self._now_ms = now_ms
        self._lock = threading.RLock()                       # the tables; no disk I/O under it
        self._key_locks: dict[Key, threading.Lock] = {}     # one partition's create/delete
        self._data_dirs = [d.path for d in dir_set.data_dirs]
        self._logs: dict[Key, PartitionLog] = {}
        self._futures: dict[Key, PartitionLog] = {}
        # a partition's other current logs found at start-up, with another topic id than the
        # one in ``_logs`` (a deleted and re-created topic): strays-to-be, until the replica
        # manager names which one the metadata claims (``delete_log`` with its dir)
        self._doubles: dict[Key, list[PartitionLog]] = {}
        self._offline_partitions: dict[Key, tuple[str, uuid.UUID | None]] = {}
        self.loader = LogDirLoader(self)
        self.maintenance = LogMaintenance(self)
        self.moves = LogMoves(self)
        for info in dir_set.dirs:
            if not info.online:
                self.channel.mark_offline_at_start(info.path)

    @classmethod
    def open(cls, dir_set: LogDirSet, config: LogConfig, *, on_failure: OnFailure | None,
             now_ms: Callable[[], int]) -> "LogManager":
        """Load (and recover) every partition log in the online data dirs. A dir whose load
        hits an OSError goes offline through the failure channel; the others load."""
        lm = cls(dir_set, config, on_failure=on_failure, now_ms=now_ms)
        for path in lm.online_dirs():
            try:
                lm.loader.lock_dir(path)
                lm.loader.load_dir(path)
            except KafkaStorageError as exc:
                log.error("log dir %s failed while loading logs: %s", path, exc)
                lm.mark_offline(path)   # its logs dropped and closed, its .lock released
        return lm

    def _config(self, topic: str) -> LogConfig:
        return self.config if self.config_for is None else self.config_for(topic)

    # ---- dirs ----------------------------------------------------------------------------
    def online_dirs(self) -> list[str]:
        return [p for p in self._data_dirs if not self.channel.is_offline(p)]

    def offline_dirs(self) -> list[str]:
        return [p for p in self._data_dirs if self.channel.is_offline(p)]

    def is_online(self, dir_path: str) -> bool:
        return os.path.abspath(dir_path) in self._data_dirs and not self.channel.is_offline(os.path.abspath(dir_path))

    def dir_id_of(self, dir_path: str) -> uuid.UUID | None:
        return self.dir_set.id_of(dir_path)

    def path_of(self, dir_id: uuid.UUID) -> str | None:
        return self.dir_set.path_of(dir_id)

    def _path_of_id(self, dir_id: uuid.UUID) -> str:
        path = self.path_of(dir_id)
        if path is None:
            raise LogNotFound(f"no log dir with directory id {ids.to_base64(dir_id)}")
        return path

    def pick_dir(self) -> str:
        """Least-loaded online dir: fewest logs (current + future), ties in configured order."""
        with self._lock:
            candidates = self._ordered_candidates()
            if not candidates:
                raise KafkaStorageError(",".join(self._data_dirs), None, "create_log", "no online log dir")
            return candidates[0]

    def _ordered_candidates(self) -> list[str]:
        counts = {p: 0 for p in self.online_dirs()}
        for plog in (*self._logs.values(), *self._futures.values()):
            if plog.log_dir in counts:
                counts[plog.log_dir] += 1
        order = {p: i for i, p in enumerate(self._data_dirs)}
        return sorted(counts, key=lambda p: (counts[p], order[p]))

    def mark_dir_offline(self, dir_id: uuid.UUID) -> list[tuple[str, int, uuid.UUID | None]]:
        """:meth:`mark_offline` by directory id; an unknown id is a no-op."""
        path = self.path_of(dir_id)
        return [] if path is None else self.mark_offline(path)

    def mark_offline(self, dir_path: str) -> list[tuple[str, int, uuid.UUID | None]]:
        """Take ``dir_path`` offline (idempotent, no callback): close its logs (no flush), drop
        them and their checkpoints; returns the (topic, partition, topic_id) that were there."""
        gone, dropped = self.forget_offline(dir_path)
        for plog in dropped:
            plog.close()
        return gone

    def forget_offline(self, dir_path: str) -> tuple[list[tuple[str, int, uuid.UUID | None]], list[PartitionLog]]:
        """:meth:`mark_offline` without closing: the dir is offline and its logs are out of
        the tables at once; returns (what :meth:`mark_offline` returns, the logs to close).
        Closing waits for a log's lock, which an append stuck in a hung dir holds: the
        caller closes them where waiting is harmless (the runtime: on the dir's own worker)."""
        dir_path = os.path.abspath(dir_path)
        with self._lock:
            if not self.channel.is_offline(dir_path):
                self.channel.mark_offline_at_start(dir_path)
            self.loader.release(dir_path)
            return self._drop_dir(dir_path)

    def _drop_dir(self, dir_path: str) -> tuple[list[tuple[str, int, uuid.UUID | None]], list[PartitionLog]]:
        gone, dropped = [], []
        with self._lock:
            for table in (self._logs, self._futures):
                for key, plog in list(table.items()):
                    if plog.log_dir == dir_path:
                        dropped.append(plog)
                        del table[key]
                        if table is self._logs:
                            self._offline_partitions[key] = (dir_path, plog.topic_id)
                            gone.append((key[0], key[1], plog.topic_id))
                            doubles = self._doubles.get(key)
                            if doubles:
                                self._logs[key] = doubles.pop(0)
            for key, doubles in list(self._doubles.items()):
                for plog in [d for d in doubles if d.log_dir == dir_path]:
                    doubles.remove(plog)
                    dropped.append(plog)
                if not doubles:
                    del self._doubles[key]
        return gone, dropped

    def _key_lock(self, key: Key) -> threading.Lock:
        with self._lock:
            lock = self._key_locks.get(key)
            if lock is None:
                lock = self._key_locks[key] = threading.Lock()
            return lock

    def _install(self, table: dict[Key, PartitionLog], key: Key, plog: PartitionLog,
                 op: str = "create_log") -> PartitionLog | None:
        """Put a log made outside the table lock into ``table`` and return the one it replaces,
        unless its dir went offline meanwhile (then it is closed and ``op`` fails like any
        I/O there)."""
        with self._lock:
            if not self.channel.is_offline(plog.log_dir):
                old = table.get(key)
                table[key] = plog
                if table is self._logs:
                    self._offline_partitions.pop(key, None)
                return old
        plog.close()
        raise KafkaStorageError(plog.log_dir, None, op,
                                f"{plog.topic}-{plog.partition}: {plog.log_dir} went offline during {op}")

    # ---- logs ----------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def future_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def logs_in(self, dir_path: str, *, include_future: bool = False) -> list[PartitionLog]:
        dir_path = os.path.abspath(dir_path)
        logs = [l for l in list(self._logs.values()) if l.log_dir == dir_path]  # a snapshot: other threads add
        if include_future:
            logs += [l for l in list(self._futures.values()) if l.log_dir == dir_path]
        return logs

    def existing_logs(self) -> list[tuple[str, int, uuid.UUID | None, str, bool]]:
        """Every loaded log as (topic, partition, topic_id, dir path, is_future) — what the
        replica manager needs at start (map the path with ``dir_id_of``)."""
        doubles = [d for ds in list(self._doubles.values()) for d in ds]
        return [(l.topic, l.partition, l.topic_id, l.log_dir, fut)
                for fut, logs in ((False, [*self._logs.values(), *doubles]), (True, list(self._futures.values())))
                for l in logs]

    def offline_partition(self, topic: str, partition: int) -> tuple[str, uuid.UUID | None] | None:
        """(dir path, topic id) if the partition's log was in a dir that went offline."""
        return self._offline_partitions.get((topic, partition))

    def get_or_create_log(self, topic_id: uuid.UUID | None, topic: str, partition: int,
                          dir_path: str | None = None, *, dir_id: uuid.UUID | None = None) -> PartitionLog:
        key = (topic, partition)
        if dir_id is not None:
            dir_path = self._path_of_id(dir_id)
        with self._key_lock(key):
            with self._lock:
                existing = self._logs.get(key)
                offline = self._offline_partitions.get(key)
                if existing is None:
                    candidates = [self._require_data_dir(dir_path)] if dir_path else self._ordered_candidates()
            if existing is not None:
                self._check_topic_id(existing, topic_id)
                return existing
            if offline is not None and (topic_id is None or offline[1] is None or offline[1] == topic_id):
                raise KafkaStorageError(offline[0], None, "create_log",
                                        f"{topic}-{partition} is in offline log dir {offline[0]}")
            if not candidates:
                raise KafkaStorageError(",".join(self._data_dirs), None, "create_log",
                                        f"no online log dir for {topic}-{partition}")
            errors = []
            for path in candidates:
                try:
                    plog = self._create_or_attach(path, partition_dir_name(topic, partition), topic, partition,
                                                  topic_id)
                    self._install(self._logs, key, plog)
                except KafkaStorageError as exc:
                    errors.append(exc)
                    continue
                return plog
            if len(errors) == 1:
                raise errors[0]
            raise KafkaStorageError(",".join(candidates), errors[-1].errno, "create_log",
                                    f"no log directories available for {topic}-{partition}: tried "
                                    + ", ".join(candidates))

    def _require_data_dir(self, dir_path: str) -> str:
        path = os.path.abspath(dir_path)
        if path not in self._data_dirs:
            raise LogNotFound(f"{dir_path} is not one of log.dirs")
        return path

    def _create_or_attach(self, path: str, name: str, topic: str, partition: int,
                          topic_id: uuid.UUID | None) -> PartitionLog:
        with self.channel.io(path, "create_log"):
            exists = os.path.isdir(os.path.join(path, name))
        if not exists:
            return PartitionLog.create(path, topic, partition, topic_id, self._config(topic), self.channel, self._now_ms,
                                       dir_name=name)
        plog = PartitionLog.load(path, name, self._config(topic), self.channel, self._now_ms, recovery_point=0,
                                 high_watermark=0, clean_shutdown=False)
        try:
            self._check_topic_id(plog, topic_id)
        except Exception:
            plog.close()
            raise
        return plog

    def _check_topic_id(self, plog: PartitionLog, topic_id: uuid.UUID | None) -> None:
        if topic_id is None:
            return
        if plog.topic_id is None:
            with self.channel.io(plog.log_dir, "partition_metadata"):
                ckpt.write_partition_metadata(os.path.join(plog.path, ckpt.PARTITION_METADATA), topic_id)
            plog.topic_id = topic_id
        elif plog.topic_id != topic_id:
            raise InconsistentTopicId(f"{plog.path} has topic id {ids.to_base64(plog.topic_id)}, "
                                      f"metadata says {ids.to_base64(topic_id)}")

    # ---- the parts' calls: deletion and future replicas (LogMoves), periodic work (LogMaintenance)
    def delete_log(self, topic: str, partition: int, *, dir_id: uuid.UUID | None = None) -> str:
        return self.moves.delete_log(topic, partition, dir_id=dir_id)

    def remove_deleted(self, path: str) -> None:
        self.moves.remove_deleted(path)

    def create_future_log(self, topic_id: uuid.UUID | None, topic: str, partition: int, dir_path: str | None = None,
                          *, dir_id: uuid.UUID | None = None) -> PartitionLog:
        return self.moves.create_future_log(topic_id, topic, partition, dir_path, dir_id=dir_id)

    def delete_future_log(self, topic: str, partition: int) -> None:
        self.moves.delete_future_log(topic, partition)

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        return self.moves.replace_current_with_future(topic, partition)

    def flush_all(self) -> list[str]:
        return self.maintenance.flush_all()

    def maybe_flush_all(self, now_ms: int, *, only_dir: str | None = None) -> list[str]:
        return self.maintenance.maybe_flush_all(now_ms, only_dir=only_dir)

    def checkpoint_high_watermarks(self, *, only_dir: str | None = None) -> list[str]:
        return self.maintenance.checkpoint_high_watermarks(only_dir=only_dir)

    def checkpoint_recovery_points(self, *, only_dir: str | None = None) -> list[str]:
        return self.maintenance.checkpoint_recovery_points(only_dir=only_dir)

    def enforce_retention(self, wall_ms: int, *, only_dir: str, max_segments: int) -> tuple[int, list[str]]:
        return self.maintenance.enforce_retention(wall_ms, only_dir=only_dir, max_segments=max_segments)

    def refresh_configs(self) -> None:
        self.maintenance.refresh_configs()

    def probe_dir(self, dir_path: str) -> None:
        self.maintenance.probe_dir(dir_path)

    def probe_targets(self) -> list[str]:
        return self.maintenance.probe_targets()

    def probe_all(self) -> list[str]:
        return self.maintenance.probe_all()

    def release_locks(self) -> None:
        """Give up every dir's ``.lock`` (the loader's)."""
        self.loader.release_locks()

    def close(self) -> None:
        """Clean shutdown: flush every log, write both checkpoints, then the clean-shutdown
        marker in each dir where all of that succeeded; close every file."""
        with self._lock:
            failed = set(self.flush_all())
            failed |= set(self.checkpoint_recovery_points()) | set(self.checkpoint_high_watermarks())
            for path in self.online_dirs():
                if path in failed:
                    continue
                try:
                    with self.channel.io(path, "checkpoint"):
                        fsutil.atomic_write(os.path.join(path, CLEAN_SHUTDOWN_FILE), b'{"version":0}\n')
                except KafkaStorageError:
                    pass
            for plog in [*self._logs.values(), *self._futures.values(), *(d for ds in self._doubles.values() for d in ds)]:
                plog.close()
            self.release_locks()
