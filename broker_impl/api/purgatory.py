"""Waiting for partitions to change: delayed produce (acks=all) and long-polling fetch.

A waiter registers one future on every partition it watches; :meth:`Purgatory.notify`
resolves all futures of a partition, and each woken waiter re-evaluates its own condition.
Conditions are re-read from the live state, so a missed or extra wake-up is harmless.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._waiting: dict[Hashable, set[asyncio.Future[None]]] = {}

    def notify(self, key: Hashable) -> None:
        futures = self._waiting.pop(key, None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify(key)

    @property
    def waiting(self) -> int:
        return sum(len(f) for f in self._waiting.values())

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
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                for key in keys:
                    futures = self._waiting.get(key)
                    if futures is not None:
                        futures.discard(fut)
                        if not futures:
                            del self._waiting[key]
        return True
