"""One client connection of a Kafka-protocol listener (:mod:`kafka_runtime.server`).

Per frame, in this order — so that nothing is decoded that the connection may not send:

1. framing (``kafka_common.framing``): a negative size or one over the limit closes the
   connection; the limit is ``socket.request.max.bytes``, and before SASL authentication on
   a listener that requires it ``sasl.server.max.receive.size`` (Kafka's rule);
2. the fixed header prefix (api key, version, correlation id) only. Before SASL
   authentication only APIs whose rule says ``before_auth`` (ApiVersions, SaslHandshake,
   SaslAuthenticate) go further; anything else closes the connection, as Kafka does;
3. refusal from the header alone: an API the listener does not serve, or a version outside
   its range, gets the API's standard UNSUPPORTED_VERSION reply (the connection stays
   usable) when the protocol defines that response (kio has its schema, or
   ``kafka_common.legacy_schemas`` for the old versions kio lacks), else the connection is
   closed (an unknown api key, a version newer than any schema). An unsupported ApiVersions version gets the
   v0 fallback reply (an unknown ApiVersions version gets a v0 answer);
4. decoding through ``wire.decode_request`` — the guard bounds every length by the bytes
   left before kio allocates, and cuts unknown tagged fields out; bytes that do not decode
   close the connection;
5. authorization (``kafka_common.authz``): the API's rule; a refused request is answered
   with CLUSTER_AUTHORIZATION_FAILED and never reaches the handler;
6. the handler (requests of one connection strictly in order — librdkafka pipelines — and
   at most ~1 MiB of them queued before reading pauses), answered in that order; a handler
   whose work is under way but whose answer must wait (Produce acks=all waiting for
   replication) returns a :class:`DeferredResponse`: the connection goes on with its next
   request meanwhile (at most ``MAX_DEFERRED`` outstanding) and the responses still leave
   in request order. A handler exception (also one raised by a deferred answer) is
   answered with UNKNOWN_SERVER_ERROR; nothing here lets an exception out of the loop.

SASL PLAIN (SaslHandshake 17 v1 + SaslAuthenticate 36 v0–v2) when the listener maps to
SASL_PLAINTEXT and ``authorizer.enabled=true``; a failed login answers
SASL_AUTHENTICATION_FAILED (58) and closes. A SASL_PLAINTEXT listener with the authorizer
disabled offers SASL without requiring it. ``ctx.principal`` is ``User:<name>``;
``ctx.cluster_action_allowed`` tells handlers whether the principal holds CLUSTER_ACTION.

"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import TYPE_CHECKING, Any

from kafka_common import authz, framing, wire
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.errors import KafkaRuntimeError
from kafka_runtime.request_context import DeferredResponse, RequestContext
from kafka_runtime.request_metrics import RequestTiming

if TYPE_CHECKING:
    from kafka_runtime.connection_host import ConnectionHost

API_VERSIONS_RANGE = (0, 4)
_QUEUE_PAUSE = 64  # frames queued on one connection before reading pauses ...
_QUEUE_PAUSE_BYTES = 1 << 20  # ... or bytes
_REASON_CHARS = 300  # a logged reason is cut here (a peer chooses what goes into it)
MAX_DEFERRED = 64  # deferred responses outstanding on one connection before it stops handling requests


class _Close(KafkaRuntimeError):
    """Close this connection (reason in the message)."""


class Connection(asyncio.Protocol):
    """One client connection of a :class:`~kafka_runtime.connection_host.ConnectionHost`
    (``server``)."""

    def __init__(self, server: ConnectionHost) -> None:
        self.server = server
        self.decoder = framing.FrameDecoder(server.max_frame_bytes)
        self.queue: asyncio.Queue[tuple[bytes, int] | None] = asyncio.Queue()  # (frame, arrival ns)
        self.queued_bytes = 0
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task | None = None
        self.reading_paused = False
        self.closed = False
        self.ctx: RequestContext | None = None
        self.ip = "?"
        self.peer = "?"
        self.registered = False
        self.in_request = False
        self.last_active = time.monotonic()
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        self._handshake_done = False
        # responses not sent yet, in request order: (future of the response or the response,
        # api key, version, correlation id, timing); used while a deferred response is outstanding
        self._outbox: collections.deque = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._sender: asyncio.Task | None = None

    @property
    def busy(self) -> bool:
        return self.in_request or not self.queue.empty() or bool(self._outbox)

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else "?"
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        refusal = server.admit(self.ip)
        if refusal is not None:
            server.stats["refused_connections"] += 1
            server.bad_log.report("connection_refused", peer=self.peer, reason=refusal)
            self.closed = True
            transport.abort()
            return
        self.registered = True
        self.ctx = RequestContext(connection_id=server.register(self), peer=self.peer,
                                  listener_name=server.listener_name, security=server.security)
        if server.security.sasl_required:
            self.decoder = framing.FrameDecoder(min(server.limits.pre_auth_max_frame_bytes,
                                                    server.max_frame_bytes))
        self.task = asyncio.get_running_loop().create_task(self._worker())

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except framing.FrameTooLarge as exc:
            self._bad(f"frame size {exc.size} outside 0..{exc.limit}")
            return
        arrived = time.perf_counter_ns()
        for frame in frames:
            self.queued_bytes += len(frame)
            self.queue.put_nowait((frame, arrived))
        if (self.queue.qsize() >= _QUEUE_PAUSE or self.queued_bytes >= _QUEUE_PAUSE_BYTES) \
                and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._write_ok.set()
        self._outbox_ready.set()
        if self.registered:
            self.registered = False
            self.server.unregister(self)
        self.queue.put_nowait(None)

    def pause_writing(self) -> None:
        self._write_ok.clear()

    def resume_writing(self) -> None:
        self._write_ok.set()

    # -- helpers ----------------------------------------------------------------------
    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if self.task is not None:
            self.task.cancel()
        self._drop_outbox()

    def _drop_outbox(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        while self._outbox:
            fut = self._outbox.popleft()[0]
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.cancel()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            try:
                self.transport.close()
            except RuntimeError:   # the loop is closed already (a worker finalized late): nothing to close
                pass

    def _bad(self, reason: str) -> None:
        server = self.server
        server.stats["closed_bad"] += 1
        if len(reason) > _REASON_CHARS:
            reason = reason[:_REASON_CHARS] + "…"
        server.bad_log.report("bad_request", peer=self.peer, reason=reason)
        self.close()

    async def _send(self, payload: bytes) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(framing.encode_frame(payload))
        self.last_active = time.monotonic()
        await self._write_ok.wait()

    async def _worker(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item is None or self.closed:
                    return
                frame, arrived = item
                self.queued_bytes -= len(frame)
                if self.reading_paused and self.transport and self.queue.qsize() < _QUEUE_PAUSE // 2 \
                        and self.queued_bytes < _QUEUE_PAUSE_BYTES // 2:
                    self.reading_paused = False
                    self.transport.resume_reading()
                self.in_request = True
                try:
                    await self._process(frame, arrived)
                except _Close as exc:
                    self._bad(str(exc))
                    return
                finally:
                    self.in_request = False
                    self.last_active = time.monotonic()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug here must not take the process down
            self._bad(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            if self.closed:
                self._drop_outbox()

    def _start_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_outbox())

    async def _send_outbox(self) -> None:
        """Send the queued responses in request order, each once it is ready; the answers
        ready at the same moment leave in one write (one send syscall, not one each)."""
        server = self.server
        metrics = server.request_metrics
        while self._outbox and not self.closed:
            fut, api_key, version, correlation_id, timing = self._outbox[0]
            response = fut
            if isinstance(fut, asyncio.Future):
                try:
                    response = fut.result() if fut.done() else await asyncio.shield(fut)
                except asyncio.CancelledError:
                    if not fut.cancelled():
                        raise  # the sender itself was cancelled (connection closing)
                    response = None
                except Exception as exc:
                    server.stats["handler_errors"] += 1
                    server.bad_log.report("handler_error", peer=self.peer, api_key=api_key, version=version,
                                          error=f"{type(exc).__name__}: {exc}"[:_REASON_CHARS])
                    response = wire.error_response(api_key, version, ErrorCode.unknown_server_error,
                                                   f"{type(exc).__name__}")
            self._outbox.popleft()
            payloads = [wire.encode_response(response, correlation_id)] if response is not None else []
            timings = [timing]
            while self._outbox:   # the next answers already there: into the same write
                nxt, api_key, version, correlation_id, timing = self._outbox[0]
                if isinstance(nxt, asyncio.Future):
                    if not nxt.done() or nxt.cancelled() or nxt.exception() is not None:
                        break     # not ready, or its error is handled (and logged) above
                    nxt = nxt.result()
                self._outbox.popleft()
                timings.append(timing)
                if nxt is not None:
                    payloads.append(wire.encode_response(nxt, correlation_id))
            self._outbox_ready.set()
            sent = time.perf_counter_ns()
            for timing in timings:
                metrics.record(timing, sent)
            if payloads:
                await self._send_many(payloads)

    async def _send_many(self, payloads: list[bytes]) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(b"".join(framing.encode_frame(p) for p in payloads))
        self.last_active = time.monotonic()
        await self._write_ok.wait()

    async def _drain_outbox(self) -> None:
        """Wait until every queued response is sent (before a raw write)."""
        while self._outbox and not self.closed:
            self._outbox_ready.clear()
            await self._outbox_ready.wait()

    async def _reply(self, response: Any, api_key: int, version: int, correlation_id: int,
                     timing: RequestTiming) -> None:
        """Send now, or queue behind the deferred responses still outstanding."""
        timing.handled_ns = time.perf_counter_ns()
        if isinstance(response, DeferredResponse):
            while len(self._outbox) >= MAX_DEFERRED and not self.closed:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
            fut = asyncio.ensure_future(response.awaitable)
            fut.add_done_callback(lambda _f: setattr(timing, "ready_ns", time.perf_counter_ns()))
            self._outbox.append((fut, api_key, version, correlation_id, timing))
            self._start_sender()
        elif self._outbox:
            self._outbox.append((response, api_key, version, correlation_id, timing))
            self._start_sender()
        elif response is not None:
            payload = wire.encode_response(response, correlation_id)
            self.server.request_metrics.record(timing, time.perf_counter_ns())
            await self._send(payload)
        else:  # acks=0: no answer
            self.server.request_metrics.record(timing, timing.handled_ns)

    async def _process(self, frame: bytes, arrived_ns: int) -> None:
        server = self.server
        ctx = self.ctx
        assert ctx is not None
        server.stats["requests"] += 1
        try:
            api_key, version, correlation_id = wire.peek_header(frame)
        except wire.DecodeError as exc:
            raise _Close(str(exc)) from None
        timing = RequestTiming(api_key, arrived_ns, time.perf_counter_ns())
        rule = server.api_rules().get(api_key, authz.DEFAULT_RULE)
        if server.security.sasl_required and not ctx.authenticated and not rule.before_auth:
            raise _Close(f"api_key={api_key} v{version} before SASL authentication")
        table = server.api_table()
        if api_key == ApiKey.API_VERSIONS and not (API_VERSIONS_RANGE[0] <= version <= API_VERSIONS_RANGE[1]
                                            and wire.schema_exists(api_key, version)):
            await self._drain_outbox()
            await self._send(wire.api_versions_fallback(correlation_id, table))
            return
        supported = table.get(api_key)
        if supported is None or not supported[0] <= version <= supported[1]:
            await self._refuse_unsupported(api_key, version, correlation_id)
            return
        request_cls = getattr(server.handler, "request_classes", {}).get((api_key, version))
        try:
            header, request = wire.decode_request(frame, request_cls=request_cls)
        except wire.UnknownApi as exc:
            raise _Close(f"unsupported request: {exc}") from None
        except wire.DecodeError as exc:
            raise _Close(f"undecodable request api_key={api_key} v{version}: {exc} "
                         f"(first bytes {frame[:32].hex()})") from None
        ctx.api_key, ctx.api_version = api_key, version
        ctx.correlation_id, ctx.client_id = correlation_id, header.client_id
        if not ctx.security.allows(rule.permission, ctx.principal):
            server.stats["denied"] += 1
            server.bad_log.report("request_denied", peer=ctx.peer, principal=ctx.principal,
                                  api_key=api_key, permission=rule.permission)
            response = authz.denied_response(rule, api_key, request, version,
                                             f"{ctx.principal} lacks {rule.permission} on CLUSTER")
        elif api_key == ApiKey.API_VERSIONS:
            response = wire.api_versions_response(version, table)
        elif api_key == ApiKey.SASL_HANDSHAKE and ctx.authenticated:
            response = wire.response_class(ApiKey.SASL_HANDSHAKE, version)(
                error_code=ErrorCode.illegal_sasl_state, mechanisms=("PLAIN",))
        elif api_key == ApiKey.SASL_HANDSHAKE:
            response = self._handshake(request, version)
        elif api_key == ApiKey.SASL_AUTHENTICATE:
            response = self._authenticate(request, version)
            if response.error_code != ErrorCode.none:
                await self._drain_outbox()
                await self._send(wire.encode_response(response, correlation_id))
                raise _Close(f"SASL authentication failed: {response.error_message}")
        else:
            try:
                response = await server.handler.handle(ctx, header, request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                server.stats["handler_errors"] += 1
                server.bad_log.report("handler_error", peer=ctx.peer, api_key=api_key, version=version,
                                      error=f"{type(exc).__name__}: {exc}"[:_REASON_CHARS])
                if not wire.schema_exists(api_key, version):
                    raise _Close(f"handler error on api_key={api_key} v{version}, no error "
                                 f"response defined") from None
                response = wire.error_response(api_key, version, ErrorCode.unknown_server_error,
                                               f"{type(exc).__name__}")
        await self._reply(response, api_key, version, correlation_id, timing)

    async def _refuse_unsupported(self, api_key: int, version: int, correlation_id: int) -> None:
        """From the header alone: the standard UNSUPPORTED_VERSION reply where the protocol
        defines the response (the connection stays usable), else close."""
        if not wire.schema_exists(api_key, version):
            raise _Close(f"unsupported request: no schema for api_key={api_key} version={version}")
        await self._drain_outbox()
        await self._send(wire.encode_response(
            wire.error_response(api_key, version, ErrorCode.unsupported_version), correlation_id))

    def _handshake(self, request: Any, version: int) -> Any:
        cls = wire.response_class(ApiKey.SASL_HANDSHAKE, version)
        if request.mechanism != "PLAIN":
            return cls(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=("PLAIN",))
        self._handshake_done = True
        return cls(error_code=ErrorCode.none, mechanisms=("PLAIN",))

    def _authenticate(self, request: Any, version: int) -> Any:
        cls = wire.response_class(ApiKey.SASL_AUTHENTICATE, version)
        ctx = self.ctx
        assert ctx is not None

        def reply(code: ErrorCode, message: str | None) -> Any:
            return wire.make(cls, error_code=code, error_message=message, auth_bytes=b"",
                             session_lifetime=__import__("datetime").timedelta(0))
        if not self._handshake_done or ctx.authenticated:
            return reply(ErrorCode.illegal_sasl_state, "SaslAuthenticate without a PLAIN handshake")
        parts = bytes(request.auth_bytes).split(b"\x00")
        if len(parts) != 3:
            return reply(ErrorCode.sasl_authentication_failed, "malformed PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return reply(ErrorCode.sasl_authentication_failed, "PLAIN token is not UTF-8")
        expected = ctx.security.users.get(user)
        if expected is None or expected != password or (authzid and authzid != user):
            return reply(ErrorCode.sasl_authentication_failed,
                         "Authentication failed: Invalid username or password")
        ctx.authenticated = True
        ctx.principal = f"User:{user}"
        self.decoder.limit = self.server.max_frame_bytes  # authenticated: the listener's limit
        return reply(ErrorCode.none, None)
