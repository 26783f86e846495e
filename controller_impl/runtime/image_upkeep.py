"""The controller's image kept in step with the metadata log: a follower's lazy apply of
committed records, a new leader's catch-up, a resigned leader's rebuild to the committed
image, and snapshots of the committed image.

:class:`ImageUpkeep` is a part of the controller process behind the
:class:`~controller_impl.runtime.host.ControllerHost` protocol (image, raft, log, snapshots,
the state-machine lock); it owns the follower's apply and the snapshot schedule."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from kafka_common.metadata import snapshot as snapshot_format

from controller_impl.runtime.image_io import apply_batches, load_image, read_tail, without_gc

if TYPE_CHECKING:
    from controller_impl.runtime.host import ControllerHost

# a follower applies committed records once none arrived for APPLY_QUIET_MS, or the oldest
# waiting commit is APPLY_MAX_DELAY_MS old; APPLY_CHUNK_BYTES of batches per worker-thread
# hop (the loop runs in between)
APPLY_QUIET_MS = 100
APPLY_MAX_DELAY_MS = 1000
APPLY_CHUNK_BYTES = 2 << 20


class ImageUpkeep:
    """The controller's image kept in step with the metadata log (module docstring)."""

    def __init__(self, host: ControllerHost) -> None:
        self.host = host
        self._apply_upto = 0
        self._apply_pending_since_ms = 0
        self._apply_task: asyncio.Task | None = None
        self._snapshot_task: asyncio.Task | None = None
        self.last_snapshot_end = 0
        self._last_snapshot_ms = 0
        self.stats = {"snapshots": 0}

    def tasks(self) -> list[asyncio.Task | None]:
        """Its tasks, for the host to cancel at stop."""
        return [self._snapshot_task, self._apply_task]

    def loaded(self, snapshot_end: int) -> None:
        """Start-up: the image was loaded from the snapshot ending at ``snapshot_end``."""
        self.last_snapshot_end = snapshot_end
        self._last_snapshot_ms = self.host.clock.monotonic_ms()

    def apply_later(self, hw: int) -> None:
        """A follower's high watermark moved to ``hw``: the image follows, lazily."""
        self._apply_upto = max(self._apply_upto, hw)
        if self._apply_task is None or self._apply_task.done():
            self._apply_pending_since_ms = self.host.clock.monotonic_ms()
            self._apply_task = self.host.spawn(self._apply_committed())

    async def _apply_committed(self) -> None:
        """A follower applies committed records off the loop (its fetch loop, which tells
        the leader what it holds, never waits for it), and lazily: not while records keep
        arriving (a big change being replicated: the fetches and fsyncs of the commit path
        come first), but once none came for ``APPLY_QUIET_MS`` or the oldest waiting commit
        is ``APPLY_MAX_DELAY_MS`` old. Its image serves snapshots and a leadership, and a
        new leader applies the rest of its log before it acts anyway."""
        while True:
            now = self.host.clock.monotonic_ms()
            wait_ms = min(self.host.raft.last_append_ms + APPLY_QUIET_MS,
                          self._apply_pending_since_ms + APPLY_MAX_DELAY_MS) - now
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
                continue
            async with self.host.sm_lock:
                if self.host.raft.is_leader or self.host.image.last_offset + 1 >= self._apply_upto:
                    return
                upto = self._apply_upto
                try:
                    data = read_tail(self.host.log, self.host.image, upto, APPLY_CHUNK_BYTES)
                    await asyncio.to_thread(apply_batches, self.host.image, data, upto)
                except Exception as exc:
                    self.host.halt(f"cannot replay committed records below {upto}: {type(exc).__name__}: {exc}")
                    return
                self.host.image.drain_changes()
                self.maybe_snapshot(self.host.raft.state.high_watermark)

    async def catch_up(self, epoch: int) -> int | None:
        """A new leader's image takes the whole log (it all commits with us); returns the
        number of records replayed, or None if the leadership of ``epoch`` was lost
        meanwhile or the replay failed (halted). Called with the state-machine lock held."""
        if not self.host.raft.is_leader or self.host.raft.state.epoch != epoch:
            return None
        applied = 0
        end = self.host.log.end_offset
        hw = self.host.raft.state.high_watermark
        tail_changes = None
        try:  # the whole log commits with us: the image takes all of it
            if self.host.image_ahead or self.host.image.last_offset + 1 > end:
                await self._rebuild_image(min(hw, end))
            for upto in (min(hw, end), end):
                while self.host.image.last_offset + 1 < upto:
                    image = self.host.image
                    applied += await asyncio.to_thread(apply_batches, image, read_tail(self.host.log, image, upto),
                                                       upto)
                if upto == min(hw, end):
                    self.host.image.drain_changes()       # committed before us: already reported
                else:
                    tail_changes = self.host.image.drain_changes()
        except Exception as exc:
            self.host.halt(f"cannot replay the log as the new leader: {type(exc).__name__}: {exc}")
            return None
        if not self.host.raft.is_leader or self.host.raft.state.epoch != epoch:
            self.host.image_ahead = True
            return None  # lost it meanwhile: the host's resign rebuilds
        if tail_changes is not None and not tail_changes.is_empty():
            # the previous leader's uncommitted tail commits with our first record: its
            # changes are reported then (a dir failure written just before a failover)
            self.host.changes.pending(end - 1, [], "previous_leader", tail_changes)
        return applied

    def resigned(self, was_active: bool) -> None:
        """The leadership is lost (the state machine dropped, the waiting answers failed):
        back to the committed image."""
        hw = self.host.raft.state.high_watermark
        if self.host.image.last_offset >= hw:
            self.host.image_ahead = True  # uncommitted records of ours: the log may lose them
        if was_active:
            self.host.events.emit("controller_inactive", epoch=self.host.raft.state.epoch, high_watermark=hw)
        self.host.spawn(self._rebuild_committed())

    async def _rebuild_committed(self) -> None:
        """Back to the committed image after losing the leadership with records pending
        (waits for a request still being computed: it may add more)."""
        async with self.host.sm_lock:
            hw = self.host.raft.state.high_watermark
            if self.host.raft.is_leader or not (self.host.image_ahead or self.host.image.last_offset >= hw):
                return  # a leader again: its catch-up rebuilds it
            try:
                await self._rebuild_image(hw)
            except Exception as exc:
                self.host.halt(f"cannot rebuild the committed image: {type(exc).__name__}: {exc}")
                return
            self.host.log_line(f"image rebuilt to the high watermark {hw}")
        if self._apply_upto > hw:
            self.host.on_commit(self._apply_upto)

    async def _rebuild_image(self, upto: int) -> None:
        """The image afresh: the newest snapshot + the log below ``upto`` (lock held)."""
        self.host.image = await asyncio.to_thread(load_image, self.host.log, self.host.snapshots, None)
        while self.host.image.last_offset + 1 < upto:
            image = self.host.image
            await asyncio.to_thread(apply_batches, image, read_tail(self.host.log, image, upto), upto)
        self.host.image.drain_changes()
        self.host.image_ahead = False

    # -- snapshots --------------------------------------------------------------------
    def maybe_snapshot(self, hw: int) -> None:
        """A snapshot of the committed image if one is due."""
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        if self._snapshot_due(hw):
            self._snapshot_task = self.host.spawn(self._take_snapshot())

    def _snapshot_due(self, hw: int) -> bool:
        if self.host.image.last_offset + 1 != hw or hw <= self.last_snapshot_end:
            return False  # only a committed image is snapshotted (the leader's may run ahead)
        if hw - self.last_snapshot_end >= self.host.cfg.metadata_snapshot_record_count:
            return True
        interval = self.host.cfg.metadata_snapshot_interval_ms
        return interval > 0 and self.host.clock.monotonic_ms() - self._last_snapshot_ms >= interval

    async def _take_snapshot(self) -> None:
        """The committed image's state, taken in a worker thread while nothing else touches
        the image (the state-machine lock), then written."""
        async with self.host.sm_lock:
            hw = self.host.raft.state.high_watermark
            if self.host.image_ahead or not self._snapshot_due(hw):
                return
            epoch = self.host.raft.state.log.epoch_of(hw - 1)
            if epoch is None:
                return
            state = await asyncio.to_thread(without_gc, self.host.image.snapshot_state)
        await self._write_snapshot(state, hw, epoch)

    async def _write_snapshot(self, state: tuple, end: int, epoch: int) -> None:
        t0 = time.monotonic()
        try:
            blob = await asyncio.to_thread(snapshot_format.encode_state, state, end, epoch)
            await asyncio.to_thread(self.host.snapshots.write, (end, epoch), blob)
        except OSError as exc:
            self.host.halt(f"cannot write a snapshot: {exc}")
            return
        self.last_snapshot_end = end
        self._last_snapshot_ms = self.host.clock.monotonic_ms()
        self.stats["snapshots"] += 1
        self.host.raft.state.log.snapshot_taken(end, epoch)
        async with self.host.raft.io_lock:
            start = self.host.log.drop_segments_before(end)
        self.host.raft.state.log.drop_before(start)
        self.host.events.emit("snapshot_written", end_offset=end, epoch=epoch, bytes=len(blob),
                              write_ms=int((time.monotonic() - t0) * 1000), log_start_offset=start)
