"""Hostile Kafka frames for a listener, and a client that throws them at a real process.

Used by the fuzz tests (``tests/runtime/test_listener_fuzz.py``, driven by hypothesis) and
``bench/fuzz_bench.py`` (driven by ``random``): both hand a *chooser* to :func:`make_case`
— an object with ``choice(seq)``, ``integer(lo, hi)`` and ``blob(max_size)`` — so the
same generator serves both.

:class:`Corpus`: for every advertised (api key, version) of the listener, a few valid
requests built from kio's schema (random field values, small arrays, short timeouts so
that valid requests do not park connections) with the positions of their length fields
(``wire_guard.length_fields``; built in :mod:`testkit.fuzz_corpus`). :func:`make_case` makes one case of a class of
:data:`KINDS`:

* ``random`` — random bytes as a frame; ``header`` — a header prefix with any api key /
  version (unknown keys, negative versions) and random bytes after it;
* ``valid`` — a corpus request as it is; ``mutate`` — one with bytes flipped, inserted
  or deleted; ``truncate`` — cut short (size prefix consistent);
* ``length`` — one length field (array count, classic or compact; string, bytes or
  records length; tagged-field count or size) set to a hostile value: ±2^31, 2^32-2,
  -2, null, one more than the bytes left, an over-long varint;
* ``tags`` — a tagged-field section replaced: unknown tags with random values (valid: must
  be answered), a huge count, a size past the end, a known tag with a wrong-sized value;
* ``size`` — a lying size prefix: negative, 0, over ``socket.request.max.bytes``, larger
  or smaller than what follows;
* ``known`` — the 30-byte Metadata frame claiming 2^32-2 topics and the same trick on each flexible
  corpus request (first array count set to 2^32-2).

:class:`Thrower` keeps a connection (logging in with SASL PLAIN when asked), sends a case,
and — when the framing is honest — an ApiVersions probe after it: the probe's answer (or the
connection's end) says the case was dealt with, without timeouts. Cases with a lying size
are followed by a half-close instead.
"""

from __future__ import annotations

import asyncio
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from kafka_common.varint import encode_uvarint, read_uvarint
from kafka_common import framing, wire
from testkit.fuzz_corpus import Corpus

KINDS = ("random", "header", "valid", "mutate", "truncate", "length", "tags", "size", "known")
PROBE_CID = 0x7EAD1E55
HUGE_ARRAY_FRAME = bytes.fromhex("0000001a0003000c000000010002706100ffffffff0f0000000000000000")
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


class Chooser(Protocol):
    def choice(self, seq: Sequence[Any]) -> Any: ...
    def integer(self, lo: int, hi: int) -> int: ...
    def blob(self, max_size: int) -> bytes: ...


class RandomChooser:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.rng.choice(seq)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def blob(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))


# -- hostile cases ----------------------------------------------------------------------------

@dataclass
class Case:
    kind: str
    data: bytes  # what goes on the wire, size prefix(es) included
    honest: bool  # one frame whose size prefix matches what follows (a probe may follow)
    note: str = ""


def _frame(payload: bytes) -> bytes:
    return framing.encode_frame(payload)


def _width(buf: bytes, pos: int, enc: str) -> int:
    if enc == "i16":
        return 2
    if enc == "i32":
        return 4
    return read_uvarint(buf, pos)[1] - pos


def _hostile_length(ch: Chooser, enc: str, left: int) -> bytes:
    if enc == "i16":
        return _I16.pack(ch.choice([0x7FFF, -2, -1, -32768, min(left + 1, 0x7FFF), 1]))
    if enc == "i32":
        return _I32.pack(ch.choice([0x7FFFFFFF, -2, -1, -2**31, min(left + 1, 2**31 - 1), 2**30]))
    return ch.choice([encode_uvarint(2**32 - 1), encode_uvarint(2**32 - 2), encode_uvarint(0), encode_uvarint(left + 2),
                      encode_uvarint(2**31), b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80",
                      b"\xff\xff\xff\xff\x7f"])


def _header_prefix(api_key: int, version: int, cid: int) -> bytes:
    return struct.pack(">hhih", api_key, version, cid, 4) + b"fuzz"


def make_case(ch: Chooser, corpus: Corpus, kind: str | None = None) -> Case:
    kind = kind or ch.choice(KINDS)
    entries = corpus.entries
    if kind == "random":
        return Case(kind, _frame(ch.blob(ch.choice([8, 64, 512]))), True)
    if kind == "header":
        api_key = ch.choice([ch.integer(-5, 80), ch.choice(sorted(corpus.table) or [18]), 999, -1, 32767])
        version = ch.choice([ch.integer(-2, 20), -32768, 32767])
        return Case(kind, _frame(_header_prefix(api_key, version, ch.integer(0, 2**31 - 1))
                                 + ch.blob(48)), True, f"api_key={api_key} v{version}")
    if kind == "size":
        body = ch.choice(entries).payload if entries else b""
        size = ch.choice([-1, -2**31, 2**31 - 1, corpus.max_frame_bytes + 1, 0, len(body) + ch.integer(1, 64),
                          max(0, len(body) - ch.integer(1, 8))])
        return Case(kind, struct.pack(">i", size) + body, False, f"size={size} of {len(body)}")
    if kind == "known" or not entries:
        flexible = [e for e in entries if e.cls.__flexible__ and any(r == "array" for _, _, r in e.lengths)]
        if not flexible or ch.integer(0, 3) == 0:
            return Case("known", HUGE_ARRAY_FRAME, True, "the 30-byte frame claiming 2^32-2 topics")
        e = ch.choice(flexible)
        pos, enc, _ = next(t for t in e.lengths if t[2] == "array")
        hostile = encode_uvarint(2**32 - 1)
        payload = e.payload[:pos] + hostile + e.payload[pos + _width(e.payload, pos, enc):]
        return Case("known", _frame(payload), True, f"api_key={e.api_key} v{e.version} array=2^32-2")
    e = ch.choice(entries)
    note = f"api_key={e.api_key} v{e.version}"
    payload = e.payload
    if kind == "valid":
        return Case(kind, _frame(payload), True, note)
    if kind == "truncate":
        cut = ch.integer(0, max(0, len(payload) - 1))
        return Case(kind, _frame(payload[:cut]), True, f"{note} cut at {cut}/{len(payload)}")
    if kind == "mutate":
        buf = bytearray(payload)
        for _ in range(ch.integer(1, 4)):
            p = ch.integer(8, max(8, len(buf)))  # keep api key / version / correlation id
            op = ch.choice(["flip", "insert", "delete", "overwrite"])
            if op == "flip" and p < len(buf):
                buf[p] ^= 1 << ch.integer(0, 7)
            elif op == "insert":
                buf[p:p] = ch.blob(8)
            elif op == "delete":
                del buf[p:p + ch.integer(1, 8)]
            else:
                blob = ch.blob(8)
                buf[p:p + len(blob)] = blob
        return Case(kind, _frame(bytes(buf)), True, note)
    if kind == "length" and e.lengths:
        pos, enc, role = ch.choice(e.lengths)
        width = _width(payload, pos, enc)
        hostile = _hostile_length(ch, enc, len(payload) - pos - width)
        return Case(kind, _frame(payload[:pos] + hostile + payload[pos + width:]), True,
                    f"{note} {role} {enc}@{pos}={hostile.hex()}")
    tag_sections = [t for t in e.lengths if t[2] == "tags"]
    if kind == "tags" and tag_sections:
        pos, _enc, _ = ch.choice(tag_sections)
        count, after = read_uvarint(payload, pos)
        rest = payload[after:]
        if count:  # keep it simple: only rewrite empty sections
            return Case(kind, _frame(payload), True, f"{note} (section not empty)")
        variant = ch.choice(["unknown", "huge_count", "huge_size", "known_garbage"])
        if variant == "unknown":
            tags = sorted({ch.integer(1000, 100000) for _ in range(ch.integer(1, 3))})
            section = encode_uvarint(len(tags)) + b"".join(encode_uvarint(t) + encode_uvarint(len(v)) + v
                                                     for t in tags for v in [ch.blob(12)])
        elif variant == "huge_count":
            section = encode_uvarint(2**32 - 2) + encode_uvarint(5000) + encode_uvarint(3) + b"abc"
        elif variant == "huge_size":
            section = encode_uvarint(1) + encode_uvarint(5000) + encode_uvarint(2**31)
        else:
            section = encode_uvarint(1) + encode_uvarint(ch.integer(0, 3)) + encode_uvarint(ch.integer(0, 6)) + ch.blob(6)
        return Case(kind, _frame(payload[:pos] + section + rest), True, f"{note} tags:{variant}@{pos}")
    return Case("valid", _frame(payload), True, note)


# -- throwing them at a process -----------------------------------------------------------------

def probe_frame() -> bytes:
    return _frame(struct.pack(">hhih", 18, 0, PROBE_CID, 5) + b"probe")


@dataclass
class ThrowStats:
    frames: int = 0
    answered: int = 0  # the probe came back on the same connection
    closed: int = 0  # the server closed the connection
    slow: int = 0  # no probe answer in time (a parked valid request): connection dropped
    refused: int = 0  # no new connection (or login) possible
    connections: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class Thrower:
    """Sends cases to host:port; ``sasl=(user, password)`` logs each new connection in
    first (cases then reach the authenticated state), else cases arrive before any login."""

    def __init__(self, host: str, port: int, *, sasl: tuple[str, str] | None = None,
                 timeout_s: float = 5.0) -> None:
        self.host, self.port = host, port
        self.sasl = sasl
        self.timeout_s = timeout_s
        self.stats = ThrowStats()
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter, framing.FrameDecoder] | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, framing.FrameDecoder]:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout_s)
        self.stats.connections += 1
        dec = framing.FrameDecoder()
        if self.sasl is not None:
            user, password = self.sasl
            writer.write(_frame(wire.encode_request(wire.request_class(ApiKey.SASL_HANDSHAKE, 1)(mechanism="PLAIN"), 1, "fuzz")))
            token = b"\x00" + user.encode() + b"\x00" + password.encode()
            writer.write(_frame(wire.encode_request(wire.request_class(ApiKey.SASL_AUTHENTICATE, 2)(auth_bytes=token), 2, "fuzz")))
            got: list[bytes] = []
            while len(got) < 2:
                data = await asyncio.wait_for(reader.read(65536), self.timeout_s)
                if not data:
                    raise ConnectionError("closed during SASL login")
                got += dec.feed(data)
            _, resp = wire.decode_response(got[1], ApiKey.SASL_AUTHENTICATE, 2)
            if resp.error_code != ErrorCode.none:
                raise ConnectionError(f"SASL login failed: {resp.error_code.name}")
        return reader, writer, dec

    async def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def throw(self, case: Case) -> str:
        """'answered', 'closed', 'slow' or 'refused'."""
        self.stats.frames += 1
        self.stats.by_kind[case.kind] = self.stats.by_kind.get(case.kind, 0) + 1
        if not case.honest:
            await self.close()  # a lying size: a fresh connection, half-closed after it
        try:
            if self._conn is None:
                self._conn = await self._connect()
        except (ConnectionError, OSError, asyncio.TimeoutError):
            self.stats.refused += 1  # the caller checks whether the process still lives
            return "refused"
        reader, writer, dec = self._conn
        try:
            writer.write(case.data)
            if case.honest:
                writer.write(probe_frame())
            else:
                writer.write_eof()
            await writer.drain()
            outcome = await asyncio.wait_for(self._await_probe(reader, dec, case.honest), self.timeout_s)
        except asyncio.TimeoutError:
            outcome = "slow"
        except (ConnectionError, OSError):
            outcome = "closed"
        if outcome != "answered":
            await self.close()
        setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
        return outcome

    @staticmethod
    async def _await_probe(reader: asyncio.StreamReader, dec: framing.FrameDecoder, honest: bool) -> str:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return "closed"
            for frame in dec.feed(data):
                if honest and frame[:4] == struct.pack(">i", PROBE_CID):
                    return "answered"


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
