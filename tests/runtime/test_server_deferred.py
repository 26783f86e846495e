"""kafka_runtime.server: a handler's DeferredResponse (Produce acks=all waiting for
replication) lets the connection's next requests be handled meanwhile, and the responses
still leave in request order (real loopback sockets, in-process server)."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from kafka_common import wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import KafkaClient
from kafka_runtime.request_context import DeferredResponse
from kafka_runtime.server import KafkaServer

pytestmark = pytest.mark.integration


class Handler:
    """BrokerHeartbeat v1: broker_id ≥ 100 answers deferred, released once a request with
    broker_id == its id − 100 has been handled (so it cannot be answered unless the server
    handles the later request meanwhile); broker_id 666 deferred and failing."""

    supported_apis = {63: (1, 1)}

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.released: dict[int, asyncio.Event] = {}

    def _event(self, i: int) -> asyncio.Event:
        return self.released.setdefault(i, asyncio.Event())

    async def handle(self, ctx, header, request):
        b = request.broker_id
        self.handled.append(b)
        self._event(b).set()
        cls = wire.response_class(63, ctx.api_version)

        def reply():
            return cls(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, is_caught_up=True,
                       is_fenced=b % 2 == 0, should_shut_down=False)
        if b == 666:
            async def boom():
                await asyncio.sleep(0.01)
                raise RuntimeError("deferred boom")
            return DeferredResponse(boom())
        if b >= 100:
            async def later():
                await self._event(b - 100).wait()
                return reply()
            return DeferredResponse(later())
        return reply()


def hb(broker_id: int):
    return wire.make(wire.request_class(63, 1), broker_id=broker_id, broker_epoch=1, current_metadata_offset=0,
                     want_fence=False, want_shut_down=False, offline_log_dirs=())


def test_deferred_responses_let_later_requests_run_and_keep_the_order():
    async def main():
        handler = Handler()
        server = KafkaServer(handler, host="127.0.0.1", port=0, listener_name="TEST", log=lambda m: None)
        await server.start()
        client = await KafkaClient.connect("127.0.0.1", server.port, negotiate=True)
        try:
            # 101 waits for 1, 103 for 3; 52 is answered at once but must leave after 101
            futs = [client.send(hb(b)) for b in (101, 52, 1, 103, 666, 3, 4)]
            got = await asyncio.wait_for(asyncio.gather(*futs), 10)
            # KafkaClient matches responses by correlation id in order: any reordering raises
            assert [r.is_fenced for r in got[:4]] == [False, True, False, False]
            assert got[4].error_code == ErrorCode.unknown_server_error     # the failing deferred one
            assert [r.error_code for r in got[5:]] == [ErrorCode.none, ErrorCode.none]
            assert handler.handled == [101, 52, 1, 103, 666, 3, 4]
            # the connection is still usable afterwards, in order
            assert (await client.request(hb(8), timeout_s=5)).is_fenced is True
        finally:
            await client.close()
            await server.stop()
    asyncio.run(main())
