"""The log manager's periodic work over its logs: flush, offset checkpoints, retention rounds,
topic config refresh and dir health probes; each returns the dirs that failed. Mixed into
:class:`broker_impl.storage.log_manager.LogManager`.
"""

from __future__ import annotations

import os
from typing import Callable

from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from broker_impl.storage.probe import probe


class LogMaintenance:
    # ---- flush, checkpoints, probe -------------------------------------------------------
    def flush_all(self) -> list[str]:
        return self._each_log(lambda l: l.flush())

    def maybe_flush_all(self, now_ms: int, *, only_dir: str | None = None) -> list[str]:
        return self._each_log(lambda l: l.maybe_flush(now_ms), only_dir)

    def _each_log(self, fn: Callable[[PartitionLog], object], only_dir: str | None = None) -> list[str]:
        failed = []
        for plog in [*self._logs.values(), *self._futures.values()]:
            if only_dir is not None and plog.log_dir != only_dir:
                continue
            if plog.log_dir in failed or self.channel.is_offline(plog.log_dir):
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

    def _config(self, topic: str) -> LogConfig:
        return self.config if self.config_for is None else self.config_for(topic)

    def enforce_retention(self, wall_ms: int, *, only_dir: str, max_segments: int) -> tuple[int, list[str]]:
        """One retention round over the logs of ``only_dir``: each log takes the current
        config of its topic, then deletes segments by time/size; at most ``max_segments``
        deletions in all (bounded work per round). Returns (deleted, failed dirs)."""
        budget = [max_segments]

        def one(plog: PartitionLog) -> None:
            cfg = self._config(plog.topic)
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
        if self.config_for is None:
            return
        for plog in [*self._logs.values(), *self._futures.values()]:
            cfg = self.config_for(plog.topic)
            if plog.config != cfg:
                plog.config = cfg

    def _is_future(self, plog: PartitionLog) -> bool:
        return self._futures.get((plog.topic, plog.partition)) is plog

    def checkpoint_recovery_points(self, *, only_dir: str | None = None) -> list[str]:
        return self._checkpoint(ckpt.RECOVERY_CHECKPOINT, lambda l: l.recovery_point, futures=True,
                                only_dir=only_dir)

    def _checkpoint(self, name: str, value: Callable[[PartitionLog], int], *, futures: bool,
                    only_dir: str | None = None) -> list[str]:
        failed = []
        for path in self.online_dirs():
            if only_dir is not None and path != only_dir:
                continue
            offsets = {(l.topic, l.partition): value(l) for l in self.logs_in(path, include_future=futures)}
            try:
                with self.channel.io(path, "checkpoint"):
                    ckpt.write_offsets(os.path.join(path, name), offsets)
            except KafkaStorageError:
                failed.append(path)
        return failed

    def probe_dir(self, dir_path: str) -> None:
        """Health probe of one dir through the failure channel (op ``probe``)."""
        with self.channel.io(os.path.abspath(dir_path), "probe"):
            probe(os.path.abspath(dir_path))

    def probe_targets(self) -> list[str]:
        """The online data dirs, then the metadata dir when it is not one of ``log.dirs``
        (its own disk in the lab: nothing else here writes to it, so without the probe its
        failure would go unnoticed; the failure channel reports it like any dir and the
        core halts for the metadata dir)."""
        paths = self.online_dirs()
        meta = self.dir_set.metadata_dir
        if not meta.is_data_dir and meta.online and not self.channel.is_offline(meta.path):
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
