"""Moving a replica between this broker's dirs (Kafka's ReplicaAlterLogDirsThread).

One task per move copies the current log into the future log (whole batches, offsets and
epochs kept, ``append_as_follower``) and keeps following it; a current log truncated below
the future's end (follower truncation) truncates the future too. Each time the future has
caught up (future LEO == current LEO) it tells the core (``on_caught_up(tp)``): the first
time the core queues ``AssignReplicasToDirs(target)``; once the controller acked, the core
answers with ``SwapFutureLog``.

No step runs on the event loop: reads run on the current log's dir worker, writes on the
future log's (``run_io``). :meth:`DirMover.swap` holds the partition's lock (the Produce
handler and the follower fetcher hold it around each append, so no append of the partition
is in flight or can start) while it copies the last batches, carries the high watermark
over and swaps the future in (``LogManager.replace_current_with_future``, which deletes
the old log). A storage error stops the move's task (the DirFailureChannel has
reported the dir; the core cancels the move or assigns LOST).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from broker_impl.state.effects import TopicPartition
from broker_impl.storage.errors import KafkaStorageError, StorageError

log = logging.getLogger(__name__)
COPY_CHUNK_BYTES = 1024 * 1024
POLL_S = 0.05


def copy_step(current: Any, future: Any, max_bytes: int = COPY_CHUNK_BYTES) -> bool:
    """One copy step current → future; True if the future is now caught up."""
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(current.log_end_offset)
    if future.log_end_offset < current.log_start_offset:
        future.truncate_fully_and_start_at(current.log_start_offset)
    if future.log_end_offset < current.log_end_offset:
        data = current.read(future.log_end_offset, max_bytes, current.log_end_offset, True)
        if data:
            future.append_as_follower(data)
    return future.log_end_offset == current.log_end_offset


def _fix_future(current_end: int, current_start: int, future: Any) -> None:
    """The future side of a copy step (truncations), on the future's dir worker."""
    if future.log_end_offset > current_end:
        future.truncate_to(current_end)
    if future.log_end_offset < current_start:
        future.truncate_fully_and_start_at(current_start)


def _append(future: Any, data: bytes) -> None:
    future.append_as_follower(data)


class DirMover:
    """``run_io(plog, fn, *args)`` (async) runs a blocking step on ``plog``'s dir worker and
    ``partition_lock(tp)`` serialises the swap with the partition's appends; without them
    (tests) the steps run inline."""

    def __init__(self, lm: Any, on_caught_up: Callable[[TopicPartition], None], *,
                 run_io: Callable[..., Awaitable[Any]] | None = None,
                 partition_lock: Callable[[TopicPartition], Any] | None = None) -> None:
        self.lm = lm
        self.on_caught_up = on_caught_up
        self.tasks: dict[TopicPartition, asyncio.Task] = {}
        self.copied: dict[TopicPartition, int] = {}
        self._run_io = run_io
        self._lock_of = partition_lock

    async def _io(self, plog: Any, fn: Callable[..., Any], *args: Any) -> Any:
        if self._run_io is None:
            return fn(*args)
        return await self._run_io(plog, fn, *args)

    async def copy_step_async(self, current: Any, future: Any, max_bytes: int = COPY_CHUNK_BYTES) -> bool:
        """:func:`copy_step` with the read on the current log's dir worker and the writes on
        the future log's (a slow source or target stalls only this move)."""
        await self._io(future, _fix_future, current.log_end_offset, current.log_start_offset, future)
        end = current.log_end_offset
        if future.log_end_offset < end:
            data = await self._io(current, current.read, future.log_end_offset, max_bytes, end, True)
            if data:
                await self._io(future, _append, future, data)
        return future.log_end_offset == current.log_end_offset

    def start(self, tp: TopicPartition) -> None:
        self.stop(tp)
        self.tasks[tp] = asyncio.create_task(self._run(tp), name=f"mover-{tp}")

    def stop(self, tp: TopicPartition) -> None:
        t = self.tasks.pop(tp, None)
        if t is not None:
            t.cancel()

    async def _run(self, tp: TopicPartition) -> None:
        waited = 0
        while True:
            current = self.lm.get_log(tp.topic, tp.partition)
            future = self.lm.future_log(tp.topic, tp.partition)
            if current is None or future is None:
                waited += 1  # the future log is created by the storage worker: give it a moment
                if waited > 600:
                    log.warning("move of %s: no %s log, giving up", tp, "current" if current is None else "future")
                    return
                await asyncio.sleep(POLL_S)
                continue
            try:
                caught_up = await self.copy_step_async(current, future)
            except StorageError as exc:
                log.warning("move of %s stopped: %s", tp, exc)
                if isinstance(exc, KafkaStorageError):
                    return
                await asyncio.sleep(POLL_S)
                continue
            self.copied[tp] = future.log_end_offset
            if caught_up:
                self.on_caught_up(tp)
                await asyncio.sleep(POLL_S)
            else:
                await asyncio.sleep(0)

    async def swap(self, tp: TopicPartition) -> bool:
        """Under the partition's lock (no append or follower step of ``tp`` runs meanwhile):
        catch up fully, carry the HW over, swap. True if swapped."""
        self.stop(tp)
        if self._lock_of is None:
            return await self._swap_locked(tp)
        async with self._lock_of(tp):
            return await self._swap_locked(tp)

    async def _swap_locked(self, tp: TopicPartition) -> bool:
        current = self.lm.get_log(tp.topic, tp.partition)
        future = self.lm.future_log(tp.topic, tp.partition)
        if future is None:
            return False
        lost = self.lm.offline_partition(tp.topic, tp.partition) if current is None else None
        if lost is not None or (current is not None and current.is_offline):
            # the future may lack the source's last records: never swap it in behind its back
            raise KafkaStorageError(lost[0] if lost is not None else current.log_dir, None, "swap",
                                    f"source of {tp.topic}-{tp.partition} offline")
        if current is not None:
            for _ in range(1_000_000):
                if await self.copy_step_async(current, future, 8 * COPY_CHUNK_BYTES):
                    break
            future.high_watermark = current.high_watermark
        # rename + reload in the future's dir, delete of the old log: on the future's worker
        await self._io(future, self.lm.replace_current_with_future, tp.topic, tp.partition)
        return True

    async def close(self) -> None:
        for tp in list(self.tasks):
            self.stop(tp)
