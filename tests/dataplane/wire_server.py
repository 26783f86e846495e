"""A minimal asyncio Kafka listener for the data-plane tests.

Interim: stands in for ``kafka_runtime.server`` (A2) until it lands, with the same handler
contract (``supported_apis`` + ``async handle(ctx, header, request)``). Real sockets, real
framing, kio decoding/encoding through ``kafka_common.wire``; ApiVersions answered from the
handler's table (v0–v3; other versions get the v0 fallback body with UNSUPPORTED_VERSION);
any other unsupported API/version or undecodable frame closes the connection.
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_common import wire

API_VERSIONS = 18
API_VERSIONS_RANGE = (0, 3)
log = logging.getLogger(__name__)


def _api_versions_response(version: int, apis: dict[int, tuple[int, int]], error: ErrorCode) -> Any:
    module = wire.response_module(API_VERSIONS, version)
    keys = tuple(module.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(apis.items()))
    cls = wire.response_class(API_VERSIONS, version)
    kwargs: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if version >= 1:
        kwargs["throttle_time"] = timedelta(0)
    return cls(**kwargs)


class WireServer:
    def __init__(self, handler: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []
        # schemas kio lacks (Produce v0-2), supplied by the handler
        self._request_classes: dict[tuple[int, int], type] = dict(getattr(handler, "request_classes", {}))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        for task in list(self._conns):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                try:
                    size_bytes = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                (size,) = struct.unpack(">i", size_bytes)
                if size < 0 or size > 104_857_600:
                    return
                frame = await reader.readexactly(size)
                reply = await self._dispatch(frame)
                if reply is None:
                    continue
                if reply is False:
                    return
                writer.write(struct.pack(">i", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:  # stop(): end quietly (asyncio logs cancelled client tasks)
            return
        except Exception as exc:  # a handler bug: record it for the test, close the connection
            log.exception("connection failed")
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self._conns.discard(task)
            writer.close()

    async def _dispatch(self, frame: bytes) -> bytes | None | bool:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        apis = dict(self.handler.supported_apis)
        apis[API_VERSIONS] = API_VERSIONS_RANGE
        if api_key == API_VERSIONS:
            if not API_VERSIONS_RANGE[0] <= version <= API_VERSIONS_RANGE[1]:
                body = _api_versions_response(0, apis, ErrorCode.unsupported_version)
                return self._encode(correlation_id, body)
            req_cls = wire.request_class(API_VERSIONS, version)
            _header, _n = wire.decode(req_cls.__header_schema__, frame)
            return self._encode(correlation_id, _api_versions_response(version, apis, ErrorCode.none))
        span = apis.get(api_key)
        if span is None or not span[0] <= version <= span[1]:
            self.errors.append(f"unsupported api {api_key} v{version}")
            return False
        req_cls = self._request_classes.get((api_key, version)) or wire.request_class(api_key, version)
        header, n = wire.decode(req_cls.__header_schema__, frame)
        request, m = wire.decode(req_cls, frame, n)
        if n + m != len(frame):
            self.errors.append(f"trailing bytes in api {api_key} v{version}")
            return False
        response = await self.handler.handle(None, header, request)
        if response is None:
            return None
        return self._encode(correlation_id, response)

    @staticmethod
    def _encode(correlation_id: int, body: Any) -> bytes:
        buf = io.BytesIO()
        header_cls = type(body).__header_schema__
        wire.encode_into(buf, header_cls(correlation_id=correlation_id))
        wire.encode_into(buf, body)
        return buf.getvalue()
