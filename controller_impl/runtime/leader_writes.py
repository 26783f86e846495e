"""The active controller's write path: a request's records computed by the pure state
machine, replayed into the image and appended to the metadata log (group commit), the answer
held until the high watermark passes them; the session-expiry ticker and idle NoOpRecords.

:class:`LeaderWrites` is a part of the controller process behind the
:class:`~controller_impl.runtime.host.ControllerHost` protocol (image, raft, log, the
state-machine lock); it owns the answers waiting for the commit and the last offset written.
How a request runs (on the loop or in a worker thread, split into batches or not) is its
row's (:class:`~controller_impl.runtime.request_table.Handler`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from controller_impl.errors import ControllerError
from kafka_common.metadata.records import NoOpRecord

from controller_impl.runtime.image_io import (BIG_CHANGE_RECORDS, FatalError, ReplayFailed, compute,
                                              log_big_change, replay_records, without_gc)
from controller_impl.runtime.request_table import TICK, Handler

if TYPE_CHECKING:
    from controller_impl.runtime.host import ControllerHost

TICK_INTERVAL_MS = 100


class NotActive(ControllerError):
    """This controller is not (or no longer) the active one."""


class LeaderWrites:
    """The active controller's write path (module docstring)."""

    def __init__(self, host: ControllerHost) -> None:
        self.host = host
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()
        self._last_written = -1
        self._last_write_ms = 0

    # -- the answers waiting for the commit --------------------------------------------
    def release(self, hw: int) -> None:
        """The answers of everything below the high watermark ``hw`` leave."""
        waiters = self._waiters
        while waiters and waiters[0][0] < hw:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    def fail_waiters(self) -> None:
        """Every answer still waiting fails with :class:`NotActive` (leadership lost, stop)."""
        while self._waiters:
            _, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(NotActive())

    def begin_epoch(self) -> None:
        """A new active controller's first record (the log ends at what it replayed)."""
        self._last_written = self.host.log.end_offset - 1
        self.write([NoOpRecord()], "leader_change")

    # -- state changes ----------------------------------------------------------------
    def write(self, records: list[Any], reason: str) -> int:
        """Append + replay at once, on the loop (small writes); returns the last offset."""
        try:
            first, last = self.host.raft.append(records)
        except OSError as exc:
            self.host.halt(f"cannot write the metadata log: {exc}")
            raise FatalError(str(exc)) from None
        try:
            for i, record in enumerate(records):
                self.host.image.replay(record, first + i)
        except Exception as exc:
            self.host.halt(f"replay of a record just written failed at offset {first}: {exc}")
            raise FatalError(str(exc)) from None
        self.host.changes.pending(last, records, reason, self.host.image.drain_changes())
        self._last_written = last
        self._last_write_ms = self.host.clock.monotonic_ms()
        return last

    async def run(self, handler: Handler, request: Any, reason: str | None = None) -> Any:
        """``handler``'s state method on ``request`` (None: a timer's), its records written
        and replayed; returns the response once they are committed. ``reason`` (default
        the row's) goes on the events of what it changed. Raises :class:`NotActive`
        (not the active controller, or no longer) or ``FatalError`` (halted)."""
        if self.host.halted:
            raise FatalError("controller halted")
        fn = handler.fn
        reason = handler.reason if reason is None else reason
        if not self.host.active:
            raise NotActive()
        await self.host.sm_lock.acquire()
        handed_over = False  # the lock passes to the install task of a deferred install
        try:
            state, epoch, base = self.host.state, self.host.raft.state.epoch, self.host.log.end_offset
            if not self.host.active or state is None:
                raise NotActive()
            now = self.host.clock.monotonic_ms()
            atomic = handler.atomic
            if handler.inline and not getattr(request, "offline_log_dirs", None):
                # small: a thread hop would cost more than the work
                result, chunks, datas, timings, plan = compute(state, fn, request, now, base, epoch, atomic)
                inline = True
            else:
                result, chunks, datas, timings, plan = await asyncio.to_thread(
                    without_gc, compute, state, fn, request, now, base, epoch, atomic)
                inline = False
            if chunks and plan is not None:
                last = self._append_then_install(chunks, datas, plan, epoch, base, reason, timings)
                handed_over = True
                log_big_change(fn.__name__, last - base + 1, len(chunks), timings)
            elif chunks:
                last = await self._append_chunks(chunks, datas, epoch, base, inline, reason, timings)
                log_big_change(fn.__name__, last - base + 1, len(chunks), timings)
            else:
                last = self._last_written
        finally:
            if not handed_over:
                self.host.sm_lock.release()
        if last >= self.host.raft.state.high_watermark:
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
                self.host.image.replay(records[i], base + i)
        except Exception as exc:
            self.host.image_ahead = True
            self.host.halt(f"replay of a record just produced failed at offset {base + i}: {exc}")
            raise FatalError(str(exc)) from None
        offset = base
        try:
            for data in datas:
                if not self.host.active or self.host.raft.state.epoch != epoch or self.host.log.end_offset != offset:
                    raise NotActive()
                try:
                    _, last = self.host.raft.append_encoded(data)
                except OSError as exc:
                    self.host.halt(f"cannot write the metadata log: {exc}")
                    raise FatalError(str(exc)) from None
                offset = last + 1
                self._last_written = last
                self._last_write_ms = self.host.clock.monotonic_ms()
        except BaseException:
            self.host.image_ahead = True  # the broker records are in the image, maybe not in the log
            if offset > base and self.host.active and self.host.raft.state.epoch == epoch:
                # what was written is reported if it commits (the image is rebuilt anyway)
                self.host.changes.pending(offset - 1, records[:offset - base], reason,
                                          self.host.image.drain_changes())
            raise
        self.host.spawn(self._install(pairs, offset - 1, records, reason, epoch, timings))
        return offset - 1

    async def _install(self, pairs: list[Any], last: int, records: list[Any], reason: str, epoch: int,
                       timings: dict) -> None:
        """The deferred half of :meth:`_append_then_install` (owns the state-machine lock)."""
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(without_gc, self.host.image.install_merged, pairs, last)
            changes = self.host.image.drain_changes()
            if self.host.active and self.host.raft.state.epoch == epoch:
                # written once committed (now if it is)
                self.host.changes.queue(last, records, reason, changes, self.host.raft.state.high_watermark)
            else:
                self.host.image_ahead = True  # uncommitted records of a lost leadership: rebuilt
        except Exception as exc:
            self.host.image_ahead = True
            self.host.halt(f"cannot install a change just written at offset {last}: {type(exc).__name__}: {exc}")
        finally:
            self.host.sm_lock.release()
        if len(records) >= BIG_CHANGE_RECORDS:
            self.host.log_line(f"installed {len(pairs)} merged partition changes in "
                               f"{(time.perf_counter() - t0) * 1000:.0f} ms after the append")

    async def _append_chunks(self, chunks: list[tuple[list[Any], Any]], datas: list[bytes], epoch: int, base: int,
                             inline: bool, reason: str, timings: dict) -> int:
        """Replay then append each batch in turn (holding the state-machine lock): the
        followers copy and sync batch k while batch k+1 is replayed here. A batch is
        appended only once the image took it (a record the image refuses is never
        written); if the leadership is lost in between, the image has run ahead of the
        log and is rebuilt (``ControllerRuntime._resign``, ``._activate``)."""
        offset = base
        written: list[Any] = []
        t_replay = 0.0
        try:
            for (chunk, merged), data in zip(chunks, datas):
                t0 = time.perf_counter()
                try:
                    if inline:
                        replay_records(self.host.image, chunk, offset, merged)
                    else:
                        await asyncio.to_thread(without_gc, replay_records, self.host.image, chunk, offset, merged)
                except ReplayFailed as exc:
                    self.host.image_ahead = True
                    self.host.halt(str(exc))
                    raise FatalError(str(exc)) from None
                t_replay += time.perf_counter() - t0
                if not self.host.active or self.host.raft.state.epoch != epoch or self.host.log.end_offset != offset:
                    self.host.image_ahead = True  # the image ran ahead of a log we no longer write
                    raise NotActive()
                try:
                    _, last = self.host.raft.append_encoded(data)
                except OSError as exc:
                    self.host.image_ahead = True
                    self.host.halt(f"cannot write the metadata log: {exc}")
                    raise FatalError(str(exc)) from None
                written.extend(chunk)
                offset = last + 1
                self._last_written = last
                self._last_write_ms = self.host.clock.monotonic_ms()
        finally:
            changes = self.host.image.drain_changes()
            if written and self.host.active and self.host.raft.state.epoch == epoch:
                # reported when committed, whatever happened to the rest (after a lost
                # leadership the next leader reports what commits of it)
                self.host.changes.pending(offset - 1, written, reason, changes)
        timings["replay"] = t_replay * 1000
        return offset - 1

    async def ticker(self) -> None:
        """Session expiry every ``TICK_INTERVAL_MS``, a NoOpRecord when idle (active only)."""
        interval_s = TICK_INTERVAL_MS / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self.host.active:
                continue
            try:
                await self.run(TICK, None)
                idle_ms = self.host.cfg.metadata_max_idle_interval_ms
                if idle_ms and self.host.active and not self.host.sm_lock.locked() \
                        and self.host.clock.monotonic_ms() - self._last_write_ms >= idle_ms:
                    # Kafka's NoOpRecord every metadata.max.idle.interval.ms: the quorum's
                    # liveness shows in the log, and a failed metadata disk is seen at once
                    self.write([NoOpRecord()], "idle")
            except (FatalError, NotActive):
                continue
            except Exception as exc:
                self.host.events.emit("tick_error", error=f"{type(exc).__name__}: {exc}")
                self.host.log_line(f"tick failed: {type(exc).__name__}: {exc}")
