"""The controller process: CONTROLLER listener + Raft voter + the pure state machine.

Every controller is a Raft voter (``raft_node``) over the metadata log. The **active**
controller is the Raft leader; it runs the pure ``ControllerState``:

    handler(request, now_ms) -> ControllerResult(records, response)   (pure, reads the image)
    raft.append(records)          write one batch, no sync yet (group commit: one fsync for
                                  every request that arrived meanwhile, in a worker thread)
    image.replay(record, offset)  at once, optimistically: the next request sees it
    ... the response waits until the high watermark passes its records (a majority of
    voters hold them durably); a request that wrote nothing waits for the last record
    written before it, so no answer ever reveals an uncommitted change.

On commit the active controller writes the node events of what was committed and wakes the
brokers' metadata long-polls (brokers read committed records only). If it loses the
leadership with records still uncommitted, it fails their requests with NOT_CONTROLLER and
rebuilds its image from the newest snapshot + the log up to the high watermark (Kafka
reverts to its last committed in-memory snapshot the same way).

Every other controller applies committed records only, as the high watermark moves, and
answers broker-only RPCs with NOT_CONTROLLER (41) and the metadata Fetch with
NOT_LEADER_OR_FOLLOWER naming the leader. Each writes a snapshot of its committed image
every ``metadata.log.max.record.count.between.snapshots`` records (or
``metadata.log.max.snapshot.interval.ms``) and drops the log segments it covers; start-up
loads the newest snapshot and replays only the tail.

A failure to write the metadata log, the quorum-state file or a snapshot, or to replay a
record, is fatal: the controller logs a ``halt`` event with a one-line reason and exits
non-zero; the other voters elect a new leader.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from kafka_common import meta_properties, wire
from kafka_common.config import ServerConfig
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.image import MetadataImage
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.clock import SystemClock
from kafka_runtime.event_loop import running_loop_kind
from kafka_runtime.events import EventLog
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.request_context import RequestContext, SecurityConfig
from kafka_runtime.server import KafkaServer

from controller_impl.log import MetadataLog
from controller_impl.log.snapshots import SnapshotStore
from controller_impl.raft import messages as m
from controller_impl.raft.config import LEADER
from controller_impl.runtime import state_api
from controller_impl.runtime.change_events import CommitEvents
from controller_impl.runtime.image_io import FatalError, load_image
from controller_impl.runtime.image_upkeep import ImageUpkeep
from controller_impl.runtime.leader_balance import balance_loop
from controller_impl.runtime.leader_writes import LeaderWrites, NotActive
from controller_impl.runtime.raft_node import RaftNode
from controller_impl.runtime.request_table import REQUESTS, supported_apis
from controller_impl.state.authz import API_RULES


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
    """A controller process's runtime: its listener, Raft node, image and (when active)
    state machine — the one :class:`~controller_impl.runtime.host.ControllerHost` of its
    parts: the write path (``writes``), the image upkeep (``upkeep``), the committed
    changes' events (``changes``); requests are dispatched by :mod:`.request_table`."""

    def __init__(self, cfg: ServerConfig, *, events: EventLog | None = None, clock=None,
                 log=None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.events = events or EventLog(cfg.events_file, cfg.node_id, "controller")
        self._log_line = log or (lambda msg: print(f"kraft-controller[{cfg.node_id}]: {msg}",
                                                   file=sys.stderr, flush=True))
        self.cluster_id = ""
        self.image = MetadataImage()
        # the image holds records the log may not (an optimistic replay whose batch was
        # never appended, or uncommitted records of a lost leadership): rebuilt before use
        self.image_ahead = False
        self.log: MetadataLog | None = None  # set by start (so are snapshots and raft)
        self.snapshots: SnapshotStore | None = None
        self.raft: RaftNode | None = None
        self.state: Any = None
        self.server: KafkaServer | None = None
        self._tick_task: asyncio.Task | None = None
        self._balance_task: asyncio.Task | None = None
        self.fatal: asyncio.Future | None = None
        self.supported_apis: dict[int, tuple[int, int]] = supported_apis(REQUESTS)
        self.api_rules = dict(API_RULES)  # the listener enforces them (permission, before auth)
        # one holder at a time of the image and the state machine: a leader's request (its
        # pure handler, encoding and optimistic replay run in a worker thread, so a
        # 100k-record change never stalls Raft on the loop), a follower's apply of committed
        # records, the new leader's catch-up, a resigned leader's rebuild
        self.sm_lock = asyncio.Lock()
        self.changes = CommitEvents(self.events, lambda: self.image, self.spawn)
        self.writes = LeaderWrites(self)
        self.upkeep = ImageUpkeep(self)

    @property
    def stats(self) -> dict[str, int]:
        return {**self.changes.stats, **self.upkeep.stats}

    # -- the ControllerHost -----------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.state is not None and self.raft is not None and self.raft.is_leader

    @property
    def halted(self) -> bool:
        return self.fatal is not None and self.fatal.done()

    @property
    def leader_epoch(self) -> int:
        return self.raft.state.epoch if self.raft and self.raft.state else 0

    def halt(self, reason: str) -> None:
        if self.fatal is not None and not self.fatal.done():
            self.events.emit("halt", reason=reason)
            self._log_line(f"halt: {reason}")
            self.fatal.set_result(reason)

    def log_line(self, msg: str) -> None:
        self._log_line(msg)

    def spawn(self, coro) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(coro)

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.cfg
        self.fatal = asyncio.get_running_loop().create_future()
        self.cluster_id = read_cluster_id(cfg)
        listener_name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
        listener = cfg.listener(listener_name)
        if listener is None:
            raise FatalError(f"listeners: no listener named {listener_name} (controller.listener.names)")
        if cfg.node_id not in {v.node_id for v in cfg.controller_quorum_voters}:
            raise FatalError(f"controller.quorum.voters: node.id={cfg.node_id} is not one of the voters")
        t0 = time.monotonic()
        self.log = await asyncio.to_thread(
            MetadataLog.open, cfg.metadata_log_dir, segment_bytes=min(cfg.log_segment_bytes, 64 * 1024 * 1024))
        self.snapshots = SnapshotStore(self.log.directory)
        self.image = await asyncio.to_thread(load_image, self.log, self.snapshots)
        snap_end = self.image.last_offset + 1
        if snap_end > self.log.end_offset or self.log.start_offset > snap_end:
            self.log.reset_to(snap_end)  # the log is behind its snapshot: the snapshot wins
        self.upkeep.loaded(snap_end)
        rec = self.log.recovery
        if rec.truncated_at is not None or rec.removed_segments:
            self.events.emit("metadata_log_truncated", segment=rec.truncated_at[0] if rec.truncated_at else "",
                             position=rec.truncated_at[1] if rec.truncated_at else 0,
                             bytes=rec.truncated_bytes, reason=rec.reason,
                             removed_segments=rec.removed_segments)
            self._log_line(f"metadata log: truncated torn/corrupt tail: {rec.reason}")
        self._log_line(f"metadata log: snapshot at {snap_end}, log [{self.log.start_offset}, "
                       f"{self.log.end_offset}) opened in {time.monotonic() - t0:.3f}s")
        self.raft = RaftNode(cfg, self.cluster_id, self.log, self.snapshots, clock=self.clock,
                             events=self.events, log_line=self._log_line, owner=self)
        self.raft.open_state()
        self.server = KafkaServer(self, host=listener.host or "0.0.0.0", port=listener.port,
                                  listener_name=listener_name,
                                  security=SecurityConfig.for_listener(cfg, listener_name),
                                  limits=ListenerLimits.from_config(cfg),
                                  events=self.events, log=self._log_line)
        await self.server.start()
        self.events.emit("controller_started", port=self.server.port, end_offset=self.log.end_offset,
                         cluster_id=self.cluster_id, startup_ms=int((time.monotonic() - t0) * 1000),
                         event_loop=running_loop_kind())
        self._log_line(f"listening on {listener.host}:{self.server.port} ({listener_name}); "
                       f"voters {sorted(self.raft.voters)}")
        await self.raft.start()
        self._tick_task = asyncio.get_running_loop().create_task(self.writes.ticker())
        self._balance_task = asyncio.get_running_loop().create_task(balance_loop(self, self.writes))

    async def stop(self) -> None:
        await self.changes.finish(10)  # committed changes' events: finish writing them
        for task in (self._tick_task, self._balance_task, *self.upkeep.tasks()):
            if task is not None:
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass
        if self.server is not None:
            self.server.stop_accepting()
        if self.raft is not None:
            await self.raft.stop(resign=not self.halted)
        self.writes.fail_waiters()
        if self.server is not None:
            await self.server.stop()
        if self.log is not None:
            self.log.close()
        self.events.emit("controller_stopped")

    # -- the Raft node's owner interface ----------------------------------------------
    def on_fatal(self, reason: str) -> None:
        self.halt(reason)

    def on_role_change(self, change: m.RoleChange) -> None:
        if change.previous_role == LEADER and change.role != LEADER:
            self._resign()
        if change.role == LEADER and change.previous_role != LEADER:
            self.spawn(self._activate(change.epoch))

    def on_epoch_start(self, epoch: int) -> None:
        pass  # written by _activate, once the image holds the whole log

    def on_commit(self, hw: int) -> None:
        if self.active:
            self.writes.release(hw)
            self.changes.committed(hw)  # after the answers (a 100k-partition change writes 100k events)
            self.state.on_committed(hw - 1)
            self.upkeep.maybe_snapshot(hw)
        elif not self.raft.is_leader:
            self.upkeep.apply_later(hw)

    def on_snapshot_installed(self, snapshot_id: tuple[int, int], blob: bytes) -> None:
        image, end, _ = snapshot_format.decode(blob)
        self.image = image  # a follower: nothing else holds it (an apply in flight sees the swap)
        self.upkeep.last_snapshot_end = end
        self._log_line(f"installed snapshot {snapshot_id} from the leader")

    # -- leadership ---------------------------------------------------------------------
    async def _activate(self, epoch: int) -> None:
        """A new leader: the image takes the whole log, the state machine is built (fresh
        heartbeat sessions), the epoch's first record written."""
        async with self.sm_lock:
            applied = await self.upkeep.catch_up(epoch)
            if applied is None:
                return
            self.state = state_api.make_state(self.image, self.cfg, self.cluster_id, self.clock.monotonic_ms(),
                                              on_problem=lambda text: self._log_line(text))
            try:
                self.writes.begin_epoch()
            except FatalError:
                return
            self.events.emit("controller_active", epoch=epoch, end_offset=self.log.end_offset, replayed=applied)
            self._log_line(f"active controller in epoch {epoch} (log end {self.log.end_offset})")

    def _resign(self) -> None:
        was_active = self.state is not None
        self.state = None
        self.changes.clear_pending()
        self.writes.fail_waiters()
        self.upkeep.resigned(was_active)

    # -- the listener's handler -------------------------------------------------------
    async def handle(self, ctx: RequestContext, header: Any, request: Any) -> Any:
        key, version = ctx.api_key, ctx.api_version
        row = REQUESTS[key]  # the listener refused, from the header, what the table lacks
        if row.serve is not None:
            return await row.serve(self, request, version)
        reason = row.reason
        if key == ApiKey.BROKER_HEARTBEAT and getattr(request, "offline_log_dirs", ()):
            reason = "log_dir_offline"
        try:
            return await self.writes.run(row, request, reason)
        except NotActive:
            why = (f"controller {self.cfg.node_id} is not the active controller "
                   f"(leader {self.raft.state.leader_id})")
            if row.not_active is not None:  # per-item errors only
                return row.not_active(request, version, why)
            return wire.error_response(key, version, ErrorCode.not_controller, why)
