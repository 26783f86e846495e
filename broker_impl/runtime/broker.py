"""The broker process: storage + the pure core + the controller channel, on one asyncio loop.

    start: load_log_dirs → LogManager.open (storage errors queued) → BrokerCore(start) →
           tasks: timer driver, metadata long-poll, dir probe + checkpoints
    every input (responses, metadata batches, storage errors, SIGTERM) goes to the core;
    the core's effects are executed here, in order (:meth:`BrokerRuntime._execute`).

Storage effects (create/delete/rename logs, close a failed dir) run in order on one worker
thread, so a hung disk stalls them but never the heartbeats or the failure report.

Everything else that touches a disk runs on that log dir's own worker thread
(:mod:`broker_impl.runtime.dir_io`): appends and reads of the client handlers, follower
steps, the dir mover, and the per-dir maintenance round (probe, HW/recovery-point
checkpoints, time-based flushes). Nothing on the event loop waits for a disk, so a slow or
hung dir cannot delay the heartbeats or the other dirs. Controller connections: ``channel``
carries only registration and heartbeats, ``metadata_channel`` the metadata long-poll and
``data_channel`` AssignReplicasToDirs, AlterPartition and forwarded CreateTopics — the
controller answers one connection's requests in order, so a parked long-poll or a request
waiting for the controller's log fsync never delays a heartbeat.
The broker keeps no on-disk copy of ``__cluster_metadata`` (the image is replayed in
memory), so the controller channel has no storage call on its path at all.
Storage errors arrive through B's ``on_failure(path, errno, op)`` from any thread; they are
queued with ``call_soon_threadsafe`` and fed to the core between effects (never re-entrantly).

Halt → the ``halt`` event is written, one line on stderr, ``os._exit(1)`` (no graceful
shutdown, Kafka's ``Exit.halt``). Shutdown → logs closed (clean-shutdown marker) and the
process exits 0 (requested) or 1 (the D5 failure-timeout shutdown).

Data plane (``broker_impl.runtime.dataplane``, ``broker_impl.replication``): once the broker
is registered and caught up, G's ``BrokerApi`` serves the client listener over a
``RuntimeView``; partition-role effects go to :class:`broker_impl.runtime.roles.DataPlane`
(leaders, fetchers, mover, listener), ordered after the storage effects of their partition.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import random
import sys
from typing import Any

from broker_impl.runtime.controller_channel import (ControllerConnection, assignments_request, assignments_results,
                                                    controller_locator, controller_sasl, fetch_metadata_snapshot,
                                                    heartbeat_request,
                                                    metadata_fetch_request, registration_request)
from broker_impl.runtime.dir_io import DirExecutor, DirIO, daemon_call
from broker_impl.runtime.roles import ROLE_EFFECTS, DataPlane
from broker_impl.state import effects as fx
from broker_impl.state.core import BrokerCore, CoreConfig
from broker_impl.state.log_dirs import LogDirInfo as CoreDirInfo
from broker_impl.state.metadata_changes import partition_changes
from broker_impl.state.replica_manager import ExistingLog
from broker_impl.storage import KafkaStorageError, LogConfig, LogManager, StorageError, load_log_dirs
from kafka_common import ids
from kafka_common.config import ServerConfig
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata.image import ImageError, MetadataImage
from kafka_common.metadata import snapshot as snapshot_format
from kafka_runtime.clock import SystemClock
from kafka_runtime.client import ClientError
from kafka_runtime.events import EventLog

log = logging.getLogger(__name__)
PROG = "kraft-broker"
HW_CHECKPOINT_INTERVAL_MS = 5000
RECOVERY_CHECKPOINT_INTERVAL_MS = 60000
# the whole stop (after the controlled shutdown): every step gets a share of what is left
STOP_BUDGET_S = 4.0


STORAGE_EFFECTS = (fx.CreateLog, fx.DeleteLog, fx.MarkDirOffline, fx.RenameStray, fx.CreateFutureLog,
                   fx.DeleteFutureLog)


class StartupError(Exception):
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
    def __init__(self, cfg: ServerConfig, *, clock=None, rng: random.Random | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.rng = rng or random.SystemRandom()
        self.events = EventLog(cfg.events_file, cfg.node_id, "broker") if cfg.events_file else \
            EventLog("", cfg.node_id, "broker")
        self.incarnation_id = ids.random_uuid(self.rng)
        self.image = MetadataImage()
        self.next_metadata_offset = 0
        self.metadata_hwm = 0
        self.ready = False
        self.published = False
        self.exit_code: asyncio.Future | None = None
        self._wake = asyncio.Event()
        self._pending: collections.deque = collections.deque()
        self._storage_errors: collections.deque = collections.deque()
        self._executing = False
        self._stopping = False
        self._tasks: list[asyncio.Task] = []
        self._bg: set[asyncio.Task] = set()
        self.core: BrokerCore | None = None
        self.lm: LogManager | None = None
        self.dataplane: DataPlane | None = None

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self.exit_code = loop.create_future()
        self._storage_pool = DirExecutor("storage-effects")  # a daemon thread: a hung dir cannot block exit
        cfg = self.cfg
        if not cfg.log_dirs:
            raise StartupError("log.dirs: at least one log directory is required")
        metadata_dir = cfg.metadata_log_dir or cfg.log_dirs[0]
        try:
            dir_set = load_log_dirs(list(cfg.log_dirs), metadata_dir, cfg.node_id, self.rng,
                                    cluster_id=cfg.cluster_id or None)
        except StorageError as exc:
            raise StartupError(str(exc)) from None
        self.dir_set = dir_set
        self.cluster_id = dir_set.cluster_id

        def on_failure(path: str, errno: int, op: str) -> None:
            loop.call_soon_threadsafe(self._storage_error, path, errno, op)

        self.lm = await asyncio.to_thread(LogManager.open, dir_set, LogConfig.from_server_config(cfg),
                                          on_failure=on_failure, now_ms=self.clock.monotonic_ms)
        # one I/O worker per data dir: the data plane's blocking storage calls (dir_io)
        self.dir_io = DirIO([d.path for d in dir_set.data_dirs])
        existing = []
        for topic, partition, topic_id, path, future in self.lm.existing_logs():
            dir_id = dir_set.id_of(path)
            if topic_id is None or dir_id is None:
                continue  # no topic id: a stray, never attached (KAFKA-16814)
            existing.append(ExistingLog(fx.TopicPartition(topic, partition), topic_id, dir_id, future))
        dirs = [CoreDirInfo(d.directory_id, d.path) for d in dir_set.data_dirs
                if d.online and d.directory_id is not None]
        if not dirs:
            raise StartupError(f"none of the log dirs {', '.join(cfg.log_dirs)} is usable")
        for d in dir_set.offline_at_start:
            self.events.emit("dir_offline", dir_id=None, path=d.path, errno=None, op="startup", reason=d.reason)
        self.core = BrokerCore(CoreConfig(
            broker_id=cfg.node_id, heartbeat_interval_ms=cfg.broker_heartbeat_interval_ms,
            session_timeout_ms=cfg.broker_session_timeout_ms,
            log_dir_failure_timeout_ms=cfg.log_dir_failure_timeout_ms,
            initial_registration_timeout_ms=extra_ms(cfg, "initial.broker.registration.timeout.ms", 60000),
            controlled_shutdown_timeout_ms=extra_ms(cfg, "controlled.shutdown.timeout.ms", 30000)),
            dirs, dir_set.metadata_dir.directory_id, self.rng, existing, metadata_dir_path=dir_set.metadata_dir.path)
        locator = controller_locator(cfg)
        sasl = controller_sasl(cfg)
        self.channel = ControllerConnection(locator, client_id=f"broker-{cfg.node_id}", sasl=sasl,
                                            max_frame_bytes=cfg.socket_request_max_bytes)
        self.metadata_channel = ControllerConnection(locator, client_id=f"broker-{cfg.node_id}-metadata",
                                                     sasl=sasl, max_frame_bytes=cfg.socket_request_max_bytes)
        # AssignReplicasToDirs, AlterPartition and forwarded CreateTopics: a connection of
        # their own, so a heartbeat never queues behind them (the controller answers one
        # connection's requests in order, and those wait for its metadata-log fsync)
        self.data_channel = ControllerConnection(locator, client_id=f"broker-{cfg.node_id}-data",
                                                 sasl=sasl, max_frame_bytes=cfg.socket_request_max_bytes)
        self.events.emit("broker_starting", log_dirs=[ids.to_base64(d.dir_id) for d in dirs],
                         existing_logs=len(existing), incarnation_id=ids.to_base64(self.incarnation_id))
        self.dataplane = DataPlane(self)
        self._feed(self.core.start(self._now()))
        self._tasks = [asyncio.create_task(self._driver(), name="core-driver"),
                       asyncio.create_task(self._metadata_loop(), name="metadata"),
                       asyncio.create_task(self._maintenance(), name="maintenance"),
                       asyncio.create_task(self.dataplane.isr_loop(), name="isr")]

    def _now(self) -> int:
        return self.clock.monotonic_ms()

    # ------------------------------------------------------------------ feeding the core
    def _storage_error(self, path: str, errno: int, op: str) -> None:
        self._storage_errors.append((path, errno, op))
        if self.core is not None:  # errors while loading the logs wait for the core's start
            self._feed([])

    def _feed(self, effects: list) -> None:
        """Execute effects; storage errors raised meanwhile are fed after the current effect."""
        self._pending.extend(effects)
        if self._executing:
            return
        self._executing = True
        try:
            while self._pending or self._storage_errors:
                if self._pending:
                    self._execute(self._pending.popleft())
                    continue
                path, errno, op = self._storage_errors.popleft()
                dir_id = self.dir_set.id_of(path)
                if op == "probe":
                    self.events.emit("probe_failed", path=path, errno=errno,
                                     dir_id=ids.to_base64(dir_id) if dir_id else None)
                if dir_id is None:
                    self._halt(f"I/O error on log dir {path} which has no directory id ({op}: errno {errno})")
                    return
                assert self.core is not None
                self._pending.extend(self.core.on_storage_error(dir_id, errno, op, self._now()))
        finally:
            self._executing = False
        self._wake.set()

    def _spawn(self, coro) -> None:
        t = asyncio.create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    async def _driver(self) -> None:
        assert self.core is not None
        while not self._stopping:  # a flag: 3.11's wait_for may swallow a cancel
            deadline = self.core.next_deadline_ms()
            timeout = None if deadline is None else max(0.0, (deadline - self._now()) / 1000)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            self._feed(self.core.tick(self._now()))

    # ------------------------------------------------------------------ effects
    def _execute(self, e: Any) -> None:
        lm, core = self.lm, self.core
        assert lm is not None and core is not None
        if isinstance(e, fx.EmitEvent):
            self.events.emit(e.event, **e.as_dict())
        elif isinstance(e, fx.SendRegistration):
            self._spawn(self._send_registration(e))
        elif isinstance(e, fx.SendHeartbeat):
            self._spawn(self._send_heartbeat(e))
        elif isinstance(e, fx.SendAssignments):
            self._spawn(self._send_assignments(e))
        elif isinstance(e, STORAGE_EFFECTS):
            fut = self._storage_pool.submit(self._storage_effect, e)
            tp = getattr(e, "tp", None)
            if tp is not None and self.dataplane is not None:
                self.dataplane.storage_tail[tp] = fut
        elif isinstance(e, ROLE_EFFECTS):
            assert self.dataplane is not None
            self.dataplane.order_role(e)
        elif isinstance(e, fx.Halt):
            self._halt(e.reason, emitted=True)  # the core wrote the halt event
        elif isinstance(e, fx.Shutdown):
            self._finish(0 if e.clean else 1, e.reason)
        else:
            raise TypeError(f"unknown effect {e!r}")

    def _storage_effect(self, e: Any) -> None:
        """On the storage worker thread, in effect order: a disk that hangs stalls these,
        never the heartbeats. OSErrors reach the core through ``on_failure``."""
        lm = self.lm
        assert lm is not None
        tp = e.tp if hasattr(e, "tp") else None
        try:
            if isinstance(e, fx.CreateLog):
                lm.get_or_create_log(e.topic_id, e.tp.topic, e.tp.partition, dir_path=self.dir_set.path_of(e.dir_id))
            elif isinstance(e, fx.DeleteLog):
                lm.delete_log(e.tp.topic, e.tp.partition)
            elif isinstance(e, fx.MarkDirOffline):
                path = self.dir_set.path_of(e.dir_id)
                if path is not None:
                    lm.mark_offline(path)
            elif isinstance(e, fx.RenameStray):
                new = lm.rename_stray(e.tp.topic, e.tp.partition)
                self.events.emit("stray_renamed", topic=e.tp.topic, partition=e.tp.partition, path=new)
            elif isinstance(e, fx.CreateFutureLog):
                lm.create_future_log(e.topic_id, e.tp.topic, e.tp.partition, self.dir_set.path_of(e.dir_id))
            elif isinstance(e, fx.DeleteFutureLog):
                lm.delete_future_log(e.tp.topic, e.tp.partition)
        except StorageError as exc:
            log.error("%s of %s failed: %s", type(e).__name__, tp, exc)
            if not isinstance(exc, KafkaStorageError):
                self.events.emit("storage_effect_failed", effect=type(e).__name__, topic=tp.topic if tp else None,
                                 partition=tp.partition if tp else None, error=str(exc))
        except Exception:  # a bug must not kill the worker silently
            log.exception("%s failed", type(e).__name__)

    def _halt(self, reason: str, *, emitted: bool = False) -> None:
        print(f"{PROG}: halted: {reason}", file=sys.stderr, flush=True)
        if not emitted:
            self.events.emit("halt", reason=reason)
        self.events.close()
        os._exit(1)

    def _finish(self, code: int, reason: str) -> None:
        if self.exit_code is not None and not self.exit_code.done():
            self.exit_code.set_result((code, reason))

    # ------------------------------------------------------------------ controller requests
    @property
    def _lifecycle_timeout_s(self) -> float:
        return max(0.1, self.cfg.broker_session_timeout_ms / 2000)

    async def _send_registration(self, e: fx.SendRegistration) -> None:
        assert self.core is not None
        try:
            resp = await self.channel.request(
                lambda c: registration_request(c, e, self.cfg, self.cluster_id, self.incarnation_id),
                self._lifecycle_timeout_s)
        except (ClientError, OSError) as exc:
            log.warning("registration failed: %s", exc)
            self._feed(self.core.on_controller_request_failed(self._now()))
            return
        code = int(resp.error_code.value)
        if code:
            self.events.emit("registration_rejected", error=resp.error_code.name)
        self._feed(self.core.on_registration_response(code, resp.broker_epoch, self._now()))

    async def _send_heartbeat(self, e: fx.SendHeartbeat) -> None:
        assert self.core is not None
        try:
            resp = await self.channel.request(lambda c: heartbeat_request(c, e, self.cfg.node_id),
                                              self._lifecycle_timeout_s)
        except (ClientError, OSError) as exc:
            log.warning("heartbeat failed: %s", exc)
            self._feed(self.core.on_controller_request_failed(self._now()))
            return
        self._feed(self.core.on_heartbeat_response(int(resp.error_code.value), self._now(),
                                                   is_caught_up=resp.is_caught_up, is_fenced=resp.is_fenced,
                                                   should_shut_down=resp.should_shut_down))

    async def _send_assignments(self, e: fx.SendAssignments) -> None:
        assert self.core is not None
        try:
            resp = await self.data_channel.request(lambda c: assignments_request(c, e, self.cfg.node_id), 30.0)
        except (ClientError, OSError) as exc:
            log.warning("AssignReplicasToDirs failed: %s", exc)
            self._feed(self.core.on_assignments_response(-1, {}, self._now()))
            return
        code, results = assignments_results(resp)
        self._feed(self.core.on_assignments_response(code, results, self._now()))

    # ------------------------------------------------------------------ metadata
    async def _metadata_loop(self) -> None:
        assert self.core is not None
        failures = 0
        while True:
            try:
                resp = await self.metadata_channel.request(
                    lambda c: metadata_fetch_request(c, self.next_metadata_offset,
                                                     self.cfg.metadata_fetch_max_wait_ms),
                    # a controller that stops answering (cut off, stopped) is left after the
                    # quorum's fetch timeout, as a Raft observer does, not only when it says so
                    self.cfg.metadata_fetch_max_wait_ms / 1000 + self.cfg.controller_quorum_fetch_timeout_ms / 1000)
                part = resp.responses[0].partitions[0]
                if resp.error_code.value or part.error_code.value:
                    raise ClientError(f"metadata fetch: {resp.error_code.name}/{part.error_code.name}")
            except (ClientError, OSError, IndexError) as exc:
                failures += 1
                log.warning("metadata fetch failed: %s", exc)
                await asyncio.sleep(min(0.1 * 2 ** min(failures, 6), 5.0))
                continue
            failures = 0
            self.metadata_hwm = part.high_watermark
            snap = getattr(part, "snapshot_id", None)
            if snap is not None and snap.end_offset > self.next_metadata_offset:
                await self._load_metadata_snapshot((snap.end_offset, snap.epoch))
            elif part.records:
                self._replay(bytes(part.records))
            self._maybe_ready()

    async def _load_metadata_snapshot(self, snapshot_id: tuple[int, int]) -> None:
        """Behind the controller's log start: take its snapshot (FetchSnapshot) as the image;
        what differs from ours is published like replayed records."""
        try:
            image, end, _ = snapshot_format.decode(await fetch_metadata_snapshot(self.metadata_channel, snapshot_id))
        except (ClientError, OSError, snapshot_format.SnapshotError) as exc:
            log.warning("metadata snapshot %s failed: %s", snapshot_id, exc)
            await asyncio.sleep(0.2)
            return
        self.image.replace_with(image)
        self.next_metadata_offset = end
        self.events.emit("metadata_snapshot_loaded", end_offset=end, epoch=snapshot_id[1])
        self._publish()

    def _replay(self, data: bytes) -> None:
        assert self.core is not None
        applied = 0
        try:
            for header, recs in decode_batches(data):
                for i, rec in enumerate(recs):
                    offset = header.base_offset + i
                    if offset < self.next_metadata_offset or offset >= self.metadata_hwm:
                        continue
                    self.image.replay(rec, offset)
                    self.next_metadata_offset = offset + 1
                    applied += 1
        except (ImageError, ValueError) as exc:
            self._halt(f"cannot replay the metadata log at offset {self.next_metadata_offset}: {exc}")
            return
        if not applied:
            return
        self._publish()

    def _publish(self) -> None:
        initial = not self.published
        if initial and self.next_metadata_offset < self.metadata_hwm:
            return  # the first publish waits for the whole image (strays need all of it)
        self.published = True
        changes = self.image.drain_changes()
        pcs = partition_changes(changes, self.cfg.node_id,
                                lambda t: self.image.topics[t].name if t in self.image.topics else None)
        if pcs or initial:
            self.events.emit("metadata_published", offset=self.image.last_offset, partitions=len(pcs), initial=initial)
        self._feed(self.core.apply_metadata(pcs, self._now(), offset=self.image.last_offset, initial=initial))
        if self.dataplane is not None and self.dataplane.api is not None:
            self.dataplane.api.on_image_changes(changes)

    def _maybe_ready(self) -> None:
        """Ready to unfence once registered and caught up with the metadata that holds our
        registration (Kafka: initial catch-up + first publish)."""
        assert self.core is not None
        if self.ready or not self.published or not self.core.lifecycle.registered:
            return
        me = self.image.brokers.get(self.cfg.node_id)
        if me is None or me.epoch != self.core.lifecycle.broker_epoch:
            return
        if self.next_metadata_offset < self.metadata_hwm:
            return
        self.ready = True
        assert self.dataplane is not None
        self._spawn(self.dataplane.start_listener())
        self.events.emit("ready_to_unfence", metadata_offset=self.image.last_offset,
                         queued_assignments=self.core.queued_replica_to_dir_assignments)
        self._feed(self.core.set_ready_to_unfence(self._now()))

    # ------------------------------------------------------------------ probe + checkpoints
    async def _maintenance(self) -> None:
        """Probe (on the dir's probe worker), checkpoints and time-based flushes (on its data
        worker), per data dir: a slow dir's round takes long without delaying the other
        dirs' rounds (a dir whose previous round is still running is skipped), and nothing
        here runs on the loop."""
        lm = self.lm
        assert lm is not None
        probe_ms = self.cfg.log_dir_probe_interval_ms
        step_ms = min(x for x in (probe_ms or 1000, HW_CHECKPOINT_INTERVAL_MS) if x > 0)
        start = self._now()
        last = {path: [start, start, start] for path in self.dir_io.executors}  # probe, HW, recovery point
        running: dict[str, concurrent.futures.Future] = {}
        probing: dict[str, concurrent.futures.Future] = {}
        while True:
            await asyncio.sleep(step_ms / 1000)
            now = self._now()
            data_dirs = set(lm.online_dirs())
            # probe_targets: the online data dirs AND a separate metadata.log.dir (nothing else
            # touches that disk; its failure must reach the core, which halts the broker)
            for path in lm.probe_targets():
                stamps = last.setdefault(path, [now, now, now])
                if probe_ms and now - stamps[0] >= probe_ms and (path not in probing or probing[path].done()):
                    stamps[0] = now
                    probing[path] = self.dir_io.submit_probe(path, self._dir_round, path, True, False, False, None)
                if path not in data_dirs:
                    continue  # the metadata dir holds no partition logs: no checkpoints or flushes
                if path in running and not running[path].done():
                    continue  # its previous round is still on the disk
                hw = now - stamps[1] >= HW_CHECKPOINT_INTERVAL_MS
                rp = now - stamps[2] >= RECOVERY_CHECKPOINT_INTERVAL_MS
                stamps[1] = now if hw else stamps[1]
                stamps[2] = now if rp else stamps[2]
                running[path] = self.dir_io.submit(path, self._dir_round, path, False, hw, rp, now)

    def _dir_round(self, path: str, probe: bool, hw: bool, rp: bool, now_ms: int | None) -> None:
        """One dir's maintenance round (the probe on the dir's probe worker, the rest on its
        data worker); failures go through the channel."""
        lm = self.lm
        assert lm is not None
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

    # ------------------------------------------------------------------ stop
    def request_shutdown(self) -> None:
        """SIGTERM: controlled shutdown (want_shut_down); a second one stops at once."""
        assert self.core is not None
        if self.core.lifecycle.want_shut_down:
            self._finish(0, "second shutdown signal")
            return
        self._feed(self.core.begin_controlled_shutdown(self._now()))

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
        self._wake.set()
        if self.dataplane is not None:
            await bounded("dataplane", self.dataplane.stop(), 0.3)
        tasks = self._tasks + list(self._bg)
        for t in tasks:
            t.cancel()
        if tasks:
            await bounded("tasks", asyncio.wait(tasks), 0.2)
        channels = [ch for ch in (getattr(self, "channel", None), getattr(self, "metadata_channel", None),
                                  getattr(self, "data_channel", None)) if ch is not None]
        if channels:
            await bounded("controller_connections", asyncio.gather(*(ch.close() for ch in channels),
                                                                   return_exceptions=True), 0.2)
        pool = getattr(self, "_storage_pool", None)
        if pool is not None:
            pool.close()
        dir_io = getattr(self, "dir_io", None)
        if dir_io is not None:  # let the queued steps finish first (bounded: a hung dir's never do)
            dir_io.close()
            budget = max(0.05, (deadline - loop.time()) * 0.3)
            await bounded("dir_workers", asyncio.wrap_future(daemon_call(lambda: dir_io.join(budget))), 0.35)
        if self.lm is not None:
            # bounded: a hung dir must not keep the process alive (its logs stay unflushed,
            # no clean-shutdown marker: recovery at the next start)
            await bounded("close_logs", asyncio.wrap_future(daemon_call(self.lm.close)), 1.0)
            if "close_logs" in late:
                log.warning("closing the logs timed out after %.1f s (a hung log dir)", steps["close_logs"] / 1000)
                self.events.emit("close_timed_out", timeout_s=round(steps["close_logs"] / 1000, 2))
        self.events.emit("stopped", steps_ms=steps, left_behind=late)
        self.events.close()
