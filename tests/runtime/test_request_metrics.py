"""Request metrics (Kafka's RequestMetrics): the pure histogram and phase split, and the
``request_metrics`` events of a real listener over loopback sockets."""

from __future__ import annotations

import asyncio
import datetime
import random

import pytest

from kafka_common import wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import KafkaClient
from kafka_runtime.events import EventLog, read_events
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.request_context import DeferredResponse
from kafka_runtime.request_metrics import PHASES, Histogram, RequestMetrics, RequestTiming
from kafka_runtime.server import KafkaServer

MS = 1_000_000  # ns


def test_histogram_percentiles_are_within_a_bucket_of_the_truth():
    rng = random.Random(7)
    values = [rng.lognormvariate(7, 1.5) for _ in range(20_000)]   # µs, 1 µs .. seconds
    h = Histogram()
    for v in values:
        h.add(v)
    values.sort()
    for q in (0.5, 0.9, 0.99):
        true = values[int(q * len(values)) - 1]
        got = h.percentile_us(q)
        assert true * 0.99 <= got <= true * 2 ** 0.25 * 1.01, (q, true, got)
    assert h.count == 20_000 and h.max_us == values[-1] and h.percentile_us(1.0) == values[-1]
    assert Histogram().percentile_us(0.99) == 0.0


def test_a_request_splits_into_queue_local_remote_send():
    m = RequestMetrics(now_ns=0)
    # arrived 0, handled from 2 ms to 3 ms, its deferred answer ready at 13 ms, sent at 14 ms
    m.record(RequestTiming(0, arrived_ns=0, started_ns=2 * MS, handled_ns=3 * MS, ready_ns=13 * MS), 14 * MS)
    # not deferred: ready = handled; acks=0 style: sent when handled
    m.record(RequestTiming(1, arrived_ns=0, started_ns=1 * MS, handled_ns=4 * MS), 4 * MS)
    out = m.take(now_ns=1000 * MS)
    assert out["window_ms"] == 1000.0
    produce, fetch = out["apis"]["0"], out["apis"]["1"]
    assert produce["count"] == 1 and set(PHASES) <= set(produce)
    assert [produce[p]["max"] for p in PHASES] == [2.0, 1.0, 10.0, 1.0, 14.0]
    assert [fetch[p]["max"] for p in PHASES] == [1.0, 3.0, 0.0, 0.0, 4.0]
    assert m.empty() and m.take(now_ns=2000 * MS) == {"window_ms": 1000.0, "apis": {}}


class Handler:
    """BrokerHeartbeat v1: broker_id ≥ 100 answers deferred after 40 ms (like Produce
    acks=all waiting for followers); others after 5 ms of local work."""

    supported_apis = {63: (1, 1)}

    async def handle(self, ctx, header, request):
        cls = wire.response_class(63, ctx.api_version)
        reply = cls(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, is_caught_up=True,
                    is_fenced=False, should_shut_down=False)
        if request.broker_id >= 100:
            async def later():
                await asyncio.sleep(0.04)
                return reply
            return DeferredResponse(later())
        await asyncio.sleep(0.005)
        return reply


def hb(broker_id: int):
    return wire.make(wire.request_class(63, 1), broker_id=broker_id, broker_epoch=1, current_metadata_offset=0,
                     want_fence=False, want_shut_down=False, offline_log_dirs=())


@pytest.mark.integration
def test_listener_emits_request_metrics_per_window(tmp_path):
    path = str(tmp_path / "ev.jsonl")

    async def main():
        events = EventLog(path, 1, "test")
        server = KafkaServer(Handler(), host="127.0.0.1", port=0, listener_name="TEST", events=events,
                             limits=ListenerLimits(metrics_window_ms=300), log=lambda m: None)
        await server.start()
        try:
            client = await KafkaClient.connect("127.0.0.1", server.port)
            # pipelined: a deferred answer, then 4 quick ones that must leave after it
            futs = [client.send(hb(100))] + [client.send(hb(i)) for i in range(4)]
            for f in futs:
                assert (await asyncio.wait_for(f, 5)).error_code == ErrorCode.none
            await asyncio.sleep(0.45)   # one window ends: its event is written while serving
            assert any(e["event"] == "request_metrics" for e in read_events(path))
            assert (await client.request(hb(1))).error_code == ErrorCode.none
            await client.close()
        finally:
            await server.stop()         # the last window's event
            events.close()
    asyncio.run(main())
    windows = [e for e in read_events(path) if e["event"] == "request_metrics"]
    assert len(windows) == 2 and all(w["listener"] == "TEST" for w in windows)
    first, last = windows[0]["apis"]["63"], windows[1]["apis"]["63"]
    assert first["count"] == 5 and last["count"] == 1
    assert first["remote"]["max"] >= 39                  # the deferred answer's wait
    assert first["local"]["max"] >= 4.9                  # 5 ms of handler work
    assert first["queue"]["max"] >= 3 * 4.9              # the 4th quick one waited behind 3 others
    # the quick ones were ready before the deferred one and left after it (request order)
    assert first["send"]["max"] >= 40 - 4 * 5 - 5
    assert first["total"]["max"] >= 39 and first["total"]["max"] >= first["remote"]["max"]
    assert last["remote"]["max"] == 0.0
