"""Waiting for partitions to change: delayed produce (acks=all) and long-polling fetch.

A waiter registers one future on every partition it watches; :meth:`Purgatory.notify`
resolves all futures of a partition, and each woken waiter re-evaluates its own condition.
Conditions are re-read from the live state, so a missed or extra wake-up is harmless.

A long-polling fetch instead holds a :class:`Watch` for its whole wait: it collects WHICH
of its partitions were notified, so the fetch re-reads only those (a fetch of 100
partitions woken by one append costs one partition's work, not 100).
"""

from __future__ import annotations

import asyncio
from typing import Callable, Hashable, Iterable


TIMEOUT_RESOLUTION_S = 0.01


class _Deadlines:
    """Timeouts of the waiters, 10 ms buckets sharing one loop timer each (Kafka's purgatory
    uses a timing wheel for the same reason): a timer per acks=all request and per long-poll
    fetch made the loop's timer heap large and every push/pop cost Python-level
    comparisons. A waiter wakes at most :data:`TIMEOUT_RESOLUTION_S` after its deadline."""

    def __init__(self) -> None:
        self._buckets: dict[int, tuple[set, asyncio.TimerHandle]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, deadline: float, fut: "asyncio.Future[None]") -> int:
        tick = -int(-deadline // TIMEOUT_RESOLUTION_S)   # ceil
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = (set(), loop.call_at(tick * TIMEOUT_RESOLUTION_S, self._fire, tick))
        bucket[0].add(fut)
        return tick

    def discard(self, tick: int, fut: "asyncio.Future[None]") -> None:
        bucket = self._buckets.get(tick)
        if bucket is not None:
            bucket[0].discard(fut)
            if not bucket[0]:
                bucket[1].cancel()
                del self._buckets[tick]

    def _fire(self, tick: int) -> None:
        bucket = self._buckets.pop(tick, None)
        if bucket is not None:
            for fut in bucket[0]:
                if not fut.done():
                    fut.set_result(None)


class Watch:
    """The keys notified since the last :meth:`wait` (registered until :meth:`close`)."""

    def __init__(self, purgatory: "Purgatory", keys: Iterable[Hashable]) -> None:
        self._purgatory = purgatory
        self._keys = set(keys)
        self.changed: set[Hashable] = set()
        self._waiter: asyncio.Future[None] | None = None
        for key in self._keys:
            purgatory._watches.setdefault(key, set()).add(self)

    def add(self, key: Hashable) -> None:
        if key not in self._keys:
            self._keys.add(key)
            self._purgatory._watches.setdefault(key, set()).add(self)

    def discard(self, key: Hashable) -> None:
        if key in self._keys:
            self._keys.discard(key)
            self.changed.discard(key)
            watches = self._purgatory._watches.get(key)
            if watches is not None:
                watches.discard(self)
                if not watches:
                    del self._purgatory._watches[key]

    def drain(self) -> set[Hashable]:
        """The keys notified so far (cleared), without waiting."""
        out, self.changed = self.changed, set()
        return out

    def hit(self, key: Hashable) -> None:
        self.changed.add(key)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float) -> set[Hashable]:
        """The keys notified since the last call (waiting up to ``timeout_s`` for one);
        empty on timeout."""
        if not self.changed and timeout_s > 0:
            loop = asyncio.get_running_loop()
            self._waiter = fut = loop.create_future()
            deadlines = self._purgatory._deadlines
            tick = deadlines.add(loop, loop.time() + timeout_s, fut)
            try:
                await fut
            finally:
                deadlines.discard(tick, fut)
                self._waiter = None
        out, self.changed = self.changed, set()
        return out

    def close(self) -> None:
        for key in self._keys:
            watches = self._purgatory._watches.get(key)
            if watches is not None:
                watches.discard(self)
                if not watches:
                    del self._purgatory._watches[key]
        self._keys = set()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Purgatory:
    def __init__(self) -> None:
        self._waiting: dict[Hashable, set[asyncio.Future[None]]] = {}
        self._watches: dict[Hashable, set[Watch]] = {}
        self._deadlines = _Deadlines()

    def notify(self, key: Hashable) -> None:
        futures = self._waiting.pop(key, None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)
        watches = self._watches.get(key)
        if watches:
            for w in watches:
                w.hit(key)

    def notify_all(self) -> None:
        for key in set(self._waiting) | set(self._watches):
            self.notify(key)

    def watch(self, keys: Iterable[Hashable]) -> Watch:
        return Watch(self, keys)

    @property
    def waiting(self) -> int:
        return sum(len(f) for f in self._waiting.values()) + sum(len(w) for w in self._watches.values())

    async def wait_until(self, keys: Iterable[Hashable], condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds (re-checked on every notify of ``keys``) or the
        timeout passes; return the final value of ``condition()``."""
        keys = list(keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            for key in keys:
                self._waiting.setdefault(key, set()).add(fut)
            # a shared 10 ms timeout bucket, not asyncio.wait_for (its own timer, future and
            # callbacks per call): every acks=all request waits here
            tick = self._deadlines.add(loop, deadline, fut)
            try:
                await fut
            finally:
                self._deadlines.discard(tick, fut)
                for key in keys:
                    futures = self._waiting.get(key)
                    if futures is not None:
                        futures.discard(fut)
                        if not futures:
                            del self._waiting[key]
        return True
