"""The controller process: CONTROLLER listener + metadata log + the pure state machine.

One asyncio loop, one lock around every state change, so changes are serialized:

    handler(request, now_ms) -> ControllerResult(records, response)   (pure, reads the image)
    log.append(records)  (+ fdatasync, in a worker thread so Fetch long-polls keep moving)
    image.replay(record, offset) for each record
    wake the metadata long-polls, write node events, send the response

A ``tick`` task runs the state machine's timers (session expiry fencing) the same way.
Fetch (API 1) of ``__cluster_metadata`` partition 0 is served straight from the log,
below the high watermark; a fetch at the end waits up to min(max_wait,
``metadata.fetch.max.wait.ms``) and is woken at once by a commit.

A failure to write the metadata log (OSError) or to replay a record just written is fatal:
the controller logs a ``halt`` event and the process exits non-zero (its state could no
longer be trusted to match the log).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import sys
import time
from typing import Any

from kafka_common import ids, meta_properties, wire
from kafka_common.config import ServerConfig
from kafka_common.wire import ErrorCode
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.records import RegisterBrokerRecord
from controller_impl.log import MetadataLog
from kafka_runtime.events import EventLog
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.server import KafkaServer, RequestContext, SecurityConfig
from controller_impl.runtime import state_api
from controller_impl.state.authz import API_RULES

FETCH = 1
# api_key -> (state handler name, reason written on partition_change events)
HANDLERS: dict[int, tuple[str, str]] = {
    62: ("handle_broker_registration", "broker_registration"),
    63: ("handle_broker_heartbeat", "heartbeat"),
    73: ("handle_assign_replicas_to_dirs", "assign_replicas_to_dirs"),
    56: ("handle_alter_partition", "alter_partition"),
    19: ("handle_create_topics", "create_topics"),
    64: ("handle_unregister_broker", "unregister_broker"),
}
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    FETCH: (4, 17), 62: (2, 4), 63: (1, 2), 73: (0, 0), 56: (2, 3), 19: (2, 7), 64: (0, 0),
}
TICK_INTERVAL_MS = 100


class FatalError(Exception):
    """The controller cannot go on (metadata log unwritable, replay mismatch, bad storage)."""


class SystemClock:
    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ns(self) -> int:
        return time.time_ns()


def read_cluster_id(cfg: ServerConfig) -> str:
    """cluster.id from the metadata dir's meta.properties (written by kraft-storage format)."""
    path = os.path.join(cfg.metadata_log_dir, meta_properties.FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            mp = meta_properties.parse(f.read(), source=path)
    except FileNotFoundError:
        raise FatalError(f"{cfg.metadata_log_dir}: not formatted (no meta.properties); "
                         f"run kraft-storage format first") from None
    except OSError as exc:
        raise FatalError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except meta_properties.MetaPropertiesError as exc:
        raise FatalError(str(exc)) from None
    if mp.node_id != cfg.node_id:
        raise FatalError(f"{path}: node.id={mp.node_id} but the config says node.id={cfg.node_id}")
    if cfg.cluster_id and cfg.cluster_id != mp.cluster_id:
        raise FatalError(f"{path}: cluster.id={mp.cluster_id} but the config says {cfg.cluster_id}")
    return mp.cluster_id


class ControllerRuntime:
    def __init__(self, cfg: ServerConfig, *, events: EventLog | None = None, clock=None,
                 log=None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.events = events or EventLog(cfg.events_file, cfg.node_id, "controller")
        self._log_line = log or (lambda msg: print(f"kraft-controller[{cfg.node_id}]: {msg}",
                                                   file=sys.stderr, flush=True))
        self.cluster_id = ""
        self.image = MetadataImage()
        self.log: MetadataLog | None = None
        self.state: Any = None
        self.server: KafkaServer | None = None
        self._lock = asyncio.Lock()
        self._commit_event = asyncio.Event()
        self._tick_task: asyncio.Task | None = None
        self.fatal: asyncio.Future | None = None
        self.supported_apis: dict[int, tuple[int, int]] = dict(DEFAULT_VERSIONS)
        self.api_rules = dict(API_RULES)  # the listener enforces them (permission, before auth)
        self.leader_epoch = 1
        self.stats = {"commits": 0, "records": 0}

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.cfg
        self.fatal = asyncio.get_running_loop().create_future()
        self.cluster_id = read_cluster_id(cfg)
        listener_name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
        listener = cfg.listener(listener_name)
        if listener is None:
            raise FatalError(f"listeners: no listener named {listener_name} (controller.listener.names)")
        t0 = time.monotonic()
        self.log = await asyncio.to_thread(
            MetadataLog.open, cfg.metadata_log_dir,
            segment_bytes=min(cfg.log_segment_bytes, 64 * 1024 * 1024), on_record=self.image.replay)
        self.image.drain_changes()
        rec = self.log.recovery
        if rec.truncated_at is not None or rec.removed_segments:
            self.events.emit("metadata_log_truncated", segment=rec.truncated_at[0] if rec.truncated_at else "",
                             position=rec.truncated_at[1] if rec.truncated_at else 0,
                             bytes=rec.truncated_bytes, reason=rec.reason,
                             removed_segments=rec.removed_segments)
            self._log_line(f"metadata log: truncated torn/corrupt tail: {rec.reason}")
        self.leader_epoch = max(1, self.log.last_epoch + 1)
        self.state = state_api.make_state(self.image, cfg, self.cluster_id, self.clock.monotonic_ms(),
                                         on_problem=lambda text: self._log_line(text))
        self.supported_apis = state_api.supported_apis(self.state, DEFAULT_VERSIONS)
        self._log_line(f"metadata log: {rec.batches} batches, {rec.records} records replayed in "
                       f"{time.monotonic() - t0:.3f}s; end offset {self.log.end_offset}")
        self.server = KafkaServer(self, host=listener.host or "0.0.0.0", port=listener.port,
                                  listener_name=listener_name,
                                  security=SecurityConfig.for_listener(cfg, listener_name),
                                  limits=ListenerLimits.from_config(cfg),
                                  events=self.events, log=self._log_line)
        await self.server.start()
        self.events.emit("controller_started", port=self.server.port, end_offset=self.log.end_offset,
                         cluster_id=self.cluster_id)
        self._log_line(f"listening on {listener.host}:{self.server.port} ({listener_name})")
        self._tick_task = asyncio.get_running_loop().create_task(self._ticker())

    async def stop(self) -> None:
        if self._tick_task is not None:
            self._tick_task.cancel()
            try:
                await self._tick_task
            except BaseException:
                pass
        # let an in-flight change finish (append + replay + response) before cutting
        # connections, so the image and the log never part ways on a clean stop
        if self.server is not None:
            self.server.stop_accepting()
        async with self._lock:
            if self.server is not None:
                await self.server.stop()
            if self.log is not None:
                self.log.close()
        self.events.emit("controller_stopped")

    def _halt(self, reason: str) -> None:
        self.events.emit("halt", reason=reason)
        self._log_line(f"halt: {reason}")
        if self.fatal is not None and not self.fatal.done():
            self.fatal.set_result(reason)

    # -- state changes ----------------------------------------------------------------
    async def _run(self, fn_name: str, request: Any, reason: str) -> Any:
        async with self._lock:
            if self.fatal is not None and self.fatal.done():
                raise FatalError("controller halted")
            now = self.clock.monotonic_ms()
            result = getattr(self.state, fn_name)(request, now) if request is not None \
                else getattr(self.state, fn_name)(now)
            records = list(result.records)
            if records:
                await self._commit(records, reason)
            return result.response

    async def _commit(self, records: list[Any], reason: str) -> None:
        assert self.log is not None
        try:
            first, _ = await asyncio.to_thread(self.log.append, records, leader_epoch=self.leader_epoch,
                                               timestamp_ms=time.time_ns() // 1_000_000)
        except OSError as exc:
            self._halt(f"cannot write the metadata log: {exc}")
            raise FatalError(str(exc)) from None
        try:
            for i, record in enumerate(records):
                self.image.replay(record, first + i)
        except Exception as exc:
            self._halt(f"replay of committed record failed at offset {first}: {exc}")
            raise FatalError(str(exc)) from None
        self.stats["commits"] += 1
        self.stats["records"] += len(records)
        commit_hook = getattr(self.state, "on_committed", None)
        if commit_hook is not None:
            commit_hook(self.log.high_watermark - 1)
        self._commit_event.set()
        self._commit_event = asyncio.Event()
        self._emit_changes(records, reason)

    def _emit_changes(self, records: list[Any], reason: str) -> None:
        changes = self.image.drain_changes()
        emit = self.events.emit
        registered = set()
        for rec in records:
            if isinstance(rec, RegisterBrokerRecord):
                registered.add(rec.broker_id)
                emit("registered", broker_id=rec.broker_id, broker_epoch=rec.broker_epoch,
                     incarnation_id=rec.incarnation_id, log_dirs=list(rec.log_dirs), fenced=rec.fenced)
        for broker_id, (old, new) in changes.brokers.items():
            if new is None:
                emit("unregistered", broker_id=broker_id)
                continue
            if broker_id in registered and (old is None or old.epoch != new.epoch):
                continue  # a new incarnation: "registered" says it all
            if old is not None and old.fenced != new.fenced:
                emit("fenced" if new.fenced else "unfenced", broker_id=broker_id,
                     broker_epoch=new.epoch, reason=reason)
            if old is not None and old.log_dirs != new.log_dirs and old.epoch == new.epoch:
                emit("broker_log_dirs_changed", broker_id=broker_id, log_dirs=list(new.log_dirs),
                     removed=[d for d in old.log_dirs if d not in new.log_dirs], reason=reason)
        if not self.events.path and not self.events.echo:
            self.events.count += len(changes.partitions)  # nobody reads them: skip formatting
            return
        for (topic_id, pid), (old, new) in changes.partitions.items():
            if new is None:
                continue
            topic = self.image.topics.get(topic_id)
            emit("partition_change", topic=topic.name if topic else ids.to_base64(topic_id),
                 topic_id=topic_id, partition=pid, leader=new.leader, isr=list(new.isr),
                 replicas=list(new.replicas), directories=list(new.directories),
                 leader_epoch=new.leader_epoch, partition_epoch=new.partition_epoch,
                 reason=reason if old is not None else "create_topics")

    async def _ticker(self) -> None:
        interval_s = TICK_INTERVAL_MS / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._run("tick", None, "session_timeout")
            except FatalError:
                return
            except Exception as exc:
                self.events.emit("tick_error", error=f"{type(exc).__name__}: {exc}")
                self._log_line(f"tick failed: {type(exc).__name__}: {exc}")

    # -- the listener's handler -------------------------------------------------------
    async def handle(self, ctx: RequestContext, header: Any, request: Any) -> Any:
        key, version = ctx.api_key, ctx.api_version
        if key == FETCH:
            return await self._fetch(request, version)
        fn_name, reason = HANDLERS[key]
        if key == 63 and getattr(request, "offline_log_dirs", ()):
            reason = "log_dir_offline"
        return await self._run(fn_name, request, reason)

    async def _fetch(self, request: Any, version: int) -> Any:
        log = self.log
        assert log is not None
        mod = wire.response_module(FETCH, version)
        cls = wire.response_class(FETCH, version)
        cluster_id = getattr(request, "cluster_id", None)
        if cluster_id is not None and cluster_id != self.cluster_id:
            return wire.error_response(FETCH, version, ErrorCode.inconsistent_cluster_id)
        by_id = version >= 13
        max_wait_ms = int(request.max_wait.total_seconds() * 1000) if request.max_wait else 0
        max_wait_ms = max(0, min(max_wait_ms, self.cfg.metadata_fetch_max_wait_ms))
        deadline = time.monotonic() + max_wait_ms / 1000

        def wanted(topic: Any) -> bool:
            if by_id:
                return ids.from_wire(topic.topic_id) == ids.METADATA_TOPIC_ID
            return topic.topic == ids.METADATA_TOPIC

        while True:
            hw = log.high_watermark
            has_data = any(wanted(t) and p.partition == 0 and p.fetch_offset < hw
                           for t in request.topics for p in t.partitions)
            remaining = deadline - time.monotonic()
            if has_data or remaining <= 0 or not request.topics:
                break
            try:
                await asyncio.wait_for(self._commit_event.wait(), remaining)
            except asyncio.TimeoutError:
                break
        hw = log.high_watermark
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                records = b""
                if not wanted(t) or p.partition != 0:
                    code = ErrorCode.unknown_topic_id if by_id and not wanted(t) else ErrorCode.unknown_topic_or_partition
                elif p.fetch_offset < 0 or p.fetch_offset > hw:
                    code = ErrorCode.offset_out_of_range
                else:
                    code = ErrorCode.none
                    records = log.read(p.fetch_offset, max(1, p.partition_max_bytes), limit=hw)
                parts.append(wire.make(mod.PartitionData, partition_index=p.partition, error_code=code,
                                       high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
                                       aborted_transactions=None, preferred_read_replica=-1,
                                       records=records))
            topics.append(wire.make(mod.FetchableTopicResponse, topic=t.topic if not by_id else None,
                                    topic_id=t.topic_id if by_id else None, partitions=tuple(parts)))
        return wire.make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                         session_id=0, responses=tuple(topics))
