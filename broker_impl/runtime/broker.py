"""The broker process (:class:`BrokerRuntime`): start-up wiring, the :class:`Host` the parts
share, and a bounded stop.

    start: load_log_dirs → LogManager.open (storage errors queued) → BrokerCore(start) →
           tasks: the core's timers, the metadata long-poll, per-dir maintenance, the ISR timer

The parts, each behind the small :class:`broker_impl.runtime.host.Host` protocol (none of
them imports this module):

====================  =====================================================================
:mod:`.core_loop`     feeds the pure core; executes its effects in order; the one storage-
                      error inlet
:mod:`.storage_effects`  create/delete/rename logs, close a failed dir: a worker per dir
:mod:`.controller_requests`  registration, heartbeats, AssignReplicasToDirs, AlterPartition,
                      forwarded CreateTopics over three controller connections
:mod:`.metadata_follower`  the metadata long-poll, replay into the image, publish, readiness
:mod:`.maintenance`   per-dir probe, checkpoints and time-based flushes on the dir workers
:mod:`.dataplane`     client listener, follower fetchers, dir mover, role effects
:mod:`.runtime_view`  the client handlers' BrokerView: status from the core, leader ISR/HW
:mod:`.dir_io`        one worker thread per data dir (+ one for its probe)
====================  =====================================================================

Nothing on the event loop waits for a disk, so a slow or hung dir delays neither the
heartbeats nor the other dirs. The broker keeps no on-disk copy of ``__cluster_metadata``
(the image is replayed in memory), so the controller connections have no storage call on
their path at all.

Halt → the ``halt`` event is written, one line on stderr, ``os._exit(1)`` (no graceful
shutdown, Kafka's ``Exit.halt``). Shutdown → logs closed (clean-shutdown marker) and the
process exits 0 (requested) or 1 (the failure-timeout shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
from typing import Any, Callable, Coroutine

from broker_impl.errors import BrokerError
from broker_impl.runtime.controller_requests import ControllerLinks, ControllerRequests
from broker_impl.runtime.core_loop import CoreLoop, EffectSinks
from broker_impl.runtime.dataplane import DataPlane
from broker_impl.runtime.dir_io import DirIO, daemon_call
from broker_impl.runtime.maintenance import Maintenance
from broker_impl.runtime.metadata_follower import MetadataFollower
from broker_impl.runtime import retention
from broker_impl.runtime.storage_effects import StorageEffects
from broker_impl.state import effects as fx
from broker_impl.state.core import BrokerCore, CoreConfig
from broker_impl.state.log_dirs import LogDirInfo as CoreDirInfo
from broker_impl.state.replica_manager import ExistingLog
from broker_impl.storage import (DirFailure, LogConfig, LogManager, StorageError, failure_callback_by_id,
                                 load_log_dirs)
from kafka_common import ids
from kafka_common.config import ServerConfig
from kafka_common.metadata.image import MetadataImage
from kafka_runtime.clock import SystemClock
from kafka_runtime.event_loop import running_loop_kind
from kafka_runtime.events import EventLog

log = logging.getLogger(__name__)
PROG = "kraft-broker"
# the whole stop (after the controlled shutdown): every step gets a share of what is left
STOP_BUDGET_S = 4.0


class StartupError(BrokerError):
    """The broker cannot start (storage rules, config)."""


def extra_ms(cfg: ServerConfig, key: str, default: int) -> int:
    """A broker-only timing key not in ServerConfig's table (read from the raw properties)."""
    text = cfg.raw.get(key)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise StartupError(f"{key}={text!r}: not an integer") from None
    if value < 1:
        raise StartupError(f"{key}={text!r}: must be >= 1")
    return value


class BrokerRuntime:
    """The one :class:`broker_impl.runtime.host.Host`."""

    def __init__(self, cfg: ServerConfig, *, clock: Any = None, rng: random.Random | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.rng = rng or random.SystemRandom()
        self.events = EventLog(cfg.events_file or "", cfg.node_id, "broker")
        self.incarnation_id = ids.random_uuid(self.rng)
        self.image = MetadataImage()
        self.exit_code: asyncio.Future | None = None
        self.core_loop = CoreLoop(self.events, self.now_ms, self.halt)
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self.core: BrokerCore
        self.lm: LogManager
        self.dir_io: DirIO
        self.links: ControllerLinks | None = None
        self.storage_effects: StorageEffects | None = None
        self.dataplane: DataPlane | None = None

    # ------------------------------------------------------------------ Host
    def now_ms(self) -> int:
        return self.clock.monotonic_ms()

    def feed(self, effects: list) -> None:
        self.core_loop.feed(effects)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def call_from_thread(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the broker is stopping
            pass

    def report_storage_error(self, failure: DirFailure) -> None:
        self.call_from_thread(self.core_loop.report_storage_error, failure)

    def halt(self, reason: str, *, emitted: bool = False) -> None:
        print(f"{PROG}: halted: {reason}", file=sys.stderr, flush=True)
        if not emitted:
            self.events.emit("halt", reason=reason)
        self.events.close()
        os._exit(1)

    @property
    def stopping(self) -> bool:
        return self._stopping

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self.exit_code = loop.create_future()
        cfg = self.cfg
        if not cfg.log_dirs:
            raise StartupError("log.dirs: at least one log directory is required")
        metadata_dir = cfg.metadata_log_dir or cfg.log_dirs[0]
        try:
            dir_set = load_log_dirs(list(cfg.log_dirs), metadata_dir, cfg.node_id, self.rng,
                                    cluster_id=cfg.cluster_id or None)
        except StorageError as exc:
            raise StartupError(str(exc)) from None
        self.lm = await asyncio.to_thread(LogManager.open, dir_set, LogConfig.from_server_config(cfg),
                                          on_failure=failure_callback_by_id(dir_set, self.report_storage_error),
                                          now_ms=self.now_ms)
        self.storage_effects = StorageEffects(self.lm, self.events)
        # one I/O worker per data dir: the data plane's blocking storage calls (dir_io)
        self.dir_io = DirIO([d.path for d in dir_set.data_dirs])
        existing = []
        for topic, partition, topic_id, path, future in self.lm.existing_logs():
            dir_id = dir_set.id_of(path)
            if dir_id is None or (topic_id is None and future):
                continue
            # no topic id (partition.metadata gone): a stray, deleted at the first publish,
            # never attached (KAFKA-16814)
            existing.append(ExistingLog(fx.TopicPartition(topic, partition), topic_id, dir_id, future))
        dirs = [CoreDirInfo(d.directory_id, d.path) for d in dir_set.data_dirs
                if d.online and d.directory_id is not None]
        if not dirs:
            raise StartupError(f"none of the log dirs {', '.join(cfg.log_dirs)} is usable")
        for d in dir_set.offline_at_start:
            self.events.emit("dir_offline", dir_id=None, path=d.path, errno=None, op="startup", reason=d.reason)
        for plog in self.lm.all_logs():   # recovery found a torn or corrupt batch and cut the log there
            if plog.recovery.truncated_bytes:
                self.events.emit("log_truncated_at_recovery", topic=plog.topic, partition=plog.partition,
                                 path=plog.log_dir, truncated_bytes=plog.recovery.truncated_bytes,
                                 log_end_offset=plog.log_end_offset, reason="; ".join(plog.recovery.reasons)[:500])
        self.core = BrokerCore(CoreConfig(
            broker_id=cfg.node_id, heartbeat_interval_ms=cfg.broker_heartbeat_interval_ms,
            session_timeout_ms=cfg.broker_session_timeout_ms,
            log_dir_failure_timeout_ms=cfg.log_dir_failure_timeout_ms,
            initial_registration_timeout_ms=extra_ms(cfg, "initial.broker.registration.timeout.ms", 60000),
            controlled_shutdown_timeout_ms=extra_ms(cfg, "controlled.shutdown.timeout.ms", 30000)),
            dirs, dir_set.metadata_dir.directory_id, self.rng, existing, metadata_dir_path=dir_set.metadata_dir.path,
            unidentified_offline_dirs=tuple(d.path for d in dir_set.data_dirs if not d.online))
        unknown = self.core.log_dirs.cordon_paths(getattr(cfg, "cordoned_log_dirs", ()), os.path.normpath)
        if unknown:
            raise StartupError(f"cordoned.log.dirs: {', '.join(unknown)} is not one of the usable log.dirs")
        self.links = links = ControllerLinks(cfg)
        requests = ControllerRequests(self, links, dir_set.cluster_id, self.incarnation_id)
        self.dataplane = dataplane = DataPlane(self, requests, dir_set.cluster_id)
        metadata = MetadataFollower(self, links.metadata, on_changes=dataplane.on_image_changes,
                                    on_ready=lambda: self.spawn(dataplane.start_listener()))
        maintenance = Maintenance(self.lm, self.dir_io, self.now_ms, cfg.log_dir_probe_interval_ms,
                                  cfg.hw_checkpoint_interval_ms, cfg.recovery_checkpoint_interval_ms)
        self.events.emit("broker_starting", log_dirs=[ids.to_base64(d.dir_id) for d in dirs],
                         existing_logs=len(existing), incarnation_id=ids.to_base64(self.incarnation_id),
                         event_loop=running_loop_kind())
        self.core_loop.attach(self.core, EffectSinks(controller=requests.execute, storage=self._storage_effect,
                                                     role=dataplane.order_role,
                                                     halt=lambda reason: self.halt(reason, emitted=True),
                                                     finish=self._finish))
        self.feed(self.core.start(self.now_ms()))
        self._tasks = [asyncio.create_task(self.core_loop.run_timers(lambda: self._stopping), name="core-timers"),
                       asyncio.create_task(metadata.run(), name="metadata"),
                       asyncio.create_task(maintenance.run(), name="maintenance"),
                       asyncio.create_task(dataplane.isr_loop(), name="isr"),
                       retention.install(self, dataplane.view.static_config,
                                         wall_ms=lambda: self.clock.wall_ns() // 1_000_000)]

    def _storage_effect(self, e: Any) -> None:
        assert self.storage_effects is not None and self.dataplane is not None
        fut = self.storage_effects.submit(e)
        tp = getattr(e, "tp", None)
        if tp is not None:
            self.dataplane.after_storage(tp, fut)

    def _finish(self, code: int, reason: str) -> None:
        if self.exit_code is not None and not self.exit_code.done():
            self.exit_code.set_result((code, reason))

    # ------------------------------------------------------------------ stop
    def request_shutdown(self) -> None:
        """SIGTERM: controlled shutdown (want_shut_down); a second one stops at once."""
        if self.core.lifecycle.want_shut_down:
            self._finish(0, "second shutdown signal")
            return
        self.feed(self.core.begin_controlled_shutdown(self.now_ms()))

    async def stop(self) -> None:
        """Stop within ``STOP_BUDGET_S`` whatever hangs: cancel the tasks, close the controller
        connections and the logs, each step bounded by a share of the budget (``asyncio.wait``
        with a timeout: Python 3.11's ``wait_for`` can swallow a cancel, so no task is ever
        awaited without a limit). A step that does not finish is left behind (daemon
        threads, abandoned tasks); the ``stopped`` event lists each step's time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_BUDGET_S
        steps: dict[str, float] = {}
        late: list[str] = []

        async def bounded(name: str, aw: Any, share: float) -> None:
            t0 = loop.time()
            task = asyncio.ensure_future(aw)
            await asyncio.wait({task}, timeout=max(0.05, (deadline - t0) * share))
            steps[name] = round((loop.time() - t0) * 1000, 1)
            if not task.done():
                task.cancel()
                late.append(name)
                log.warning("stop: %s did not finish in time; left behind", name)
            elif not task.cancelled() and task.exception() is not None:
                log.warning("stop: %s failed: %s", name, task.exception())

        self._stopping = True
        self.core_loop.wake.set()
        if self.dataplane is not None:
            await bounded("dataplane", self.dataplane.stop(), 0.3)
        tasks = self._tasks + list(self._background)
        for t in tasks:
            t.cancel()
        if tasks:
            await bounded("tasks", asyncio.wait(tasks), 0.2)
        if self.links is not None:
            await bounded("controller_connections", self.links.close(), 0.2)
        if self.storage_effects is not None:
            self.storage_effects.close()
        dir_io = getattr(self, "dir_io", None)
        if dir_io is not None:  # let the queued steps finish first (bounded: a hung dir's never do)
            dir_io.close()
            budget = max(0.05, (deadline - loop.time()) * 0.3)
            await bounded("dir_workers", asyncio.wrap_future(daemon_call(lambda: dir_io.join(budget))), 0.35)
        lm = getattr(self, "lm", None)
        if lm is not None:
            # bounded: a hung dir must not keep the process alive (its logs stay unflushed,
            # no clean-shutdown marker: recovery at the next start)
            await bounded("close_logs", asyncio.wrap_future(daemon_call(lm.close)), 1.0)
            if "close_logs" in late:
                log.warning("closing the logs timed out after %.1f s (a hung log dir)", steps["close_logs"] / 1000)
                self.events.emit("close_timed_out", timeout_s=round(steps["close_logs"] / 1000, 2))
        fetch = dict(self.dataplane.fetchers.stats) if self.dataplane is not None else {}
        self.events.emit("stopped", steps_ms=steps, left_behind=late, fetch=fetch)
        self.events.close()
