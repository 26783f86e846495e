"""The broker's requests to the controller: registration (62), heartbeat (63),
AssignReplicasToDirs (73), and the metadata Fetch (1) of ``__cluster_metadata``.

Builds kio requests from the core's effects and turns responses back into the core's inputs.
One :class:`ControllerConnection` per purpose (lifecycle = registration + heartbeats only;
the metadata long-poll; data = AssignReplicasToDirs, AlterPartition, forwarded
CreateTopics), so a heartbeat waits neither behind a parked long-poll nor behind a request
waiting for the controller's log fsync, and no storage call of the broker sits on these paths; it
reconnects on the next request after a failure and closes itself on a timeout (a stuck
connection must not keep answering late, out of the core's view).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Any

from broker_impl.state.effects import SendAssignments, SendHeartbeat, SendRegistration
from kafka_common import ids, wire
from kafka_common.config import ServerConfig
from kafka_runtime.client import ClientError, KafkaClient

log = logging.getLogger(__name__)
FETCH = 1


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


class ControllerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, sasl: tuple[str, str] | None,
                 max_frame_bytes: int) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.sasl = sasl
        self.max_frame_bytes = max_frame_bytes
        self.client: KafkaClient | None = None
        self._connecting = asyncio.Lock()

    async def get(self, timeout_s: float) -> KafkaClient:
        async with self._connecting:  # concurrent callers share one new connection
            if self.client is None or self.client.closed:
                self.client = await KafkaClient.connect(self.host, self.port, client_id=self.client_id,
                                                        sasl=self.sasl, timeout_s=timeout_s,
                                                        max_frame_bytes=self.max_frame_bytes)
            return self.client

    async def request(self, build, timeout_s: float) -> Any:
        """``build(client) -> request`` (it may pick versions); raises ClientError."""
        client = await self.get(timeout_s)
        try:
            return await client.request(build(client), timeout_s=timeout_s)
        except ClientError:
            await self.close()
            raise

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # closing a broken connection: nothing more to do
                log.debug("close failed", exc_info=True)


def controller_address(cfg: ServerConfig) -> tuple[str, int]:
    if not cfg.controller_quorum_voters:
        raise ValueError("controller.quorum.voters: a broker needs the controller's address")
    v = cfg.controller_quorum_voters[0]
    return v.host, v.port


def controller_sasl(cfg: ServerConfig) -> tuple[str, str] | None:
    name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
    if cfg.security_protocol(name) == "SASL_PLAINTEXT":
        if not cfg.sasl_plain_username:
            raise ValueError(f"sasl.plain.username: required, listener {name} uses SASL_PLAINTEXT")
        return cfg.sasl_plain_username, cfg.sasl_plain_password
    return None


def registration_request(client: KafkaClient, e: SendRegistration, cfg: ServerConfig, cluster_id: str,
                         incarnation_id: uuid.UUID) -> Any:
    version = client.pick_version(62, 2, 3)
    mod = wire.request_module(62, version)
    ctrl = {n.upper() for n in cfg.controller_listener_names}
    listeners = [l for l in (cfg.advertised_listeners or cfg.listeners) if l.name.upper() not in ctrl]
    return wire.make(wire.request_class(62, version), broker_id=cfg.node_id, cluster_id=cluster_id,
                     incarnation_id=incarnation_id,
                     listeners=tuple(mod.Listener(name=l.name, host=l.host or "127.0.0.1", port=l.port,
                                                  security_protocol=2 if cfg.security_protocol(l.name) == "SASL_PLAINTEXT" else 0)
                                     for l in listeners),
                     features=(mod.Feature(name="metadata.version", min_supported_version=1,
                                           max_supported_version=25),),
                     rack=None, is_migrating_zk_broker=False, log_dirs=tuple(e.log_dirs),
                     previous_broker_epoch=-1)


def heartbeat_request(client: KafkaClient, e: SendHeartbeat, broker_id: int) -> Any:
    version = client.pick_version(63, 1, 1)
    return wire.request_class(63, version)(broker_id=broker_id, broker_epoch=e.broker_epoch,
                                           current_metadata_offset=e.current_metadata_offset,
                                           want_fence=e.want_fence, want_shut_down=e.want_shut_down,
                                           offline_log_dirs=tuple(e.offline_log_dirs))


def assignments_request(client: KafkaClient, e: SendAssignments, broker_id: int) -> Any:
    client.pick_version(73, 0, 0)
    mod = wire.request_module(73, 0)
    directories = tuple(
        mod.DirectoryData(id_=dir_id, topics=tuple(
            mod.TopicData(topic_id=t, partitions=tuple(mod.PartitionData(partition_index=p) for p in ps))
            for t, ps in by_topic.items()))
        for dir_id, by_topic in e.by_directory().items())
    return wire.request_class(73, 0)(broker_id=broker_id, broker_epoch=e.broker_epoch, directories=directories)


def assignments_results(resp: Any) -> tuple[int, dict[tuple[uuid.UUID, int], int]]:
    results: dict[tuple[uuid.UUID, int], int] = {}
    for d in resp.directories or ():
        for t in d.topics or ():
            for p in t.partitions or ():
                results[(ids.from_wire(t.topic_id), p.partition_index)] = int(p.error_code.value)
    return int(resp.error_code.value), results


def metadata_fetch_request(client: KafkaClient, next_offset: int, max_wait_ms: int, max_bytes: int = 8 << 20) -> Any:
    v = client.pick_version(FETCH, 12, 16)
    mod = wire.request_module(FETCH, v)
    part = wire.make(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=next_offset,
                     last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
    topic = wire.make(mod.FetchTopic, topic=ids.METADATA_TOPIC, topic_id=ids.METADATA_TOPIC_ID, partitions=(part,))
    return wire.make(wire.request_class(FETCH, v), replica_id=-1, max_wait=ms(max_wait_ms), min_bytes=1,
                     max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                     topics=(topic,), forgotten_topics_data=(), rack_id="")
