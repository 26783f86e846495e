"""Purgatory waits (delayed produce, long-poll fetch): woken by a notify, or by their
timeout through the shared timeout buckets — never before the deadline, and nothing left
registered afterwards (timeout, wake-up or cancellation)."""

from __future__ import annotations

import asyncio

import pytest

from broker_impl.api.purgatory import TIMEOUT_RESOLUTION_S, Purgatory

pytestmark = pytest.mark.unit


def _clean(p: Purgatory) -> bool:
    return p.waiting == 0 and p._deadlines._buckets == {}


def test_wait_until_times_out_not_before_its_deadline_and_wakes_on_notify():
    async def main():
        p = Purgatory()
        loop = asyncio.get_running_loop()
        t = loop.time()
        assert await p.wait_until(["k"], lambda: False, 0.05) is False
        assert loop.time() - t >= 0.05
        assert _clean(p)
        done: list[int] = []

        def finish():
            done.append(1)
            p.notify("k")
        loop.call_later(0.02, finish)
        assert await p.wait_until(["k", "j"], lambda: bool(done), 60) is True
        assert _clean(p)
        # many waiters with close deadlines share buckets; all time out, none stays
        results = await asyncio.gather(*(p.wait_until([i], lambda: False, 0.01 + i / 1000) for i in range(50)))
        assert results == [False] * 50 and _clean(p)
        assert len({-int(-(t + 0.01 + i / 1000) // TIMEOUT_RESOLUTION_S) for i in range(50)}) < 50
    asyncio.run(main())


def test_watch_collects_notified_keys_times_out_and_cancellation_leaves_nothing():
    async def main():
        p = Purgatory()
        loop = asyncio.get_running_loop()
        with p.watch(["a", "b"]) as w:
            t = loop.time()
            assert await w.wait(0.03) == set() and loop.time() - t >= 0.03
            loop.call_later(0.01, p.notify, "b")
            assert await w.wait(60) == {"b"}
            p.notify("a")
            assert await w.wait(60) == {"a"}          # already notified: no wait
        assert _clean(p)
        task = asyncio.ensure_future(p.wait_until(["z"], lambda: False, 60))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _clean(p)
    asyncio.run(main())
