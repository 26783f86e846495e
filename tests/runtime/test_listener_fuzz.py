"""Hostile frames against real processes over TCP, per listener: the controller listener and
a broker's client listener, each with and without SASL (before and after logging in).

Every class of malformed frame of ``testkit.fuzz`` (random bodies, headers of any
api/version, mutated and truncated requests of every advertised API × version, hostile
length prefixes — arrays, strings, bytes, compact and classic —, garbage tagged fields,
lying size prefixes, the 30-byte frame claiming 2^32-2 topics), chosen by hypothesis. After them the
process must be alive, answer ApiVersions and a real request on a new connection, and its
RSS must stay within a bound. ``jbodlab bench fuzz`` runs 100k frames per listener.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from kafka_runtime.controller_client import MetadataReader

from harness.run.local_processes import ControllerProcess
from kafka_common import wire, wire_guard
from kafka_common.wire import ErrorCode
from kafka_common.varint import encode_uvarint
from testkit import fuzz
from kafka_runtime.client import KafkaClient

from testkit.cluster import Cluster  # noqa: E402

pytestmark = pytest.mark.integration

SASL_CTRL = {"authorizer.enabled": "true", "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
             "sasl.plain.users": "broker:b-pw,alice:a-pw", "super.users": "User:broker"}
MAX_FRAME = 65536  # socket.request.max.bytes of the processes under test
RSS_GROWTH_BOUND = 96 << 20
EXAMPLES = int(os.environ.get("JBODLAB_FUZZ_EXAMPLES", "400"))


class Target:
    """One listener of a running process: where, which process, how to log in, how to check
    that it still serves a real request."""

    def __init__(self, name: str, port: int, proc, sasl: tuple[str, str] | None, kind: str, stop) -> None:
        self.name, self.port, self.proc, self.sasl, self.kind, self._stop = name, port, proc, sasl, kind, stop

    def stop(self) -> None:
        self._stop()

    def rss(self) -> int:
        return fuzz.rss_bytes(self.proc.proc.pid)

    async def serves(self) -> None:
        """ApiVersions + a real request on a fresh connection."""
        client = await KafkaClient.connect("127.0.0.1", self.port, sasl=self.sasl, timeout_s=20)
        try:
            assert 18 in client.versions
            if self.kind == "controller":
                reader = MetadataReader(client)
                await reader.fetch_once(0)  # the metadata log, as brokers read it
            else:
                resp = await client.request(client.build(3, 1, 12, topics=None, allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False),
                                            timeout_s=20)
                assert [b.node_id for b in resp.brokers] == [1]
        finally:
            await client.close()


@pytest.fixture(scope="module", params=["controller", "controller-sasl", "broker", "broker-sasl"])
def target(request, tmp_path_factory):
    name = request.param
    sasl = name.endswith("sasl")
    tmp = tmp_path_factory.mktemp(name)
    if name.startswith("controller"):
        proc = ControllerProcess(str(tmp), extra={"socket.request.max.bytes": str(MAX_FRAME),
                                                  **(SASL_CTRL if sasl else {})})
        proc.format()
        proc.start()
        t = Target(name, proc.port, proc, ("broker", "b-pw") if sasl else None, "controller", proc.kill)
    else:
        cluster = Cluster(tmp, n_brokers=1, sasl=sasl, broker_extra={"socket.request.max.bytes": str(MAX_FRAME)})
        cluster.prepare()
        cluster.start()
        broker = cluster.brokers[0]
        t = Target(name, broker.port, broker, ("admin", "ad-pw") if sasl else None, "broker", cluster.kill)
    yield t
    t.stop()


def _corpus(target: Target) -> fuzz.Corpus:
    async def table():
        client = await KafkaClient.connect("127.0.0.1", target.port, sasl=target.sasl)
        try:
            return client.versions
        finally:
            await client.close()
    extra = {}
    if target.kind == "broker":
        from broker_impl.api.legacy_produce import REQUEST_CLASSES
        extra = dict(REQUEST_CLASSES)
    return fuzz.Corpus.build(asyncio.run(table()), seed=7, per_version=2, extra_classes=extra,
                             max_frame_bytes=MAX_FRAME)


class HypothesisChooser:
    def __init__(self, data) -> None:
        self.data = data

    def choice(self, seq):
        return self.data.draw(st.sampled_from(list(seq)))

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def blob(self, max_size: int) -> bytes:
        return self.data.draw(st.binary(max_size=max_size))


def _exchange(port: int, payload: bytes) -> tuple[bytes, bool]:
    """Send raw bytes; (what came back within a moment, whether the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        s.settimeout(3)
        got = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    return got, True
                got += data
        except socket.timeout:
            return got, False


def _login(s: socket.socket, user: str, password: str) -> None:
    s.sendall(fuzz._frame(wire.encode_request(wire.request_class(17, 1)(mechanism="PLAIN"), 1, "t")))
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    s.sendall(fuzz._frame(wire.encode_request(wire.request_class(36, 2)(auth_bytes=token), 2, "t")))
    want, got = 2, b""
    while want:
        got += s.recv(65536)
        while len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big"):
            n = int.from_bytes(got[:4], "big")
            frame, got = got[4:4 + n], got[4 + n:]
            want -= 1
            if want == 0:
                assert wire.decode_response(frame, 36, 2)[1].error_code == ErrorCode.none


def test_huge_array_frame_before_and_after_authentication(target):
    """The 30-byte Metadata frame claiming 2^32-2 topics: an error reply or a closed
    connection, before and after logging in; the process lives and serves."""
    got, closed = _exchange(target.port, fuzz.HUGE_ARRAY_FRAME)
    assert closed or got, "neither an answer nor a close"
    if target.sasl is None and target.kind == "controller":
        # Metadata is not a controller API: refused from the header alone, connection kept
        assert not closed and len(got) > 8 and got[4:8] == (1).to_bytes(4, "big")  # its correlation id
    if target.sasl is not None:
        assert closed and got == b""  # not even decoded before SASL authentication
        with socket.create_connection(("127.0.0.1", target.port), timeout=10) as s:
            s.settimeout(10)
            _login(s, *target.sasl)
            s.sendall(fuzz.HUGE_ARRAY_FRAME + fuzz.probe_frame())
            reply = b""
            try:
                while True:
                    data = s.recv(65536)
                    if not data:
                        break
                    reply += data
                    if fuzz.PROBE_CID.to_bytes(4, "big") in reply:
                        break
            except socket.timeout:
                pytest.fail("no answer and no close after logging in")
    assert target.proc.alive(), target.proc.stderr()
    asyncio.run(target.serves())


def _with_unknown_tags(payload: bytes, cls: type) -> bytes:
    """``payload`` with unknown tagged fields (tags 1000+, random values) in every tagged-field
    section: the request header's, each nested entity's, the body's."""
    sections = [pos for pos, _enc, role in wire_guard.length_fields(payload, (cls.__header_schema__, cls))
                if role == "tags"]
    assert len(sections) >= 3, sections  # header, a nested entity, the body
    out = bytearray(payload)
    for n, pos in enumerate(reversed(sections)):
        assert out[pos] == 0  # an empty section: replace it
        extra = [(1000 + n, b"\x07" * (n + 1)), (54321, b"newer-client")]
        out[pos:pos + 1] = bytes([len(extra)]) + b"".join(
            encode_uvarint(tag) + encode_uvarint(len(v)) + v for tag, v in extra)
    return bytes(out)


def test_unknown_tagged_fields_in_header_and_body_are_ignored(target):
    """KIP-482: a newer client's tagged fields must be skipped, not close the connection. A
    real request (broker: Metadata v12 for a topic; controller: Fetch v13 of the metadata
    log) with unknown tags in the header, a nested entity and the body is answered like the
    same request without them, and the connection stays usable."""
    if target.kind == "broker":
        mod = wire.request_module(3, 12)
        request = wire.make(wire.request_class(3, 12), topics=(mod.MetadataRequestTopic(topic_id=None, name="nope"),),
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    else:
        request = MetadataReader.__new__(MetadataReader)
        request.version, request.next_offset = 13, 0
        request = request.fetch_request(0)
    cls = type(request)
    plain = wire.encode_request(request, 41, "tags")
    tagged = _with_unknown_tags(plain, cls)
    assert wire.decode_request(tagged)[1] == request  # the guard cuts them out for kio

    async def run():
        client = await KafkaClient.connect("127.0.0.1", target.port, sasl=target.sasl)
        try:
            answers = []
            for payload in (tagged, plain):  # raw bytes; the client matches the answer as usual
                fut = asyncio.get_running_loop().create_future()
                client._pending.append((41, cls.__api_key__, cls.__version__, fut))
                client.send_raw(payload)
                answers.append(await asyncio.wait_for(fut, 20))
            again = await client.request(request, timeout_s=20)  # the same connection, still open
            return answers, again
        finally:
            await client.close()
    (with_tags, without), again = asyncio.run(run())
    if target.kind == "broker":
        for resp in (with_tags, without, again):
            assert [b.node_id for b in resp.brokers] == [1]
            assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    else:
        for resp in (with_tags, without, again):
            assert resp.error_code == ErrorCode.none and resp.responses[0].partitions[0].error_code == ErrorCode.none
    assert target.proc.alive()


def test_every_api_version_with_each_length_prefix_made_hostile(target):
    """A sweep, not a sample: every advertised API × version of the corpus, each of its length
    prefixes (array counts, string/bytes/records lengths, tagged-field counts and sizes;
    classic and compact) replaced by a hostile value in turn — after logging in where the
    listener requires it, so the frames reach the decoder."""
    corpus = _corpus(target)
    hostile = {"i16": [b"\x7f\xff", b"\xff\xfe", b"\xff\xff"],
               "i32": [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00"],
               "uvarint": [b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x80\x01"]}
    cases, seen = [], set()
    versions = {(e.api_key, e.version) for e in corpus.entries}
    for e in corpus.entries:
        for i, (pos, enc, role) in enumerate(e.lengths):
            width = fuzz._width(e.payload, pos, enc)
            value = hostile[enc][i % 3]
            cases.append(fuzz.Case("length", fuzz._frame(e.payload[:pos] + value + e.payload[pos + width:]), True,
                                   f"api_key={e.api_key} v{e.version} {role} {enc}@{pos}"))
            seen.add((enc, role))
    assert {("i32", "array"), ("uvarint", "array"), ("i16", "length"), ("uvarint", "length"),
            ("uvarint", "tags")} <= seen, seen
    advertised = {(k, v) for k, (lo, hi) in corpus.table.items() for v in range(lo, hi + 1)}
    decodable = {(k, v) for k, v in advertised if wire.schema_exists(k, v) or (k == 0 and v <= 2)}
    assert versions == decodable and len(versions) > 30, decodable - versions  # every one of them
    if target.kind == "broker":   # Kafka 3.9's old versions (kafka_common.legacy_schemas) among them
        from kafka_common.legacy_schemas import VERSIONS as LEGACY
        old = {(2, 0), (8, 0), (8, 1), (9, 0), (19, 0), (19, 1), (32, 0), (34, 0), (35, 0), (1, 0), (1, 3)}
        assert old <= LEGACY & versions, old - versions

    async def sweep():
        thrower = fuzz.Thrower("127.0.0.1", target.port, sasl=target.sasl, timeout_s=5)
        try:
            for case in cases:
                await thrower.throw(case)
                if thrower.stats.frames % 100 == 0:
                    assert target.proc.alive(), f"{target.name} died at {case.note}: {target.proc.stderr()}"
        finally:
            await thrower.close()
        return thrower.stats
    stats = asyncio.run(sweep())
    assert stats.frames == len(cases) and stats.refused == 0, stats
    assert target.proc.alive(), target.proc.stderr()
    asyncio.run(target.serves())


def test_fuzzed_frames_leave_the_listener_serving(target):
    """Before logging in (every listener) and, on SASL listeners, after."""
    corpus = _corpus(target)
    kinds_of_length = {role for e in corpus.entries for _, _, role in e.lengths}
    assert {"array", "length", "tags"} <= kinds_of_length and len(corpus.entries) > 20
    asyncio.run(target.serves())
    rss_before = target.rss()
    for login in [None] + ([target.sasl] if target.sasl else []):
        stats = _fuzz(target, corpus, login)
        assert stats.frames >= EXAMPLES and set(stats.by_kind) == set(fuzz.KINDS), stats
        assert stats.closed > 0 and stats.refused == 0, stats
        if login is not None or target.sasl is None:
            assert stats.answered > 0, stats  # frames reach the decoder and get answers
        assert target.proc.alive(), target.proc.stderr()
        asyncio.run(target.serves())
    growth = target.rss() - rss_before
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth >> 20} MiB"


def _fuzz(target: Target, corpus: fuzz.Corpus, login: tuple[str, str] | None) -> fuzz.ThrowStats:
    runner = asyncio.Runner()
    thrower = fuzz.Thrower("127.0.0.1", target.port, sasl=login, timeout_s=3)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(data=st.data(), kind=st.sampled_from(fuzz.KINDS))
    def throw(data, kind):
        case = fuzz.make_case(HypothesisChooser(data), corpus, kind)
        runner.run(thrower.throw(case))
        assert target.proc.alive(), (f"{target.name} died after {case.kind} {case.note} "
                                     f"{case.data[:64].hex()}: {target.proc.stderr()}")

    try:
        throw()
    finally:
        runner.run(thrower.close())
        runner.close()
    return thrower.stats
