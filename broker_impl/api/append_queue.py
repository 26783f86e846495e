"""Appends of one partition done together: the Produce requests queued behind a partition's
lock go to its dir's worker in one job, not one job each.

The partition's ``partition_lock`` (:mod:`broker_impl.runtime.dir_io`) is held across an
append's dir job, so the appends of one partition are serial — and each job is a hop to the
worker thread and back to the loop. Measured (docs/status.md): with 16 producers on one partition the
appends, 1 MB each, waited for the lock one hop at a time; each append ran in under 1 ms,
the hops took 30-170 ms on a machine whose cores the clients kept busy, and the leader took
~10 appends a second while its followers sat idle in their long polls.

:func:`combined` queues a request's item for the lock's partition; one drain task per
partition takes the lock, runs ``run_batch`` for EVERY item queued by then (in queue order,
which is request order: the items are queued when the request's append starts, as the lock
was taken before), settles each item's future with its own result, and goes on while items
are queued. The drain task, not a request, holds the lock: a request whose connection goes
away stops waiting for its result, and the batch it was in still completes for the others;
the lock is never released while a job of it runs. Other users of the lock (the follower's
apply, the mover's swap) queue on it as before, between two batches.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Awaitable, Callable

RunBatch = Callable[[list[Any]], Awaitable[list[Any]]]


class _Queue:
    __slots__ = ("items", "drainer", "__weakref__")

    def __init__(self) -> None:
        self.items: list[tuple[Any, asyncio.Future]] = []
        self.drainer: asyncio.Future | None = None


_queues: "weakref.WeakKeyDictionary[Any, _Queue]" = weakref.WeakKeyDictionary()


async def combined(lock: Any, item: Any, run_batch: RunBatch) -> Any:
    """``run_batch([..., item, ...])``'s entry for ``item``, run under ``lock`` together with
    the other items queued for it. ``run_batch`` returns one entry per item: a result, or
    an exception instance (raised to that item's caller only)."""
    q = _queues.get(lock)
    if q is None:
        q = _queues[lock] = _Queue()
    fut: asyncio.Future = asyncio.get_running_loop().create_future()
    q.items.append((item, fut))
    if q.drainer is None:
        q.drainer = asyncio.ensure_future(_drain(lock, q, run_batch))
    return await fut


async def _drain(lock: Any, q: _Queue, run_batch: RunBatch) -> None:
    try:
        while q.items:
            async with lock:
                batch, q.items = q.items, []
                try:
                    results = await run_batch([it for it, _ in batch])
                except BaseException as exc:   # a bug (or cancellation): every item of the batch gets it
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, f), r in zip(batch, results):
                    if f.done():
                        continue   # its request stopped waiting
                    if isinstance(r, BaseException):
                        f.set_exception(r)
                    else:
                        f.set_result(r)
    finally:
        q.drainer = None
        if q.items:   # left by a cancellation (shutdown): their requests must not wait forever
            left, q.items = q.items, []
            for _, f in left:
                if not f.done():
                    f.cancel()
