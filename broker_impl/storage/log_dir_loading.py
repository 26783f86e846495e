"""Start-up of the log manager: lock each online data dir, read its checkpoints and load (and
recover) its partition logs. A part of :class:`broker_impl.storage.log_manager.LogManager` (its
``loader``): it owns the dirs' ``.lock`` descriptors, and fills the manager's tables through the
:class:`LoadHost` protocol.

A dir that fails while it loads (lock, checkpoints, segments: op ``lock``/``load``) goes
offline through the failure channel; a dir locked by another process is a fatal
LogDirStartupError. ``.kafka_cleanshutdown`` is consumed here: present, the segments are
trusted instead of recovered.

Files per log dir: ``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` (log start offsets moved by retention or DeleteRecords),
``.kafka_cleanshutdown`` (present only between a clean close and the next open: segments are
then trusted instead of recovered), ``.lock`` (flock held while open; a second broker on the
same dir is a fatal LogDirStartupError, an unlockable read-only/failed dir goes offline).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from typing import Callable, Protocol

from kafka_common import ids
from kafka_runtime import fsutil
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import KafkaStorageError, LogDirStartupError
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig, parse_partition_dir_name
from broker_impl.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
Key = tuple[str, int]


class LoadHost(Protocol):
    """The log manager as its start-up sees it: the failure channel, the clock, the topic
    configs and the tables a loaded log goes into."""
    channel: DirFailureChannel
    _now_ms: Callable[[], int]
    _logs: dict[Key, PartitionLog]
    _futures: dict[Key, PartitionLog]
    _doubles: dict[Key, list[PartitionLog]]

    def _config(self, topic: str) -> LogConfig: ...


class LogDirLoader:
    __slots__ = ("host", "lock_fds")

    def __init__(self, host: LoadHost) -> None:
        self.host = host
        self.lock_fds: dict[str, int] = {}   # dir path -> the flock'd ``.lock`` (held while open)

    # ---- start-up ------------------------------------------------------------------------
    def lock_dir(self, path: str) -> None:
        """``<dir>/.lock`` held with flock for the process lifetime. Held by someone else →
        fatal (two brokers on one dir); any other OSError (read-only or failed disk) → the dir
        goes offline instead of crashing start-up (KAFKA-17310)."""
        lm = self.host
        with lm.channel.io(path, "lock"):
            fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self.release_locks()
                raise LogDirStartupError(f"Failed to acquire lock on file {LOCK_FILE} in {path}. A broker in "
                                         f"another process or thread is using this directory.") from None
            except OSError:
                os.close(fd)
                raise
            self.lock_fds[path] = fd

    def release(self, path: str) -> None:
        """Give up ``path``'s ``.lock`` (the dir went offline)."""
        fd = self.lock_fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def release_locks(self) -> None:
        for path in list(self.lock_fds):
            self.release(path)

    def load_dir(self, path: str) -> None:
        lm = self.host
        with lm.channel.io(path, "load"):
            clean = os.path.exists(os.path.join(path, CLEAN_SHUTDOWN_FILE))
            recovery_points = self._read_checkpoint(path, ckpt.RECOVERY_CHECKPOINT)
            hws = self._read_checkpoint(path, ckpt.HW_CHECKPOINT)
            starts = self._read_checkpoint(path, ckpt.LOG_START_CHECKPOINT)
            names = sorted(os.listdir(path))
        for name in names:
            parsed = parse_partition_dir_name(name)
            if parsed is None:
                continue
            topic, partition, kind = parsed
            if topic == ids.METADATA_TOPIC:
                continue  # the metadata log (raft) is not a partition log of this manager
            full = os.path.join(path, name)
            with lm.channel.io(path, "load"):
                if not os.path.isdir(full):
                    continue
                if kind == "delete":
                    shutil.rmtree(full)
                    continue
            if kind == "stray":
                continue
            key = (topic, partition)
            plog = PartitionLog.load(path, name, lm._config(topic), lm.channel, lm._now_ms,
                                     recovery_point=recovery_points.get(key, 0),
                                     high_watermark=hws.get(key, 0), clean_shutdown=clean,
                                     log_start_offset=starts.get(key, 0))
            target = lm._futures if kind == "future" else lm._logs
            if key in target:
                other = target[key]
                if target is lm._logs and (other.topic_id != plog.topic_id or other.topic_id is None):
                    # another incarnation of the partition (its topic deleted and re-created
                    # while this dir was away), or a log without partition.metadata: both are
                    # kept until the first metadata publish names the stray (KAFKA-16157/16814)
                    lm._doubles.setdefault(key, []).append(plog)
                    continue
                plog.close()
                raise KafkaStorageError(path, None, "load", f"duplicate log for {topic}-{partition}: "
                                                            f"{other.path} and {plog.path}")
            target[key] = plog
        with lm.channel.io(path, "load"):
            if clean:
                os.unlink(os.path.join(path, CLEAN_SHUTDOWN_FILE))
                fsutil.fsync_dir(path)

    def _read_checkpoint(self, path: str, name: str) -> dict[Key, int]:
        try:
            return ckpt.read_offsets(os.path.join(path, name))
        except ckpt.CheckpointFormatError as exc:
            log.warning("ignoring malformed checkpoint (full recovery / HW from the leader): %s", exc)
            return {}

