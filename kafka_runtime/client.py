"""An async Kafka-protocol client connection (brokers → controller, followers → leaders,
tests and the demo).

* correlation ids, request header v1/v2 as the request version demands (kio picks it);
* responses are matched to requests in order (Kafka answers a connection in order), so
  requests may be pipelined: ``send()`` returns a future, ``request()`` awaits it;
* ApiVersions negotiation on connect (``versions`` holds the peer's table;
  ``pick_version(api_key, lo, hi)`` the highest common version);
* optional SASL PLAIN (SaslHandshake v1 + SaslAuthenticate v2).

Errors: :class:`ClientError` (connection lost, timeout, SASL failure, bad response).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import socket
from typing import Any

from kafka_common import framing, wire
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.errors import KafkaRuntimeError


class ClientError(KafkaRuntimeError):
    """The connection failed or the peer answered something unusable."""


class ConnectionClosed(ClientError):
    pass


# Name lookups in flight, one per (loop, host, port): callers share it, so a name that
# resolves slowly holds one resolver thread, not one per attempt (uvloop resolves on libuv's
# pool of 4 threads; a retry loop starting a lookup every attempt could fill it and hold up
# the lookups of names that answer).
_lookups: dict[tuple[asyncio.AbstractEventLoop, str, int], asyncio.Future] = {}


def _lookup(host: str, port: int) -> asyncio.Future:
    loop = asyncio.get_running_loop()
    key = (loop, host, port)
    fut = _lookups.get(key)
    if fut is None:
        fut = _lookups[key] = asyncio.ensure_future(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))

        def done(f: asyncio.Future) -> None:
            if _lookups.get(key) is f:
                del _lookups[key]
            if not f.cancelled():
                f.exception()  # retrieved: a caller that gave up must not leave it unread
        fut.add_done_callback(done)
    return fut


# The stream reader's buffer limit (asyncio's default is 64 KiB: it pauses the transport past
# 128 KiB, so a follower's 10 MB fetch answer arrived ~128 KiB per wake-up of the read loop —
# on a machine whose cores are busy each wake-up waits for a core; docs/status.md). The frames
# are buffered whole by the decoder anyway.
READ_BUFFER_BYTES = 8 << 20


async def open_stream(host: str, port: int, timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Name lookup, then a TCP connect to each address in turn, within ``timeout_s`` in
    all. A failure says which step failed and how long each took (a "timeout" that was a
    slow lookup and one that was an unanswered SYN are different faults)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        infos = await asyncio.wait_for(asyncio.shield(_lookup(host, port)), timeout_s)
    except asyncio.TimeoutError:
        raise ClientError(f"cannot connect to {host}:{port}: name lookup took more than {timeout_s:.2f}s") from None
    except OSError as exc:
        raise ClientError(f"cannot connect to {host}:{port}: name lookup failed after "
                          f"{loop.time() - start:.3f}s: {exc!r}") from None
    looked_up = loop.time() - start
    failure = "no address"
    for family, _, _, _, sockaddr in infos:
        remaining = timeout_s - (loop.time() - start)
        if remaining <= 0:
            break
        began = loop.time()
        try:
            return await asyncio.wait_for(asyncio.open_connection(sockaddr[0], sockaddr[1], family=family,
                                                                  limit=READ_BUFFER_BYTES), remaining)
        except (OSError, asyncio.TimeoutError) as exc:
            failure = f"{sockaddr[0]}: {exc!r} after {loop.time() - began:.3f}s"
    raise ClientError(f"cannot connect to {host}:{port}: {failure} (name lookup {looked_up:.3f}s)")


class KafkaClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client_id: str, max_frame_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: collections.deque[tuple[int, int, int, asyncio.Future]] = collections.deque()
        self._decoder = framing.FrameDecoder(max_frame_bytes)
        self._closed: BaseException | None = None
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        self.versions: dict[int, tuple[int, int]] = {}

    @classmethod
    async def connect(cls, host: str, port: int, *, client_id: str = "jbodlab",
                      sasl: tuple[str, str] | None = None, negotiate: bool = True,
                      timeout_s: float = 10.0,
                      max_frame_bytes: int = framing.DEFAULT_MAX_FRAME_BYTES) -> "KafkaClient":
        reader, writer = await open_stream(host, port, timeout_s)
        client = cls(reader, writer, client_id=client_id, max_frame_bytes=max_frame_bytes)
        try:
            if negotiate or sasl:
                await client.negotiate(timeout_s=timeout_s)
            if sasl is not None:
                await client.authenticate(*sasl, timeout_s=timeout_s)
        except BaseException:
            await client.close()
            raise
        return client

    # -- plumbing ---------------------------------------------------------------------
    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(1 << 20)
                if not data:
                    raise ConnectionClosed("connection closed by peer")
                for frame in self._decoder.feed(data):
                    if not self._pending:
                        raise ClientError("response with no request outstanding")
                    correlation_id, api_key, version, fut = self._pending.popleft()
                    try:
                        got, response = wire.decode_response(frame, api_key, version)
                        if got != correlation_id:
                            raise ClientError(f"correlation id {got}, expected {correlation_id}")
                    except Exception as exc:
                        if not fut.done():
                            fut.set_exception(ClientError(f"bad response to api_key={api_key} v{version}: {exc}"))
                        continue
                    if not fut.done():
                        fut.set_result(response)
        except asyncio.CancelledError:
            self._fail(ConnectionClosed("client closed"))
        except Exception as exc:
            self._fail(exc if isinstance(exc, ClientError) else ClientError(f"{type(exc).__name__}: {exc}"))

    def _fail(self, exc: BaseException) -> None:
        self._closed = exc
        while self._pending:
            *_, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # a caller that dropped the future must not get a warning
        self._writer.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def send(self, request: Any, *, expect_response: bool = True) -> asyncio.Future:
        """Write ``request`` now; the future resolves to its response (in order)."""
        if self._closed is not None:
            raise ConnectionClosed(str(self._closed))
        cls = type(request)
        correlation_id = next(self._ids) & 0x7FFFFFFF
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        payload = wire.encode_request(request, correlation_id, self.client_id)
        if expect_response:
            self._pending.append((correlation_id, cls.__api_key__, cls.__version__, fut))
        else:
            fut.set_result(None)
        self._writer.write(framing.encode_frame(payload))
        return fut

    def send_raw(self, frame_payload: bytes) -> None:
        """Write arbitrary bytes as one frame (tests of the server's robustness)."""
        self._writer.write(framing.encode_frame(frame_payload))

    async def request(self, request: Any, *, timeout_s: float = 30.0) -> Any:
        fut = self.send(request)
        await self._writer.drain()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            raise ClientError(f"{type(request).__name__}: no response within {timeout_s}s") from None

    async def close(self) -> None:
        if self._closed is None:
            self._fail(ConnectionClosed("client closed"))
        self._task.cancel()
        try:
            await self._task
        except BaseException:
            pass
        try:
            await self._writer.wait_closed()
        except Exception:
            pass

    # -- negotiation ------------------------------------------------------------------
    async def negotiate(self, *, timeout_s: float = 10.0, version: int = 3) -> dict[int, tuple[int, int]]:
        req = wire.make(wire.request_class(ApiKey.API_VERSIONS, version), client_software_name="jbodlab",
                        client_software_version="0.1.0")
        resp = await self.request(req, timeout_s=timeout_s)
        if resp.error_code == ErrorCode.unsupported_version and version > 0:
            return await self.negotiate(timeout_s=timeout_s, version=0)
        if resp.error_code != ErrorCode.none:
            raise ClientError(f"ApiVersions failed: {resp.error_code.name}")
        self.versions = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
        return self.versions

    def pick_version(self, api_key: int, lo: int, hi: int) -> int:
        """Highest version in [lo, hi] that the peer also supports; ClientError if none."""
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise ClientError(f"peer does not support api_key={api_key}")
        best = min(hi, theirs[1])
        if best < max(lo, theirs[0]):
            raise ClientError(f"no common version for api_key={api_key}: ours {lo}-{hi}, theirs {theirs}")
        return best

    def build(self, api_key: int, lo: int, hi: int, **fields: Any) -> Any:
        """A request of ``api_key`` at the best common version in [lo, hi]; fields the chosen
        version lacks are dropped (see ``wire.make``)."""
        return wire.make(wire.request_class(api_key, self.pick_version(api_key, lo, hi)), **fields)

    async def authenticate(self, user: str, password: str, *, timeout_s: float = 10.0) -> None:
        hs = await self.request(wire.request_class(ApiKey.SASL_HANDSHAKE, 1)(mechanism="PLAIN"), timeout_s=timeout_s)
        if hs.error_code != ErrorCode.none:
            raise ClientError(f"SASL handshake failed: {hs.error_code.name} (mechanisms {hs.mechanisms})")
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        auth = await self.request(wire.request_class(ApiKey.SASL_AUTHENTICATE, 2)(auth_bytes=token), timeout_s=timeout_s)
        if auth.error_code != ErrorCode.none:
            raise ClientError(f"SASL authentication failed: {auth.error_code.name}: {auth.error_message}")
