"""Fixtures: a real broker listener on loopback, run on its own event-loop thread so that
blocking clients (kafka-python, confluent-kafka, kcat) can talk to it from the test."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Iterator

import pytest

from tests.dataplane.inprocess_broker import Broker


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def _call() -> Any:
            return fn()
        return self.run(_call())

    def close(self) -> None:
        async def _drain() -> None:  # let cancelled connection tasks finish before the loop closes
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.run(_drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def broker(tmp_path: Any, loop_thread: LoopThread) -> Iterator[Broker]:
    b = Broker(tmp_path)
    loop_thread.run(b.start())
    b.loop = loop_thread  # type: ignore[attr-defined]
    yield b
    loop_thread.run(b.stop())
    assert b.server.stats["handler_errors"] == 0 and b.server.stats["closed_bad"] == 0, b.server_log


def pytest_configure(config: Any) -> None:
    # kafka-python 3.0.12 loads its schemas through deprecated importlib.resources calls
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")
