"""The log manager's periodic work over its logs: flush, offset checkpoints, retention rounds,
topic config refresh and dir health probes; each returns the dirs that failed. A part of
:class:`broker_impl.storage.log_manager.LogManager` (its ``maintenance``), holding no state of
its own: it reads the manager's tables through the :class:`MaintenanceHost` protocol.
"""

from __future__ import annotations

import os
from typing import Callable, Protocol

from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from broker_impl.storage.probe import probe
from broker_impl.storage.startup import LogDirSet

Key = tuple[str, int]


class MaintenanceHost(Protocol):
    """The log manager as its periodic work sees it."""
    dir_set: LogDirSet
    channel: DirFailureChannel
    config_for: Callable[[str], LogConfig] | None   # a topic's log config (None: the manager's)
    _logs: dict[Key, PartitionLog]
    _futures: dict[Key, PartitionLog]

    def _config(self, topic: str) -> LogConfig: ...
    def online_dirs(self) -> list[str]: ...
    def logs_in(self, dir_path: str, *, include_future: bool = False) -> list[PartitionLog]: ...


class LogMaintenance:
    __slots__ = ("host",)

    def __init__(self, host: MaintenanceHost) -> None:
        self.host = host

    # ---- flush, checkpoints, probe -------------------------------------------------------
    def flush_all(self) -> list[str]:
        return self._each_log(lambda l: l.flush())

    def maybe_flush_all(self, now_ms: int, *, only_dir: str | None = None) -> list[str]:
        return self._each_log(lambda l: l.maybe_flush(now_ms), only_dir)

    def _each_log(self, fn: Callable[[PartitionLog], object], only_dir: str | None = None) -> list[str]:
        lm = self.host
        failed = []
        for plog in [*lm._logs.values(), *lm._futures.values()]:
            if only_dir is not None and plog.log_dir != only_dir:
                continue
            if plog.log_dir in failed or lm.channel.is_offline(plog.log_dir):
                continue
            try:
                fn(plog)
            except KafkaStorageError:
                failed.append(plog.log_dir)
        return failed

    def checkpoint_high_watermarks(self, *, only_dir: str | None = None) -> list[str]:
        """Write ``replication-offset-checkpoint`` in every online dir (or only ``only_dir``,
        as the broker's per-dir workers do), and ``log-start-offset-checkpoint`` with it;
        returns dirs that failed."""
        failed = self._checkpoint(ckpt.HW_CHECKPOINT, lambda l: l.high_watermark, futures=False, only_dir=only_dir)
        if only_dir is not None and failed:
            return failed
        return sorted(set(failed) | set(self.checkpoint_log_start_offsets(only_dir=only_dir)))

    def checkpoint_log_start_offsets(self, *, only_dir: str | None = None) -> list[str]:
        """``log-start-offset-checkpoint`` (moved by retention and DeleteRecords)."""
        return self._checkpoint(ckpt.LOG_START_CHECKPOINT, lambda l: l.log_start_offset, futures=False,
                                only_dir=only_dir)

    def enforce_retention(self, wall_ms: int, *, only_dir: str, max_segments: int) -> tuple[int, list[str]]:
        """One retention round over the logs of ``only_dir``: each log takes the current
        config of its topic, then deletes segments by time/size; at most ``max_segments``
        deletions in all (bounded work per round). Returns (deleted, failed dirs)."""
        lm = self.host
        budget = [max_segments]

        def one(plog: PartitionLog) -> None:
            cfg = lm._config(plog.topic)
            if plog.config != cfg:
                plog.config = cfg
            if budget[0] > 0 and not self._is_future(plog):
                budget[0] -= plog.enforce_retention(wall_ms, budget[0])
        failed = self._each_log(one, only_dir)
        if budget[0] < max_segments and not failed:
            failed = self.checkpoint_log_start_offsets(only_dir=only_dir)
        return max_segments - budget[0], failed

    def refresh_configs(self) -> None:
        """Give every log the current config of its topic (no I/O: a reference swap)."""
        lm = self.host
        if lm.config_for is None:
            return
        for plog in [*lm._logs.values(), *lm._futures.values()]:
            cfg = lm.config_for(plog.topic)
            if plog.config != cfg:
                plog.config = cfg

    def _is_future(self, plog: PartitionLog) -> bool:
        lm = self.host
        return lm._futures.get((plog.topic, plog.partition)) is plog

    def checkpoint_recovery_points(self, *, only_dir: str | None = None) -> list[str]:
        return self._checkpoint(ckpt.RECOVERY_CHECKPOINT, lambda l: l.recovery_point, futures=True,
                                only_dir=only_dir)

    def _checkpoint(self, name: str, value: Callable[[PartitionLog], int], *, futures: bool,
                    only_dir: str | None = None) -> list[str]:
        lm = self.host
        failed = []
        for path in lm.online_dirs():
            if only_dir is not None and path != only_dir:
                continue
            offsets = {(l.topic, l.partition): value(l) for l in lm.logs_in(path, include_future=futures)}
            try:
                with lm.channel.io(path, "checkpoint"):
                    ckpt.write_offsets(os.path.join(path, name), offsets)
            except KafkaStorageError:
                failed.append(path)
        return failed

    def probe_dir(self, dir_path: str) -> None:
        """Health probe of one dir through the failure channel (op ``probe``)."""
        lm = self.host
        with lm.channel.io(os.path.abspath(dir_path), "probe"):
            probe(os.path.abspath(dir_path))

    def probe_targets(self) -> list[str]:
        """The online data dirs, then the metadata dir when it is not one of ``log.dirs``
        (its own disk in the lab: nothing else here writes to it, so without the probe its
        failure would go unnoticed; the failure channel reports it like any dir and the
        core halts for the metadata dir)."""
        lm = self.host
        paths = lm.online_dirs()
        meta = lm.dir_set.metadata_dir
        if not meta.is_data_dir and meta.online and not lm.channel.is_offline(meta.path):
            paths.append(meta.path)
        return paths

    def probe_all(self) -> list[str]:
        failed = []
        for path in self.probe_targets():
            try:
                self.probe_dir(path)
            except KafkaStorageError:
                failed.append(path)
        return failed
