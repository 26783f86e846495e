"""Connections from one voter to the others: one :class:`PeerConnection` per peer and
purpose (the server answers a connection's requests in order, so Vote/Begin/EndQuorumEpoch
and Fetch/FetchSnapshot each get their own), reconnected on demand."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_common.config import ServerConfig
from kafka_runtime.client import ClientError, KafkaClient


def raft_sasl(cfg: ServerConfig) -> tuple[str, str] | None:
    name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
    if cfg.security_protocol(name) == "SASL_PLAINTEXT" and cfg.sasl_plain_username:
        return cfg.sasl_plain_username, cfg.sasl_plain_password
    return None


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, sasl, max_frame_bytes: int) -> None:
        self.host, self.port, self.client_id, self.sasl = host, port, client_id, sasl
        self.max_frame_bytes = max_frame_bytes
        self.client: KafkaClient | None = None
        self._lock = asyncio.Lock()

    async def request(self, request: Any, timeout_s: float) -> Any:
        async with self._lock:
            if self.client is None or self.client.closed:
                self.client = await KafkaClient.connect(self.host, self.port, client_id=self.client_id,
                                                        sasl=self.sasl, timeout_s=timeout_s,
                                                        max_frame_bytes=self.max_frame_bytes)
            client = self.client
        try:
            return await client.request(request, timeout_s=timeout_s)
        except ClientError:
            await self.close()
            raise

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await client.close()
            except Exception:
                pass
