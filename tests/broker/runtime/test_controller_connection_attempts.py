"""A request to the controllers must not spend its whole timeout on one voter that answers
nothing (a killed controller's address): the next voter, the new active one, gets a share.
Seen in the lab's S12 (kill -9 of the active controller): two brokers' heartbeats waited out
their 1.5 s on the dead voter, never reached the live leader, and were fenced."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from broker_impl.runtime.controller_channel import MIN_CONNECT_ATTEMPT_S, ControllerConnection, ControllerLocator
from kafka_common import wire
from kafka_common.wire import ErrorCode
from kafka_runtime.server import KafkaServer

pytestmark = pytest.mark.integration


class Heartbeats:
    supported_apis = {63: (1, 1)}

    async def handle(self, ctx, header, request):
        return wire.response_class(63, ctx.api_version)(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, is_caught_up=True,
            is_fenced=False, should_shut_down=False)


def heartbeat(_client):
    return wire.make(wire.request_class(63, 1), broker_id=1, broker_epoch=1, current_metadata_offset=0,
                     want_fence=False, want_shut_down=False, offline_log_dirs=())


def test_a_silent_voter_leaves_the_next_one_time_to_answer():
    async def main():
        silent_conns = []

        async def silent(reader, writer):   # accepts, reads, never answers (not even ApiVersions)
            silent_conns.append(writer)
            await reader.read()

        dead = await asyncio.start_server(silent, "127.0.0.1", 0)
        live = KafkaServer(Heartbeats(), host="127.0.0.1", port=0, listener_name="CONTROLLER", log=lambda m: None)
        await live.start()
        try:
            dead_port = dead.sockets[0].getsockname()[1]
            locator = ControllerLocator([(3001, "127.0.0.1", dead_port), (3002, "127.0.0.1", live.port),
                                         (3003, "127.0.0.1", dead_port)])
            conn = ControllerConnection(locator, client_id="broker-1", sasl=None, max_frame_bytes=1 << 20)
            t0 = time.monotonic()
            resp = await conn.request(heartbeat, 1.5)     # the lab's heartbeat budget
            took = time.monotonic() - t0
            assert resp.error_code is ErrorCode.none and locator.current()[0] == 3002
            assert MIN_CONNECT_ATTEMPT_S - 0.05 <= took < 1.5, took
            await conn.close()
            # one voter: the attempt keeps the whole budget (nothing else to try)
            lone = ControllerConnection(ControllerLocator([(3002, "127.0.0.1", live.port)]), client_id="b",
                                        sasl=None, max_frame_bytes=1 << 20)
            assert lone.attempt_s(1.5) == 1.5 and conn.attempt_s(0.3) == 0.3 and conn.attempt_s(6.0) == 2.0
            await lone.close()
        finally:
            for w in silent_conns:
                w.close()
            dead.close()
            await live.stop()
    asyncio.run(main())
