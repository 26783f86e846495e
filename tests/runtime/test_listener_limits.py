"""Resource limits of a listener and its rate-limited bad-input log: the server.properties
keys (validated at start-up), each limit over real loopback sockets, and the whole set on a
real kraft-controller process."""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from kafka_runtime.controller_client import MetadataReader

from harness.run.local_processes import REPO, ControllerProcess
from kafka_common import authz, framing, wire
from kafka_common.config import ConfigError, parse_config
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.events import EventLog, read_events
from kafka_runtime.limits import ListenerLimits, RateLimitedLog
from kafka_runtime.request_context import SecurityConfig
from kafka_runtime.server import KafkaServer

BASE = ("process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://127.0.0.1:1\n"
        "metadata.log.dir=/tmp/x\n")


# -- configuration -----------------------------------------------------------------------------

@pytest.mark.unit
def test_defaults_are_kafkas():
    cfg = parse_config(BASE)
    limits = ListenerLimits.from_config(cfg)
    assert (cfg.connections_max_idle_ms, cfg.max_connections, cfg.max_connections_per_ip,
            cfg.socket_request_max_bytes, cfg.sasl_server_max_receive_size) == \
        (600000, 2**31 - 1, 2**31 - 1, 104857600, 524288)
    assert limits == ListenerLimits(max_frame_bytes=104857600, pre_auth_max_frame_bytes=524288,
                                    max_connections=2**31 - 1, max_connections_per_ip=2**31 - 1,
                                    idle_ms=600000, bad_log_interval_ms=10000)
    assert parse_config(BASE + "connections.max.idle.ms=-1\n").connections_max_idle_ms == -1


@pytest.mark.unit
@pytest.mark.parametrize("key,value", [
    ("connections.max.idle.ms", "0"), ("connections.max.idle.ms", "-5"), ("connections.max.idle.ms", "soon"),
    ("max.connections", "-1"), ("max.connections", "2147483648"), ("max.connections", "lots"),
    ("max.connections.per.ip", "-3"), ("max.connections.per.ip", "1.5"),
    ("socket.request.max.bytes", "0"), ("socket.request.max.bytes", "4294967296"),
    ("sasl.server.max.receive.size", "0"), ("bad.request.log.interval.ms", "0"),
    ("bad.request.log.interval.ms", "x"),
])
def test_invalid_values_name_the_key_and_the_value(key, value):
    with pytest.raises(ConfigError) as err:
        parse_config(BASE + f"{key}={value}\n")
    assert key in str(err.value) and repr(value) in str(err.value)


@pytest.mark.integration
@pytest.mark.parametrize("module", ["controller_impl", "broker_impl"])
def test_start_up_fails_on_an_invalid_limit(tmp_path, module):
    bad = tmp_path / "bad.properties"
    role = "controller" if module == "controller_impl" else "broker"
    bad.write_text(f"process.roles={role}\nnode.id=1\nlisteners=X://127.0.0.1:1\nlog.dirs=/tmp/x\n"
                   "metadata.log.dir=/tmp/x\ncontroller.quorum.voters=1@127.0.0.1:1\n"
                   "max.connections.per.ip=many\n")
    out = subprocess.run([sys.executable, "-m", module, str(bad)], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "max.connections.per.ip" in out.stderr and "'many'" in out.stderr


# -- the limits over real sockets (in-process server) ----------------------------------------------

class Handler:
    """BrokerHeartbeat v1; broker_id = milliseconds to sleep before answering."""

    supported_apis = {63: (1, 1)}
    api_rules = {63: authz.ApiRule(authz.CLUSTER_ACTION)}

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def handle(self, ctx, header, request):
        self.seen.append(ctx.principal)
        await asyncio.sleep(max(0, request.broker_id) / 1000)
        return wire.make(wire.response_class(63, 1), throttle_time=datetime.timedelta(0),
                         error_code=ErrorCode.none, is_caught_up=True, is_fenced=False, should_shut_down=False)


def hb(sleep_ms: int = 0, dirs: int = 0):
    import uuid
    return wire.make(wire.request_class(63, 1), broker_id=sleep_ms, broker_epoch=1, current_metadata_offset=0,
                     want_fence=False, want_shut_down=False,
                     offline_log_dirs=tuple(uuid.UUID(int=i + 1) for i in range(dirs)))


def serve(body, *, limits: ListenerLimits, security: SecurityConfig | None = None, tmp_path=None):
    async def main():
        handler = Handler()
        events = EventLog(str(tmp_path / "ev.jsonl") if tmp_path else "", 1, "test")
        server = KafkaServer(handler, host="127.0.0.1", port=0, listener_name="TEST", security=security,
                             limits=limits, events=events, log=lambda m: None)
        await server.start()
        try:
            return await asyncio.wait_for(body(server, handler), 60)
        finally:
            await server.stop()
            events.close()
    return asyncio.run(main())


async def closed_by_server(reader: asyncio.StreamReader, within_s: float = 5.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), within_s) == b""
    except (asyncio.TimeoutError, ConnectionError):
        return False


async def connect_from(port: int, source_ip: str):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source_ip, 0))


@pytest.mark.integration
def test_max_connections_closes_the_extra_connection_at_once():
    async def body(server, handler):
        first = await KafkaClient.connect("127.0.0.1", server.port)
        second = await KafkaClient.connect("127.0.0.1", server.port)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await closed_by_server(reader)
        writer.close()
        assert server.stats["refused_connections"] == 1
        assert (await first.request(hb())).error_code == ErrorCode.none  # the others keep working
        await second.close()
        for _ in range(100):  # the server notices the close
            if server.connection_count < 2:
                break
            await asyncio.sleep(0.02)
        third = await KafkaClient.connect("127.0.0.1", server.port)  # a slot is free again
        assert (await third.request(hb())).error_code == ErrorCode.none
        await first.close()
        await third.close()
    serve(body, limits=ListenerLimits(max_connections=2))


@pytest.mark.integration
def test_max_connections_per_ip_counts_each_source_address():
    async def body(server, handler):
        a1 = await connect_from(server.port, "127.0.0.1")
        a2 = await connect_from(server.port, "127.0.0.1")
        assert await closed_by_server(a2[0])
        b1 = await connect_from(server.port, "127.0.0.2")  # another address still gets in
        b1[1].write(framing.encode_frame(wire.encode_request(hb(), 5, "t")))
        frames = framing.FrameDecoder().feed(await asyncio.wait_for(b1[0].read(65536), 5))
        assert wire.decode_response(frames[0], 63, 1)[1].error_code == ErrorCode.none
        assert server.stats["refused_connections"] == 1
        for _r, w in (a1, a2, b1):
            w.close()
    serve(body, limits=ListenerLimits(max_connections_per_ip=1))


@pytest.mark.integration
def test_idle_connections_are_closed_but_busy_and_active_ones_are_not():
    async def body(server, handler):
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
        active = await KafkaClient.connect("127.0.0.1", server.port)
        busy = await KafkaClient.connect("127.0.0.1", server.port)
        slow = busy.send(hb(sleep_ms=1200))  # one request in progress for 4× the idle limit
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:  # a request every 100 ms keeps this one open
            assert (await active.request(hb())).error_code == ErrorCode.none
            await asyncio.sleep(0.1)
        assert await closed_by_server(idle_reader, within_s=5)
        assert (await asyncio.wait_for(slow, 10)).error_code == ErrorCode.none
        assert not active.closed and server.stats["closed_idle"] >= 1
        idle_writer.close()
        await active.close()
        await busy.close()
    serve(body, limits=ListenerLimits(idle_ms=300))


@pytest.mark.integration
def test_socket_request_max_bytes_and_the_smaller_limit_before_authentication():
    sasl = SecurityConfig(sasl_required=True, authorizer_enabled=True, users={"broker": "pw"},
                          super_users=frozenset({"User:broker"}))
    big = hb(dirs=200)  # ~3.2 kB

    async def body(server, handler):
        assert len(wire.encode_request(big, 1, "t")) > 2048
        anon = await KafkaClient.connect("127.0.0.1", server.port)  # ApiVersions fits
        anon.send_raw(wire.encode_request(big, 1, "t"))
        with pytest.raises(ClientError):  # over the pre-authentication limit: closed
            await anon.request(wire.request_class(18, 0)(), timeout_s=5)
        await anon.close()
        logged = await KafkaClient.connect("127.0.0.1", server.port, sasl=("broker", "pw"))
        assert (await logged.request(big)).error_code == ErrorCode.none  # fits socket.request.max.bytes
        logged.send_raw(b"\x00" * 9000)  # over socket.request.max.bytes: closed
        with pytest.raises(ClientError):
            await logged.request(hb(), timeout_s=5)
        await logged.close()
        assert handler.seen == ["User:broker"]
    serve(body, security=sasl, limits=ListenerLimits(max_frame_bytes=8192, pre_auth_max_frame_bytes=2048))


@pytest.mark.integration
def test_bad_frames_are_logged_once_per_interval_with_a_count(tmp_path):
    lines: list[str] = []

    async def body(server, handler):
        server._log = lines.append
        for _ in range(200):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(framing.encode_frame(struct.pack(">hhi", 63, 1, 7) + b"\xff" * 9))
            assert await closed_by_server(reader)
            writer.close()
        assert server.stats["closed_bad"] == 200
        assert len(lines) == 1 and "bad_request" in lines[0]  # not a line per frame
    serve(body, limits=ListenerLimits(bad_log_interval_ms=3_600_000), tmp_path=tmp_path)
    events = read_events(str(tmp_path / "ev.jsonl"))
    assert [e["event"] for e in events] == ["bad_request", "bad_request_suppressed"]  # the count at stop
    assert events[1]["count"] == 199 and events[0]["reason"]
    assert len(lines) == 2


@pytest.mark.unit
def test_rate_limited_log_windows():
    now = [0.0]
    out: list[tuple[str, dict]] = []
    log = RateLimitedLog(lambda kind, fields: out.append((kind, fields)), 1000, clock=lambda: now[0])
    for i in range(5):
        log.report("bad_request", n=i)
    log.report("connection_refused", n=0)
    assert out == [("bad_request", {"n": 0}), ("connection_refused", {"n": 0})]
    now[0] = 1.5  # the next interval: the count of the last one, then a full line
    log.report("bad_request", n=5)
    assert out[2:] == [("bad_request_suppressed", {"count": 4, "interval_ms": 1000}), ("bad_request", {"n": 5})]
    log.flush()
    assert len(out) == 4 and log.totals == {"bad_request": 6, "connection_refused": 1}


@pytest.mark.integration
def test_the_count_is_written_when_the_interval_ends_without_more_frames(tmp_path):
    async def body(server, handler):
        for _ in range(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"\xff\xff\xff\xff")  # negative size
            assert await closed_by_server(reader)
            writer.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(e["event"] == "bad_request_suppressed" for e in read_events(str(tmp_path / "ev.jsonl"))):
                return
            await asyncio.sleep(0.05)
        pytest.fail("no summary line after the interval")
    serve(body, limits=ListenerLimits(bad_log_interval_ms=200), tmp_path=tmp_path)
    summary = [e for e in read_events(str(tmp_path / "ev.jsonl")) if e["event"] == "bad_request_suppressed"]
    assert summary[0]["count"] == 9


# -- all of it on a real process ---------------------------------------------------------------

@pytest.mark.integration
def test_limits_on_a_real_controller(tmp_path):
    proc = ControllerProcess(str(tmp_path / "c"), extra={
        "connections.max.idle.ms": "500", "max.connections.per.ip": "3", "socket.request.max.bytes": "4096",
        "bad.request.log.interval.ms": "3600000"})
    proc.format()
    proc.start()
    try:
        async def body():
            big = await asyncio.open_connection("127.0.0.1", proc.port)
            big[1].write(struct.pack(">i", 5000) + b"\x00" * 5000)  # over socket.request.max.bytes
            assert await closed_by_server(big[0])
            idle = [await asyncio.open_connection("127.0.0.1", proc.port) for _ in range(3)]
            extra = await asyncio.open_connection("127.0.0.1", proc.port)
            assert await closed_by_server(extra[0])  # the 4th from 127.0.0.1
            for reader, _w in idle:  # nothing sent for 500 ms: closed
                assert await closed_by_server(reader, within_s=10)
            for _ in range(50):  # bad frames: counted, not a line each
                r, w = await asyncio.open_connection("127.0.0.1", proc.port)
                w.write(b"\x80\x00\x00\x00")
                assert await closed_by_server(r)
                w.close()
            fresh = await KafkaClient.connect("127.0.0.1", proc.port)
            await MetadataReader(fresh).fetch_once(0)
            await fresh.close()
            for _r, w in idle + [extra, big]:
                w.close()
        asyncio.run(body())
        assert proc.alive()
        assert proc.stop() == 0
        logged = read_events(proc.events_path)
        events = [e["event"] for e in logged]
        assert events.count("bad_request") == 1 and events.count("bad_request_suppressed") == 1
        first = next(e for e in logged if e["event"] == "bad_request")
        assert "frame size 5000 outside 0..4096" in first["reason"]
        assert next(e for e in logged if e["event"] == "bad_request_suppressed")["count"] == 50
        assert events.count("connection_refused") == 1 and "connection_idle_closed" in events
        assert sum(1 for line in proc.stderr().splitlines() if "bad_request" in line) == 2
    finally:
        proc.kill()
