"""kafka_runtime.server + client over real loopback sockets (in-process server)."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from kafka_common import framing, wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.events import EventLog, read_events
from kafka_runtime.request_context import SecurityConfig
from kafka_runtime.server import KafkaServer

pytestmark = pytest.mark.integration


class Handler:
    """Serves BrokerHeartbeat v1 only; echoes the broker id in the epoch field of an
    error-free reply after a random delay (to prove in-order replies); broker_id -1 → no
    reply (acks=0 style); broker_id -2 → raises."""

    supported_apis = {63: (1, 1)}

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    async def handle(self, ctx, header, request):
        self.seen.append((request.broker_id, ctx.principal))
        if request.broker_id == -1:
            return None
        if request.broker_id == -2:
            raise RuntimeError("boom")
        await asyncio.sleep(random.random() / 200)
        cls = wire.response_class(63, ctx.api_version)
        code = ErrorCode.none if ctx.cluster_action_allowed else ErrorCode.cluster_authorization_failed
        return cls(throttle_time=__import__("datetime").timedelta(0), error_code=code,
                   is_caught_up=True, is_fenced=request.broker_id % 2 == 0, should_shut_down=False)


def hb(broker_id: int, version: int = 1):
    return wire.make(wire.request_class(63, version), broker_id=broker_id, broker_epoch=1,
                     current_metadata_offset=0, want_fence=False, want_shut_down=False, offline_log_dirs=())


def run(coro_fn, *, security=None, max_frame_bytes=framing.DEFAULT_MAX_FRAME_BYTES, tmp_path=None):
    async def main():
        handler = Handler()
        events = EventLog(str(tmp_path / "ev.jsonl") if tmp_path else "", 1, "test")
        server = KafkaServer(handler, host="127.0.0.1", port=0, listener_name="TEST",
                             security=security, max_frame_bytes=max_frame_bytes, events=events,
                             log=lambda m: None)
        await server.start()
        try:
            return await asyncio.wait_for(coro_fn(server, handler), 20)
        finally:
            await server.stop()
            events.close()
    return asyncio.run(main())


async def raw_exchange(port: int, payloads: list[bytes], *, expect: int, timeout: float = 2.0):
    """Send frames; read up to ``expect`` response frames; return (frames, closed_by_peer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for p in payloads:
        writer.write(p)
    await writer.drain()
    dec = framing.FrameDecoder()
    frames: list[bytes] = []
    closed = False
    try:
        while len(frames) < expect or expect == 0:
            data = await asyncio.wait_for(reader.read(65536), timeout)
            if not data:
                closed = True
                break
            frames += dec.feed(data)
    except asyncio.TimeoutError:
        pass
    writer.close()
    return frames, closed


def test_pipelined_requests_are_answered_in_order():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        futs = [client.send(hb(i)) for i in range(1, 60)]
        resps = await asyncio.gather(*futs)
        assert [r.is_fenced for r in resps] == [i % 2 == 0 for i in range(1, 60)]
        assert [b for b, _ in handler.seen] == list(range(1, 60))
        await client.close()
    run(body)


def test_api_versions_is_truthful_for_every_version():
    async def body(server, handler):
        for v in range(0, 5):
            client = await KafkaClient.connect("127.0.0.1", server.port, negotiate=False)
            resp = await client.request(wire.make(wire.request_class(18, v), client_software_name="t",
                                                  client_software_version="1"))
            table = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
            assert resp.error_code == ErrorCode.none
            assert table == {18: (0, 4), 63: (1, 1)}
            await client.close()
    run(body)


def test_unsupported_api_versions_version_gets_the_v0_fallback():
    async def body(server, handler):
        # ApiVersions v9 (no schema anywhere): header v2 bytes, then an empty tagged-field body
        frame = struct.pack(">hhih", 18, 9, 1234, -1) + b"\x00" + b"\x00\x00\x00"
        frames, _ = await raw_exchange(server.port, [framing.encode_frame(frame)], expect=1)
        cid, resp = wire.decode_response(frames[0], 18, 0)
        assert cid == 1234 and resp.error_code == ErrorCode.unsupported_version
        assert {a.api_key for a in resp.api_keys} == {18, 63}
    run(body)


def test_unsupported_version_of_a_known_api_answers_35_and_keeps_the_connection():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        resp = await client.request(hb(5, version=0))
        assert resp.error_code == ErrorCode.unsupported_version
        ok = await client.request(hb(5))
        assert ok.error_code == ErrorCode.none
        await client.close()
    run(body)


def test_no_response_when_handler_returns_none_and_next_reply_still_matches():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        client.send(hb(-1), expect_response=False)
        resp = await client.request(hb(3))
        assert resp.error_code == ErrorCode.none and resp.is_fenced is False
        await client.close()
    run(body)


def test_handler_exception_answers_unknown_server_error_and_is_logged(tmp_path):
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        resp = await client.request(hb(-2))
        assert resp.error_code == ErrorCode.unknown_server_error
        assert (await client.request(hb(4))).error_code == ErrorCode.none
        await client.close()
    run(body, tmp_path=tmp_path)
    assert any(e["event"] == "handler_error" for e in read_events(str(tmp_path / "ev.jsonl")))


@pytest.mark.parametrize("payload,why", [
    (struct.pack(">i", -5), "negative size"),
    (struct.pack(">i", 2048) + b"x" * 16, "oversize"),
    (framing.encode_frame(struct.pack(">hhi", 999, 0, 7) + b"\x00\x00"), "unknown api key"),
    (framing.encode_frame(struct.pack(">hhi", 63, 1, 7) + b"\xff" * 9), "garbage body"),
    (framing.encode_frame(b"\x00\x01"), "short header"),
])
def test_bad_frames_close_the_connection_and_the_server_keeps_serving(tmp_path, payload, why):
    async def body(server, handler):
        frames, closed = await raw_exchange(server.port, [payload], expect=0)
        assert closed and frames == [], why
        client = await KafkaClient.connect("127.0.0.1", server.port)
        assert (await client.request(hb(1))).error_code == ErrorCode.none
        await client.close()
    run(body, max_frame_bytes=1024, tmp_path=tmp_path)
    events = [e for e in read_events(str(tmp_path / "ev.jsonl")) if e["event"] != "request_metrics"]
    assert [e["event"] for e in events] == ["bad_request"]
    assert events[0]["listener"] == "TEST" and events[0]["reason"]


SASL = SecurityConfig(sasl_required=True, authorizer_enabled=True,
                      users={"broker": "b-secret", "alice": "a-secret"},
                      super_users=frozenset({"User:broker"}))


def test_sasl_plain_login_gives_principal_and_cluster_action_to_super_users():
    async def body(server, handler):
        broker = await KafkaClient.connect("127.0.0.1", server.port, sasl=("broker", "b-secret"))
        assert broker.versions[17] == (1, 1) and broker.versions[36] == (0, 2)
        assert (await broker.request(hb(1))).error_code == ErrorCode.none
        alice = await KafkaClient.connect("127.0.0.1", server.port, sasl=("alice", "a-secret"))
        assert (await alice.request(hb(3))).error_code == ErrorCode.cluster_authorization_failed
        assert handler.seen == [(1, "User:broker"), (3, "User:alice")]
        await broker.close()
        await alice.close()
    run(body, security=SASL)


def test_failed_login_answers_58_then_closes():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        await client.request(wire.request_class(17, 1)(mechanism="PLAIN"))
        resp = await client.request(wire.request_class(36, 2)(auth_bytes=b"\x00broker\x00wrong"))
        assert resp.error_code == ErrorCode.sasl_authentication_failed
        with pytest.raises(ClientError):
            await client.request(hb(1), timeout_s=2)
        await client.close()
        assert handler.seen == []
    run(body, security=SASL)


def test_requests_before_authentication_close_the_connection_but_api_versions_works():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)  # ApiVersions answered
        assert 63 in client.versions
        with pytest.raises(ClientError):
            await client.request(hb(1), timeout_s=2)
        await client.close()
        assert handler.seen == []
    run(body, security=SASL)


def test_handshake_v0_is_not_offered():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        resp = await client.request(wire.request_class(17, 0)(mechanism="PLAIN"))
        assert resp.error_code == ErrorCode.unsupported_version
        await client.authenticate("broker", "b-secret")  # v1 still works on the same connection
        assert (await client.request(hb(1))).error_code == ErrorCode.none
        await client.close()
    run(body, security=SASL)


def test_unknown_mechanism_is_refused():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        resp = await client.request(wire.request_class(17, 1)(mechanism="SCRAM-SHA-256"))
        assert resp.error_code == ErrorCode.unsupported_sasl_mechanism and resp.mechanisms == ("PLAIN",)
        await client.close()
    run(body, security=SASL)


def test_without_authorizer_everyone_may_call_everything():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        assert 17 not in client.versions
        assert (await client.request(hb(1))).error_code == ErrorCode.none
        await client.close()
    run(body, security=SecurityConfig())


def test_security_config_from_server_properties():
    from kafka_common.config import parse_config
    cfg = parse_config("process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://h:1,PLAIN://h:2\n"
                       "metadata.log.dir=/x\nauthorizer.enabled=true\n"
                       "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAIN:PLAINTEXT\n"
                       "sasl.plain.users=broker:pw\nsuper.users=User:broker\n")
    sec = SecurityConfig.for_listener(cfg, "CONTROLLER")
    assert sec.sasl_required and sec.has_cluster_action("User:broker")
    off = parse_config("process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://h:1\n"
                       "metadata.log.dir=/x\nlistener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT\n")
    optional = SecurityConfig.for_listener(off, "CONTROLLER")
    assert optional.sasl_offered and not optional.sasl_required
    assert not sec.has_cluster_action("User:ANONYMOUS")
    assert not SecurityConfig.for_listener(cfg, "PLAIN").sasl_required


def test_client_picks_the_best_common_version():
    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        assert client.pick_version(63, 0, 2) == 1
        req = client.build(63, 0, 2, broker_id=4, broker_epoch=1, current_metadata_offset=0,
                           want_fence=False, want_shut_down=False, offline_log_dirs=())
        assert type(req).__version__ == 1
        assert (await client.request(req)).error_code == ErrorCode.none
        with pytest.raises(ClientError, match="no common version"):
            client.pick_version(63, 2, 5)
        with pytest.raises(ClientError, match="does not support"):
            client.pick_version(0, 3, 9)
        await client.close()
    run(body)


def test_sasl_offered_but_optional_without_authorizer():
    sec = SecurityConfig(sasl_offered=True, users={"broker": "pw"})

    async def body(server, handler):
        plain = await KafkaClient.connect("127.0.0.1", server.port)
        assert 17 in plain.versions
        assert (await plain.request(hb(1))).error_code == ErrorCode.none
        logged = await KafkaClient.connect("127.0.0.1", server.port, sasl=("broker", "pw"))
        assert (await logged.request(hb(3))).error_code == ErrorCode.none
        assert handler.seen == [(1, "User:ANONYMOUS"), (3, "User:broker")]
        again = await logged.request(wire.request_class(17, 1)(mechanism="PLAIN"))
        assert again.error_code == ErrorCode.illegal_sasl_state
        await plain.close()
        await logged.close()
    run(body, security=sec)


# -- decode only what the connection may send; rules as data -----------------------------------

def test_an_api_the_listener_does_not_serve_is_refused_from_the_header_alone():
    """Metadata (not served here) claiming 2^32-2 topics (the huge-array frame): never decoded,
    answered UNSUPPORTED_VERSION in Metadata v12's shape, the connection stays usable."""
    from testkit import fuzz

    async def body(server, handler):
        client = await KafkaClient.connect("127.0.0.1", server.port)
        fut = asyncio.get_running_loop().create_future()
        client._pending.append((1, 3, 12, fut))  # the frame's correlation id is 1
        client._writer.write(fuzz.HUGE_ARRAY_FRAME)
        resp = await asyncio.wait_for(fut, 10)
        assert resp.brokers == () and resp.topics == ()
        assert (await client.request(hb(2))).error_code == ErrorCode.none
        await client.close()
    run(body)


def test_before_authentication_nothing_but_the_sasl_apis_is_decoded(tmp_path):
    from testkit import fuzz

    async def body(server, handler):
        for payload in (fuzz.HUGE_ARRAY_FRAME, framing.encode_frame(wire.encode_request(hb(1), 3, "t"))):
            frames, closed = await raw_exchange(server.port, [payload], expect=0)
            assert closed and frames == []
        assert handler.seen == []
    run(body, security=SASL, tmp_path=tmp_path)
    reasons = [e["reason"] for e in read_events(str(tmp_path / "ev.jsonl")) if e["event"] == "bad_request"]
    assert reasons and "before SASL authentication" in reasons[0]


class RuledHandler(Handler):
    """The same API, its permission declared as data; a custom refusal."""

    def __init__(self) -> None:
        super().__init__()
        from kafka_common import authz

        def deny(request, version, code, message):
            cls = wire.response_class(63, version)
            return cls(throttle_time=__import__("datetime").timedelta(0), error_code=code,
                       is_caught_up=False, is_fenced=True, should_shut_down=request.broker_id == 7)
        self.api_rules = {63: authz.ApiRule(authz.CLUSTER_ACTION, deny=deny)}


def test_api_rules_are_enforced_before_the_handler():
    async def main():
        handler = RuledHandler()
        server = KafkaServer(handler, host="127.0.0.1", port=0, listener_name="TEST", security=SASL,
                             log=lambda m: None)
        await server.start()
        try:
            alice = await KafkaClient.connect("127.0.0.1", server.port, sasl=("alice", "a-secret"))
            denied = await alice.request(hb(7))
            assert denied.error_code == ErrorCode.cluster_authorization_failed and denied.should_shut_down
            broker = await KafkaClient.connect("127.0.0.1", server.port, sasl=("broker", "b-secret"))
            assert (await broker.request(hb(9))).error_code == ErrorCode.none
            assert handler.seen == [(9, "User:broker")] and server.stats["denied"] == 1
            await alice.close()
            await broker.close()
        finally:
            await server.stop()
    asyncio.run(main())


def test_a_rule_must_name_a_known_permission():
    from kafka_common import authz
    with pytest.raises(ValueError, match="unknown permission"):
        authz.ApiRule("SUPERPOWERS")


def test_request_classes_of_the_handler_decode_versions_kio_lacks():
    """Produce v0–v2 (kio has no schema; the broker declares its own) through the listener."""
    from broker_impl.api import legacy_produce

    class ProduceHandler:
        supported_apis = {0: (0, 2)}
        request_classes = legacy_produce.REQUEST_CLASSES

        def __init__(self) -> None:
            self.seen = []

        async def handle(self, ctx, header, request):
            self.seen.append((ctx.api_version, request.topic_data[0].name))
            mod = legacy_produce.response_module(ctx.api_version)
            return mod.ProduceResponse(responses=(mod.TopicProduceResponse(
                name=request.topic_data[0].name, partition_responses=(mod.PartitionProduceResponse(
                    index=0, error_code=ErrorCode.none, base_offset=42),)),))

    async def main():
        handler = ProduceHandler()
        server = KafkaServer(handler, host="127.0.0.1", port=0, listener_name="TEST", log=lambda m: None)
        await server.start()
        try:
            for version in (0, 1, 2):
                mod = legacy_produce.request_module(version)
                req = mod.ProduceRequest(acks=1, timeout=__import__("datetime").timedelta(seconds=1),
                                         topic_data=(mod.TopicProduceData(name="old", partition_data=(
                                             mod.PartitionProduceData(index=0, records=b"x"),)),))
                frames, closed = await raw_exchange(server.port, [framing.encode_frame(
                    wire.encode_request(req, 5, "t"))], expect=1)
                assert not closed and len(frames) == 1
                resp_cls = legacy_produce.response_module(version).ProduceResponse
                hdr, n = wire.decode(resp_cls.__header_schema__, frames[0])
                resp, _ = wire.decode(resp_cls, frames[0], n)
                assert hdr.correlation_id == 5 and resp.responses[0].partition_responses[0].base_offset == 42
            assert handler.seen == [(0, "old"), (1, "old"), (2, "old")]
        finally:
            await server.stop()
    asyncio.run(main())
