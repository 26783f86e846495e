"""Per-dir upkeep (:class:`Maintenance`): the health probe (on the dir's probe worker),
HW / recovery-point checkpoints and time-based flushes (on its upkeep worker, so that their
fsyncs on a slow disk do not hold up the appends on its data worker).

A slow dir's round takes long without delaying the other dirs' rounds (a dir whose previous
round is still running is skipped), and nothing here runs on the loop. Failures take the
storage layer's one path (the failure channel reports the dir once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable

from broker_impl.runtime.dir_io import DirIO
from broker_impl.storage import LogManager, StorageError

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(self, lm: LogManager, dir_io: DirIO, now_ms: Callable[[], int], probe_interval_ms: int,
                 hw_interval_ms: int, recovery_interval_ms: int) -> None:
        """The intervals: ``log.dir.probe.interval.ms`` (0 = no probe),
        ``replica.high.watermark.checkpoint.interval.ms``, ``log.flush.offset.checkpoint.interval.ms``."""
        self.lm = lm
        self.dir_io = dir_io
        self.now_ms = now_ms
        self.probe_interval_ms = probe_interval_ms
        self.hw_interval_ms = hw_interval_ms
        self.recovery_interval_ms = recovery_interval_ms

    async def run(self) -> None:
        lm, probe_ms = self.lm, self.probe_interval_ms
        step_ms = min(probe_ms or 1000, self.hw_interval_ms)
        start = self.now_ms()
        last = {path: [start, start, start] for path in self.dir_io.executors}  # probe, HW, recovery point
        running: dict[str, concurrent.futures.Future] = {}
        probing: dict[str, concurrent.futures.Future] = {}
        while True:
            await asyncio.sleep(step_ms / 1000)
            now = self.now_ms()
            data_dirs = set(lm.online_dirs())
            # probe_targets: the online data dirs AND a separate metadata.log.dir (nothing else
            # touches that disk; its failure must reach the core, which halts the broker)
            for path in lm.probe_targets():
                stamps = last.setdefault(path, [now, now, now])
                if probe_ms and now - stamps[0] >= probe_ms and (path not in probing or probing[path].done()):
                    stamps[0] = now
                    probing[path] = self.dir_io.submit_probe(path, self.dir_round, path, True, False, False, None)
                if path not in data_dirs:
                    continue  # the metadata dir holds no partition logs: no checkpoints or flushes
                if path in running and not running[path].done():
                    continue  # its previous round is still on the disk
                hw = now - stamps[1] >= self.hw_interval_ms
                rp = now - stamps[2] >= self.recovery_interval_ms
                stamps[1] = now if hw else stamps[1]
                stamps[2] = now if rp else stamps[2]
                running[path] = self.dir_io.submit_upkeep(path, self.dir_round, path, False, hw, rp, now)

    def dir_round(self, path: str, probe: bool, hw: bool, rp: bool, now_ms: int | None) -> None:
        """One dir's round, on one of its workers; failures go through the failure channel."""
        lm = self.lm
        try:
            if probe:
                lm.probe_dir(path)
            if hw:
                lm.checkpoint_high_watermarks(only_dir=path)
            if rp:
                lm.checkpoint_recovery_points(only_dir=path)
            if now_ms is not None:
                lm.maybe_flush_all(now_ms, only_dir=path)
        except StorageError:
            pass  # reported through the failure channel (once per dir)
        except Exception:  # a bug must not stop the dir's maintenance silently
            log.exception("maintenance of %s", path)
