"""The active controller's write path: a request's records computed by the pure state
machine, replayed into the image and appended to the metadata log (group commit), the answer
held until the high watermark passes them; the session-expiry ticker and idle NoOpRecords.

:class:`LeaderWrites` is mixed into :class:`~controller_impl.runtime.controller.ControllerRuntime`
and works on its attributes (image, raft, log, the state-machine lock, waiters, events)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kafka_common.metadata.records import NoOpRecord

from controller_impl.runtime.image_io import (BIG_CHANGE_RECORDS, FatalError, ReplayFailed, compute,
                                              log_big_change, replay_records, without_gc)

TICK_INTERVAL_MS = 100
# handlers whose work is O(1) (a heartbeat without offline dirs, a registration): run on the
# loop; the others may touch any number of partitions and run in a worker thread
INLINE_HANDLERS = frozenset({"handle_broker_heartbeat", "handle_broker_registration"})
# results written as one batch whatever their size (all or nothing); the others are split
# into batches of MAX_RECORDS_PER_BATCH as Kafka's controller does
ATOMIC_HANDLERS = frozenset({"handle_create_topics", "handle_broker_registration", "handle_create_partitions"})


class NotActive(Exception):
    """This controller is not (or no longer) the active one."""


class LeaderWrites:
    """The write path of :class:`~controller_impl.runtime.controller.ControllerRuntime`."""

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
