"""KafkaClient's connect: a failure names the step (name lookup or TCP connect) and its
time, and concurrent attempts to one name share one lookup."""

import asyncio
import socket

import pytest

from kafka_runtime import client as client_mod
from kafka_runtime.client import ClientError, KafkaClient, open_stream
from kafka_runtime.event_loop import new_event_loop


def run(coro):
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_refused_connect_says_tcp_and_lookup_times():
    port = closed_port()

    async def go():
        with pytest.raises(ClientError) as err:
            await KafkaClient.connect("localhost", port, timeout_s=2)
        return str(err.value)
    msg = run(go())
    assert f"cannot connect to localhost:{port}" in msg
    assert "ConnectionRefusedError" in msg and "name lookup 0." in msg


def test_unknown_name_says_lookup_failed():
    async def go():
        with pytest.raises(ClientError) as err:
            await open_stream("no-such-host.invalid", 9092, 5)
        return str(err.value)
    msg = run(go())
    assert "name lookup failed" in msg and "gaierror" in msg


def test_slow_lookup_is_shared_by_retries_and_reported_as_a_lookup_timeout():
    calls = []

    async def go():
        loop = asyncio.get_running_loop()

        async def slow_getaddrinfo(host, port, **kw):
            calls.append(host)
            await asyncio.sleep(0.6)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        loop.getaddrinfo = slow_getaddrinfo
        messages = []
        port = closed_port()
        for _ in range(3):   # a retry loop: three attempts while one lookup is in flight
            with pytest.raises(ClientError) as err:
                await open_stream("slow-name", port, 0.1)
            messages.append(str(err.value))
        await asyncio.sleep(0.7)   # the shared lookup finishes; nothing is left in flight
        assert not [k for k in client_mod._lookups if k[0] is loop]
        return messages
    messages = run(go())
    assert calls == ["slow-name"]
    assert all("name lookup took more than 0.10s" in m for m in messages)


def test_a_failed_lookup_nobody_awaits_any_more_leaves_no_unretrieved_exception():
    seen = []

    async def go():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx.get("message")))

        async def failing_getaddrinfo(host, port, **kw):
            await asyncio.sleep(0.2)
            raise socket.gaierror(-2, "Name or service not known")
        loop.getaddrinfo = failing_getaddrinfo
        with pytest.raises(ClientError):
            await open_stream("gone-name", 9093, 0.05)
        await asyncio.sleep(0.3)
    run(go())
    import gc
    gc.collect()
    assert not [m for m in seen if m and "never retrieved" in m]
