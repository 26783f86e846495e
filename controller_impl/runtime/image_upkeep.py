"""The controller's image kept in step with the metadata log: a follower's lazy apply of
committed records, a new leader's catch-up, a resigned leader's rebuild to the committed
image, the node events of committed changes, and snapshots of the committed image.

:class:`ImageUpkeep` is mixed into :class:`~controller_impl.runtime.controller.ControllerRuntime`
and works on its attributes (image, raft, log, snapshots, the state-machine lock)."""

from __future__ import annotations

import asyncio
import time

from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.records import NoOpRecord

from controller_impl.runtime import state_api
from controller_impl.runtime.change_events import emit_broker_changes, partition_change_lines
from controller_impl.runtime.image_io import FatalError, apply_batches, load_image, read_tail, without_gc
from controller_impl.runtime.leader_writes import NotActive

# a follower applies committed records once none arrived for APPLY_QUIET_MS, or the oldest
# waiting commit is APPLY_MAX_DELAY_MS old; APPLY_CHUNK_BYTES of batches per worker-thread
# hop (the loop runs in between)
APPLY_QUIET_MS = 100
APPLY_MAX_DELAY_MS = 1000
APPLY_CHUNK_BYTES = 2 << 20


class ImageUpkeep:
    """Image upkeep of :class:`~controller_impl.runtime.controller.ControllerRuntime`."""

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
