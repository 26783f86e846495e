"""The event-loop watch: a loop blocked longer than the threshold is reported once, with
the loop thread's stack taken while it was blocked."""

import asyncio
import logging
import time

from kafka_runtime.event_loop import new_event_loop
from kafka_runtime.loop_watch import LoopWatch


def blocking_call_under_test() -> None:
    time.sleep(0.6)  # stands in for a synchronous fsync / CPU-heavy step on the loop


def test_a_blocked_loop_is_reported_with_where_it_was(caplog):
    loop = new_event_loop()
    try:
        async def scenario() -> LoopWatch:
            watch = LoopWatch(asyncio.get_running_loop(), threshold_s=0.15, period_s=0.02,
                              logger=logging.getLogger("test.loopwatch")).start()
            await asyncio.sleep(0.1)
            blocking_call_under_test()
            await asyncio.sleep(0.1)   # the beat runs again and reports
            watch.stop()
            return watch
        with caplog.at_level(logging.WARNING, logger="test.loopwatch"):
            watch = loop.run_until_complete(scenario())
    finally:
        loop.close()
    stalls = [r for r in caplog.records if "event loop stalled" in r.getMessage()]
    assert watch.stalls >= 1 and len(stalls) == watch.stalls
    assert watch.longest_s >= 0.4
    assert any("blocking_call_under_test" in r.getMessage() for r in stalls), stalls[0].getMessage()


def test_stop_ends_the_beats():
    loop = new_event_loop()
    try:
        async def scenario() -> LoopWatch:
            watch = LoopWatch(asyncio.get_running_loop(), period_s=0.01).start()
            await asyncio.sleep(0.05)
            watch.stop()
            last = watch._last
            await asyncio.sleep(0.05)
            assert watch._last == last
            return watch
        watch = loop.run_until_complete(scenario())
        watch._thread.join(1)
        assert not watch._thread.is_alive()
    finally:
        loop.close()
