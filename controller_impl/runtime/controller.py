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
import datetime
import os
import sys
import time
from collections import deque
from typing import Any

from kafka_common import meta_properties, wire
from kafka_common.config import ServerConfig
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.records import NoOpRecord
from kafka_common.wire import ErrorCode
from kafka_runtime.clock import SystemClock
from kafka_runtime.events import EventLog
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.request_context import RequestContext, SecurityConfig
from kafka_runtime.server import KafkaServer

from controller_impl.log import MetadataLog
from controller_impl.log.snapshots import SnapshotStore
from controller_impl.raft import messages as m
from controller_impl.raft.quorum import LEADER
from controller_impl.runtime import raft_wire as rw
from controller_impl.runtime import state_api
from controller_impl.runtime.change_events import emit_broker_changes, partition_change_lines
from controller_impl.runtime.metadata_fetch import serve_fetch
from controller_impl.runtime.image_io import (BIG_CHANGE_RECORDS, FatalError, ReplayFailed, apply_batches, compute,
                                              load_image, log_big_change, read_tail, replay_records, without_gc)
from controller_impl.runtime.raft_node import RaftNode
from controller_impl.state import configs
from controller_impl.state.authz import API_RULES

FETCH = 1
# api_key -> (state handler name, reason written on partition_change events)
HANDLERS: dict[int, tuple[str, str]] = {
    62: ("handle_broker_registration", "broker_registration"),
    63: ("handle_broker_heartbeat", "heartbeat"),
    73: ("handle_assign_replicas_to_dirs", "assign_replicas_to_dirs"),
    56: ("handle_alter_partition", "alter_partition"),
    19: ("handle_create_topics", "create_topics"),
    33: ("handle_alter_configs", "alter_configs"),
    44: ("handle_incremental_alter_configs", "incremental_alter_configs"),
    64: ("handle_unregister_broker", "unregister_broker"),
}
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    FETCH: (4, 17), 62: (2, 4), 63: (1, 2), 73: (0, 0), 56: (2, 3), 19: (2, 7), 64: (0, 0),
    33: (0, 2), 44: (0, 1),
    **rw.RAFT_VERSIONS,
}
TICK_INTERVAL_MS = 100
# a follower applies committed records once none arrived for APPLY_QUIET_MS, or the oldest
# waiting commit is APPLY_MAX_DELAY_MS old; APPLY_CHUNK_BYTES of batches per worker-thread
# hop (the loop runs in between)
APPLY_QUIET_MS = 100
APPLY_MAX_DELAY_MS = 1000
APPLY_CHUNK_BYTES = 2 << 20
# handlers whose work is O(1) (a heartbeat without offline dirs, a registration): run on the
# loop; the others may touch any number of partitions and run in a worker thread
INLINE_HANDLERS = frozenset({"handle_broker_heartbeat", "handle_broker_registration"})
# results written as one batch whatever their size (all or nothing); the others are split
# into batches of MAX_RECORDS_PER_BATCH as Kafka's controller does
ATOMIC_HANDLERS = frozenset({"handle_create_topics", "handle_broker_registration"})
ZERO = datetime.timedelta(0)


class NotActive(Exception):
    """This controller is not (or no longer) the active one."""


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
        self.snapshots: SnapshotStore | None = None
        self.raft: RaftNode | None = None
        self.state: Any = None
        self.server: KafkaServer | None = None
        self._commit_event = asyncio.Event()
        self._tick_task: asyncio.Task | None = None
        self._snapshot_task: asyncio.Task | None = None
        self.fatal: asyncio.Future | None = None
        self.supported_apis: dict[int, tuple[int, int]] = dict(DEFAULT_VERSIONS)
        self.api_rules = dict(API_RULES)  # the listener enforces them (permission, before auth)
        # one holder at a time of the image and the state machine: a leader's request (its
        # pure handler, encoding and optimistic replay run in a worker thread, so a
        # 100k-record change never stalls Raft on the loop), a follower's apply of committed
        # records, the new leader's catch-up, a resigned leader's rebuild
        self._sm_lock = asyncio.Lock()
        self._apply_upto = 0
        self._apply_pending_since_ms = 0
        self._apply_task: asyncio.Task | None = None
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()
        self._pending_events: deque[tuple[int, list, str, Any]] = deque()
        self._committed_events: deque[tuple[int, list, str, Any]] = deque()
        self._emit_task: asyncio.Task | None = None
        self._last_written = -1
        self._last_write_ms = 0
        # the image holds records the log may not (an optimistic replay whose batch was
        # never appended, or uncommitted records of a lost leadership): rebuilt before use
        self._image_ahead = False
        self._last_snapshot_end = 0
        self._last_snapshot_ms = 0
        self.stats = {"commits": 0, "records": 0, "snapshots": 0}

    # -- life cycle -------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.state is not None and self.raft is not None and self.raft.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.raft.state.epoch if self.raft and self.raft.state else 0

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
        self._last_snapshot_end = snap_end
        self._last_snapshot_ms = self.clock.monotonic_ms()
        rec = self.log.recovery
        if rec.truncated_at is not None or rec.removed_segments:
            self.events.emit("metadata_log_truncated", segment=rec.truncated_at[0] if rec.truncated_at else "",
                             position=rec.truncated_at[1] if rec.truncated_at else 0,
                             bytes=rec.truncated_bytes, reason=rec.reason,
                             removed_segments=rec.removed_segments)
            self._log_line(f"metadata log: truncated torn/corrupt tail: {rec.reason}")
        self.supported_apis = state_api.supported_apis(
            state_api.make_state(MetadataImage(), cfg, self.cluster_id, 0), DEFAULT_VERSIONS)
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
                         cluster_id=self.cluster_id, startup_ms=int((time.monotonic() - t0) * 1000))
        self._log_line(f"listening on {listener.host}:{self.server.port} ({listener_name}); "
                       f"voters {sorted(self.raft.voters)}")
        await self.raft.start()
        self._tick_task = asyncio.get_running_loop().create_task(self._ticker())

    async def stop(self) -> None:
        if self._emit_task is not None and not self._emit_task.done():
            try:  # committed changes' events: finish writing them
                await asyncio.wait_for(asyncio.shield(self._emit_task), 10)
            except (asyncio.TimeoutError, Exception):
                pass
        for task in (self._tick_task, self._snapshot_task, self._apply_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass
        if self.server is not None:
            self.server.stop_accepting()
        if self.raft is not None:
            halted = self.fatal is not None and self.fatal.done()
            await self.raft.stop(resign=not halted)
        self._fail_waiters()
        if self.server is not None:
            await self.server.stop()
        if self.log is not None:
            self.log.close()
        self.events.emit("controller_stopped")

    def _halt(self, reason: str) -> None:
        if self.fatal is not None and not self.fatal.done():
            self.events.emit("halt", reason=reason)
            self._log_line(f"halt: {reason}")
            self.fatal.set_result(reason)

    # -- the Raft node's owner interface ----------------------------------------------
    def on_fatal(self, reason: str) -> None:
        self._halt(reason)

    def on_role_change(self, change: m.RoleChange) -> None:
        if change.previous_role == LEADER and change.role != LEADER:
            self._resign()
        if change.role == LEADER and change.previous_role != LEADER:
            self._spawn(self._activate(change.epoch))

    def on_epoch_start(self, epoch: int) -> None:
        pass  # written by _activate, once the image holds the whole log

    def on_commit(self, hw: int) -> None:
        if self.active:
            while self._waiters and self._waiters[0][0] < hw:
                _, fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(None)
            committed = []
            while self._pending_events and self._pending_events[0][0] < hw:
                committed.append(self._pending_events.popleft())
            if committed:  # after the answers (a 100k-partition change writes 100k events)
                self._committed_events.extend(committed)
                if self._emit_task is None or self._emit_task.done():
                    self._emit_task = self._spawn(self._emit_committed())
            self.state.on_committed(hw - 1)
            self._maybe_snapshot(hw)
        elif not self.raft.is_leader:
            self._apply_upto = max(self._apply_upto, hw)
            if self._apply_task is None or self._apply_task.done():
                self._apply_pending_since_ms = self.clock.monotonic_ms()
                self._apply_task = self._spawn(self._apply_committed())
        self._commit_event.set()
        self._commit_event = asyncio.Event()

    def on_snapshot_installed(self, snapshot_id: tuple[int, int], blob: bytes) -> None:
        image, end, _ = snapshot_format.decode(blob)
        self.image = image  # a follower: nothing else holds it (an apply in flight sees the swap)
        self._last_snapshot_end = end
        self._log_line(f"installed snapshot {snapshot_id} from the leader")

    async def _emit_committed(self) -> None:
        """Node events of committed changes, in commit order, a slice at a time with the
        loop free in between (a dir failure of 100k replicas writes 100k lines)."""
        events = self.events
        while self._committed_events:
            _, records, reason, changes = self._committed_events.popleft()
            self.stats["commits"] += 1
            self.stats["records"] += len(records)
            emit_broker_changes(events, records, reason, changes)
            if not events.path and not events.echo:
                events.count += len(changes.partitions)  # nobody reads them: skip formatting
                continue
            for lines in partition_change_lines(events, self.image, reason, changes):
                events.write_lines(lines)
                await asyncio.sleep(0)

    def _spawn(self, coro) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(coro)

    async def _apply_committed(self) -> None:
        """A follower applies committed records off the loop (its fetch loop, which tells
        the leader what it holds, never waits for it), and lazily: not while records keep
        arriving (a big change being replicated: the fetches and fsyncs of the commit path
        come first), but once none came for ``APPLY_QUIET_MS`` or the oldest waiting commit
        is ``APPLY_MAX_DELAY_MS`` old. Its image serves snapshots and a leadership, and a
        new leader applies the rest of its log before it acts anyway."""
        while True:
            now = self.clock.monotonic_ms()
            wait_ms = min(self.raft.last_append_ms + APPLY_QUIET_MS,
                          self._apply_pending_since_ms + APPLY_MAX_DELAY_MS) - now
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
                continue
            async with self._sm_lock:
                if self.raft.is_leader or self.image.last_offset + 1 >= self._apply_upto:
                    return
                upto = self._apply_upto
                try:
                    data = read_tail(self.log, self.image, upto, APPLY_CHUNK_BYTES)
                    await asyncio.to_thread(apply_batches, self.image, data, upto)
                except Exception as exc:
                    self._halt(f"cannot replay committed records below {upto}: {type(exc).__name__}: {exc}")
                    return
                self.image.drain_changes()
                self._maybe_snapshot(self.raft.state.high_watermark)

    async def _activate(self, epoch: int) -> None:
        async with self._sm_lock:
            if not self.raft.is_leader or self.raft.state.epoch != epoch:
                return
            applied = 0
            end = self.log.end_offset
            hw = self.raft.state.high_watermark
            tail_changes = None
            try:  # the whole log commits with us: the image takes all of it
                if self._image_ahead or self.image.last_offset + 1 > end:
                    await self._rebuild_image(min(hw, end))
                for upto in (min(hw, end), end):
                    while self.image.last_offset + 1 < upto:
                        applied += await asyncio.to_thread(apply_batches, self.image,
                                                           read_tail(self.log, self.image, upto), upto)
                    if upto == min(hw, end):
                        self.image.drain_changes()       # committed before us: already reported
                    else:
                        tail_changes = self.image.drain_changes()
            except Exception as exc:
                self._halt(f"cannot replay the log as the new leader: {type(exc).__name__}: {exc}")
                return
            if not self.raft.is_leader or self.raft.state.epoch != epoch:
                self._image_ahead = True
                return  # lost it meanwhile: _resign rebuilds
            if tail_changes is not None and not tail_changes.is_empty():
                # the previous leader's uncommitted tail commits with our first record: its
                # changes are reported then (a dir failure written just before a failover)
                self._pending_events.append((end - 1, [], "previous_leader", tail_changes))
            self.state = state_api.make_state(self.image, self.cfg, self.cluster_id, self.clock.monotonic_ms(),
                                             on_problem=lambda text: self._log_line(text))
            self._last_written = self.log.end_offset - 1
            try:
                self._write([NoOpRecord()], "leader_change")
            except FatalError:
                return
            self.events.emit("controller_active", epoch=epoch, end_offset=self.log.end_offset, replayed=applied)
            self._log_line(f"active controller in epoch {epoch} (log end {self.log.end_offset})")

    def _resign(self) -> None:
        was_active = self.state is not None
        self.state = None
        self._pending_events.clear()
        self._fail_waiters()
        hw = self.raft.state.high_watermark
        if self.image.last_offset >= hw:
            self._image_ahead = True  # uncommitted records of ours: the log may lose them
        if was_active:
            self.events.emit("controller_inactive", epoch=self.raft.state.epoch, high_watermark=hw)
        self._spawn(self._rebuild_committed())

    async def _rebuild_committed(self) -> None:
        """Back to the committed image after losing the leadership with records pending
        (waits for a request still being computed: it may add more)."""
        async with self._sm_lock:
            hw = self.raft.state.high_watermark
            if self.raft.is_leader or not (self._image_ahead or self.image.last_offset >= hw):
                return  # a leader again: _activate rebuilds it
            try:
                await self._rebuild_image(hw)
            except Exception as exc:
                self._halt(f"cannot rebuild the committed image: {type(exc).__name__}: {exc}")
                return
            self._log_line(f"image rebuilt to the high watermark {hw}")
        if self._apply_upto > hw:
            self.on_commit(self._apply_upto)

    async def _rebuild_image(self, upto: int) -> None:
        """The image afresh: the newest snapshot + the log below ``upto`` (lock held)."""
        self.image = await asyncio.to_thread(load_image, self.log, self.snapshots, None)
        while self.image.last_offset + 1 < upto:
            await asyncio.to_thread(apply_batches, self.image, read_tail(self.log, self.image, upto), upto)
        self.image.drain_changes()
        self._image_ahead = False

    def _fail_waiters(self) -> None:
        while self._waiters:
            _, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(NotActive())

    # -- state changes ----------------------------------------------------------------
    def _write(self, records: list[Any], reason: str) -> int:
        """Append + replay at once, on the loop (small writes); returns the last offset."""
        try:
            first, last = self.raft.append(records)
        except OSError as exc:
            self._halt(f"cannot write the metadata log: {exc}")
            raise FatalError(str(exc)) from None
        try:
            for i, record in enumerate(records):
                self.image.replay(record, first + i)
        except Exception as exc:
            self._halt(f"replay of a record just written failed at offset {first}: {exc}")
            raise FatalError(str(exc)) from None
        self._pending_events.append((last, records, reason, self.image.drain_changes()))
        self._last_written = last
        self._last_write_ms = self.clock.monotonic_ms()
        return last

    async def _run(self, fn_name: str, request: Any, reason: str) -> Any:
        if self.fatal is not None and self.fatal.done():
            raise FatalError("controller halted")
        if not self.active:
            raise NotActive()
        await self._sm_lock.acquire()
        handed_over = False  # the lock passes to the install task of a deferred install
        try:
            state, epoch, base = self.state, self.raft.state.epoch, self.log.end_offset
            if not self.active or state is None:
                raise NotActive()
            now = self.clock.monotonic_ms()
            atomic = fn_name in ATOMIC_HANDLERS
            if fn_name in INLINE_HANDLERS and not getattr(request, "offline_log_dirs", None):
                # small: a thread hop would cost more than the work
                result, chunks, datas, timings, plan = compute(state, fn_name, request, now, base, epoch, atomic)
                inline = True
            else:
                result, chunks, datas, timings, plan = await asyncio.to_thread(
                    without_gc, compute, state, fn_name, request, now, base, epoch, atomic)
                inline = False
            if chunks and plan is not None:
                last = self._append_then_install(chunks, datas, plan, epoch, base, reason, timings)
                handed_over = True
                log_big_change(fn_name, last - base + 1, len(chunks), timings)
            elif chunks:
                last = await self._append_chunks(chunks, datas, epoch, base, inline, reason, timings)
                log_big_change(fn_name, last - base + 1, len(chunks), timings)
            else:
                last = self._last_written
        finally:
            if not handed_over:
                self._sm_lock.release()
        if last >= self.raft.state.high_watermark:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append((last, fut))
            await fut
        return result.response

    def _append_then_install(self, chunks: list[tuple[list[Any], Any]], datas: list[bytes], first: list[int],
                             epoch: int, base: int, reason: str, timings: dict) -> int:
        """A big result of partition changes merged from this image
        (:func:`~controller_impl.runtime.image_io.plan_deferred_install`): its broker
        records replayed (``first``: a refusal still writes nothing), every batch appended,
        and the merges installed by a task that holds the state-machine lock until done —
        the answer waits for the commit only, while the image takes the change. Called with
        the lock held; returns the last offset written."""
        records = [rec for chunk, _ in chunks for rec in chunk]
        pairs = [m for _, merged in chunks for m in merged if m is not None]
        try:
            for i in first:
                self.image.replay(records[i], base + i)
        except Exception as exc:
            self._image_ahead = True
            self._halt(f"replay of a record just produced failed at offset {base + i}: {exc}")
            raise FatalError(str(exc)) from None
        offset = base
        try:
            for data in datas:
                if not self.active or self.raft.state.epoch != epoch or self.log.end_offset != offset:
                    raise NotActive()
                try:
                    _, last = self.raft.append_encoded(data)
                except OSError as exc:
                    self._halt(f"cannot write the metadata log: {exc}")
                    raise FatalError(str(exc)) from None
                offset = last + 1
                self._last_written = last
                self._last_write_ms = self.clock.monotonic_ms()
        except BaseException:
            self._image_ahead = True  # the broker records are in the image, maybe not in the log
            if offset > base and self.active and self.raft.state.epoch == epoch:
                # what was written is reported if it commits (the image is rebuilt anyway)
                self._pending_events.append((offset - 1, records[:offset - base], reason,
                                             self.image.drain_changes()))
            raise
        self._spawn(self._install(pairs, offset - 1, records, reason, epoch, timings))
        return offset - 1

    async def _install(self, pairs: list[Any], last: int, records: list[Any], reason: str, epoch: int,
                       timings: dict) -> None:
        """The deferred half of :meth:`_append_then_install` (owns the state-machine lock)."""
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(without_gc, self.image.install_merged, pairs, last)
            changes = self.image.drain_changes()
            if self.active and self.raft.state.epoch == epoch:
                self._queue_events(last, records, reason, changes)
            else:
                self._image_ahead = True  # uncommitted records of a lost leadership: rebuilt
        except Exception as exc:
            self._image_ahead = True
            self._halt(f"cannot install a change just written at offset {last}: {type(exc).__name__}: {exc}")
        finally:
            self._sm_lock.release()
        if len(records) >= BIG_CHANGE_RECORDS:
            self._log_line(f"installed {len(pairs)} merged partition changes in "
                           f"{(time.perf_counter() - t0) * 1000:.0f} ms after the append")

    def _queue_events(self, last: int, records: list[Any], reason: str, changes: Any) -> None:
        """A change's node events: written once ``last`` is committed (now if it is)."""
        if last < self.raft.state.high_watermark:
            self._committed_events.append((last, records, reason, changes))
            if self._emit_task is None or self._emit_task.done():
                self._emit_task = self._spawn(self._emit_committed())
        else:
            self._pending_events.append((last, records, reason, changes))

    async def _append_chunks(self, chunks: list[tuple[list[Any], Any]], datas: list[bytes], epoch: int, base: int,
                             inline: bool, reason: str, timings: dict) -> int:
        """Replay then append each batch in turn (holding the state-machine lock): the
        followers copy and sync batch k while batch k+1 is replayed here. A batch is
        appended only once the image took it (a record the image refuses is never
        written); if the leadership is lost in between, the image has run ahead of the
        log and is rebuilt (:meth:`_resign`, :meth:`_activate`)."""
        offset = base
        written: list[Any] = []
        t_replay = 0.0
        try:
            for (chunk, merged), data in zip(chunks, datas):
                t0 = time.perf_counter()
                try:
                    if inline:
                        replay_records(self.image, chunk, offset, merged)
                    else:
                        await asyncio.to_thread(without_gc, replay_records, self.image, chunk, offset, merged)
                except ReplayFailed as exc:
                    self._image_ahead = True
                    self._halt(str(exc))
                    raise FatalError(str(exc)) from None
                t_replay += time.perf_counter() - t0
                if not self.active or self.raft.state.epoch != epoch or self.log.end_offset != offset:
                    self._image_ahead = True  # the image ran ahead of a log we no longer write
                    raise NotActive()
                try:
                    _, last = self.raft.append_encoded(data)
                except OSError as exc:
                    self._image_ahead = True
                    self._halt(f"cannot write the metadata log: {exc}")
                    raise FatalError(str(exc)) from None
                written.extend(chunk)
                offset = last + 1
                self._last_written = last
                self._last_write_ms = self.clock.monotonic_ms()
        finally:
            changes = self.image.drain_changes()
            if written and self.active and self.raft.state.epoch == epoch:
                # reported when committed, whatever happened to the rest (after a lost
                # leadership the next leader reports what commits of it)
                self._pending_events.append((offset - 1, written, reason, changes))
        timings["replay"] = t_replay * 1000
        return offset - 1

    async def _ticker(self) -> None:
        interval_s = TICK_INTERVAL_MS / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self.active:
                continue
            try:
                await self._run("tick", None, "session_timeout")
                idle_ms = self.cfg.metadata_max_idle_interval_ms
                if idle_ms and self.active and not self._sm_lock.locked() \
                        and self.clock.monotonic_ms() - self._last_write_ms >= idle_ms:
                    # Kafka's NoOpRecord every metadata.max.idle.interval.ms: the quorum's
                    # liveness shows in the log, and a failed metadata disk is seen at once
                    self._write([NoOpRecord()], "idle")
            except (FatalError, NotActive):
                continue
            except Exception as exc:
                self.events.emit("tick_error", error=f"{type(exc).__name__}: {exc}")
                self._log_line(f"tick failed: {type(exc).__name__}: {exc}")

    # -- snapshots --------------------------------------------------------------------
    def _maybe_snapshot(self, hw: int) -> None:
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        if self._snapshot_due(hw):
            self._snapshot_task = asyncio.get_running_loop().create_task(self._take_snapshot())

    def _snapshot_due(self, hw: int) -> bool:
        if self.image.last_offset + 1 != hw or hw <= self._last_snapshot_end:
            return False  # only a committed image is snapshotted (the leader's may run ahead)
        if hw - self._last_snapshot_end >= self.cfg.metadata_snapshot_record_count:
            return True
        interval = self.cfg.metadata_snapshot_interval_ms
        return interval > 0 and self.clock.monotonic_ms() - self._last_snapshot_ms >= interval

    async def _take_snapshot(self) -> None:
        """The committed image's state, taken in a worker thread while nothing else touches
        the image (the state-machine lock), then written."""
        async with self._sm_lock:
            hw = self.raft.state.high_watermark
            if self._image_ahead or not self._snapshot_due(hw):
                return
            epoch = self.raft.state.log.epoch_of(hw - 1)
            if epoch is None:
                return
            state = await asyncio.to_thread(without_gc, self.image.snapshot_state)
        await self._write_snapshot(state, hw, epoch)

    async def _write_snapshot(self, state: tuple, end: int, epoch: int) -> None:
        t0 = time.monotonic()
        try:
            blob = await asyncio.to_thread(snapshot_format.encode_state, state, end, epoch)
            await asyncio.to_thread(self.snapshots.write, (end, epoch), blob)
        except OSError as exc:
            self._halt(f"cannot write a snapshot: {exc}")
            return
        self._last_snapshot_end = end
        self._last_snapshot_ms = self.clock.monotonic_ms()
        self.stats["snapshots"] += 1
        self.raft.state.log.snapshot_taken(end, epoch)
        async with self.raft.io_lock:
            start = self.log.drop_segments_before(end)
        self.raft.state.log.drop_before(start)
        self.events.emit("snapshot_written", end_offset=end, epoch=epoch, bytes=len(blob),
                         write_ms=int((time.monotonic() - t0) * 1000), log_start_offset=start)

    # -- the listener's handler -------------------------------------------------------
    async def handle(self, ctx: RequestContext, header: Any, request: Any) -> Any:
        key, version = ctx.api_key, ctx.api_version
        raft = self.raft
        if key == FETCH:
            return await serve_fetch(self, request, version)
        try:
            if key == rw.VOTE:
                return raft.handle_vote(request, version)
            if key == rw.BEGIN:
                return raft.handle_begin(request, version)
            if key == rw.END:
                return raft.handle_end(request, version)
            if key == rw.FETCH_SNAPSHOT:
                return raft.handle_fetch_snapshot(request)
            if key == rw.DESCRIBE:
                return raft.describe(version)
        except rw.RaftWireError as exc:
            return wire.error_response(key, version, ErrorCode.invalid_request, str(exc))
        fn_name, reason = HANDLERS[key]
        if key == 63 and getattr(request, "offline_log_dirs", ()):
            reason = "log_dir_offline"
        try:
            return await self._run(fn_name, request, reason)
        except NotActive:
            why = f"controller {self.cfg.node_id} is not the active controller (leader {raft.state.leader_id})"
            if key == 19:  # CreateTopics has per-topic errors only
                mod = wire.response_module(19, version)
                topics = tuple(wire.make(mod.CreatableTopicResult, name=t.name, topic_id=None,
                                         error_code=ErrorCode.not_controller, error_message=why,
                                         num_partitions=-1, replication_factor=-1, configs=None)
                               for t in request.topics)
                return wire.make(wire.response_class(19, version), throttle_time=ZERO, topics=topics)
            if key in (33, 44):  # per-resource errors only
                return configs.not_controller_response(key, request, why)
            return wire.error_response(key, version, ErrorCode.not_controller, why)
