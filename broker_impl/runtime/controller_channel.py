"""The broker's requests to the controller: registration (62), heartbeat (63),
AssignReplicasToDirs (73), and the metadata Fetch (1) of ``__cluster_metadata``.

The broker takes the same ``controller.quorum.voters`` line as the controllers and finds
the active one itself (:class:`ControllerLocator`): a dead connection or NOT_CONTROLLER (41)
moves its requests on to the next voter, a metadata Fetch answered NOT_LEADER_OR_FOLLOWER
moves to the leader that controller names.

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
import logging
import time
import uuid
from typing import Any

from broker_impl.state.effects import SendAssignments, SendHeartbeat, SendRegistration
from kafka_common import controller_protocol as cp
from kafka_common.config import ServerConfig
from kafka_common.wire import ApiKey, ErrorCode
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.snapshot_fetch import fetch_snapshot_request, parse_fetch_snapshot_response

MIN_CONNECT_ATTEMPT_S = 0.5   # one connection attempt's least share of a request's time (several voters)

log = logging.getLogger(__name__)


class ControllerLocator:
    """Which controller is active, as far as this broker knows: one per broker, shared by
    its connections. A connection failure or NOT_CONTROLLER moves on to the next voter; a
    leader named by a controller (Fetch's ``current_leader``) is taken at its word."""

    def __init__(self, voters: list[tuple[int, str, int]]) -> None:
        if not voters:
            raise ValueError("controller.quorum.voters: a broker needs the controllers' addresses")
        self.voters = list(voters)
        self._index = 0
        self.changes = 0

    def current(self) -> tuple[int, str, int]:
        return self.voters[self._index]

    def failed(self, node_id: int) -> None:
        if self.voters[self._index][0] == node_id and len(self.voters) > 1:
            self._index = (self._index + 1) % len(self.voters)
            self.changes += 1

    def leader_is(self, node_id: int) -> bool:
        for i, v in enumerate(self.voters):
            if v[0] == node_id:
                if i != self._index:
                    self._index = i
                    self.changes += 1
                return True
        return False


def not_controller(resp: Any) -> bool:
    """A controller that is not the active one refused the request."""
    code = getattr(resp, "error_code", None)
    if code is not None:
        return code == ErrorCode.not_controller
    # CreateTopics / AlterConfigs: per-topic or per-resource errors only
    topics = getattr(resp, "topics", None) or getattr(resp, "responses", None) or ()
    return bool(topics) and all(getattr(t, "error_code", None) == ErrorCode.not_controller for t in topics)


def metadata_leader_hint(resp: Any) -> int | None:
    """Fetch of the metadata log from a controller that is not the leader: the leader it
    names (-1 if it knows none), else None."""
    try:
        part = resp.responses[0].partitions[0]
    except (AttributeError, IndexError):
        return None
    if part.error_code != ErrorCode.not_leader_or_follower:
        return None
    leader = getattr(part, "current_leader", None)
    return int(leader.leader_id) if leader is not None else -1


class ControllerConnection:
    """Requests to the active controller. With several voters, a request that meets a
    dead connection or NOT_CONTROLLER is retried on the next controller until its timeout
    (so a report in flight when the active controller dies reaches the next one); with
    one voter it fails at once, as before."""

    def __init__(self, locator: ControllerLocator, *, client_id: str, sasl: tuple[str, str] | None,
                 max_frame_bytes: int) -> None:
        self.locator = locator
        self.client_id = client_id
        self.sasl = sasl
        self.max_frame_bytes = max_frame_bytes
        self.client: KafkaClient | None = None
        self._node: int | None = None
        self._connecting = asyncio.Lock()

    @property
    def host(self) -> str:
        return self.locator.current()[1]

    @property
    def port(self) -> int:
        return self.locator.current()[2]

    async def get(self, timeout_s: float) -> tuple[int, KafkaClient]:
        async with self._connecting:  # concurrent callers share one new connection
            node, host, port = self.locator.current()
            if self.client is not None and (self.client.closed or self._node != node):
                await self.close()
            if self.client is None:
                self.client = await KafkaClient.connect(host, port, client_id=self.client_id,
                                                        sasl=self.sasl, timeout_s=self.attempt_s(timeout_s),
                                                        max_frame_bytes=self.max_frame_bytes)
                self._node = node
            return node, self.client

    def attempt_s(self, remaining_s: float) -> float:
        """How long one connection attempt may take out of a request's remaining time. With
        other voters to try, a share of it (at least :data:`MIN_CONNECT_ATTEMPT_S`): a voter
        that answers nothing (cut off by a partition, or a dead container whose name docker's
        DNS leaves unanswered for glibc's 5 s) must not take the whole timeout and leave the
        next voter — the new active one — no time at all."""
        voters = len(self.locator.voters)
        if voters <= 1:
            return remaining_s
        return min(remaining_s, max(MIN_CONNECT_ATTEMPT_S, remaining_s / voters))

    async def request(self, build, timeout_s: float) -> Any:
        """``build(client) -> request`` (it may pick versions); raises ClientError."""
        deadline = time.monotonic() + timeout_s
        retry = len(self.locator.voters) > 1
        pause = 0.02
        while True:
            remaining = max(0.05, deadline - time.monotonic())
            node = self.locator.current()[0]
            try:
                node, client = await self.get(remaining)
                resp = await client.request(build(client), timeout_s=remaining)
            except ClientError:
                await self.close()
                self.locator.failed(node)
                if not retry or time.monotonic() + pause >= deadline:
                    raise
            else:
                hint = metadata_leader_hint(resp)
                if not not_controller(resp) and hint is None:
                    return resp
                if hint is None or hint < 0 or hint == node or not self.locator.leader_is(hint):
                    self.locator.failed(node)
                if not retry or time.monotonic() + pause >= deadline:
                    raise ClientError(f"controller {node} is not the active controller")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                await client.close()
            except Exception:  # closing a broken connection: nothing more to do
                log.debug("close failed", exc_info=True)


async def fetch_metadata_snapshot(channel: ControllerConnection, snapshot_id: tuple[int, int],
                                  timeout_s: float = 30.0) -> bytes:
    """FetchSnapshot (59) of the snapshot a metadata Fetch pointed to, whole."""
    chunks: list[bytes] = []
    position = 0
    while True:
        resp = await channel.request(
            lambda c: fetch_snapshot_request(None, -1, -1, snapshot_id, position, 4 << 20), timeout_s)
        error, size, pos, _, data = parse_fetch_snapshot_response(resp)
        if error.value or pos != position:
            raise ClientError(f"FetchSnapshot {snapshot_id}: {error.name}")
        chunks.append(data)
        position += len(data)
        if position >= size or not data:
            return b"".join(chunks)


def controller_locator(cfg: ServerConfig) -> ControllerLocator:
    return ControllerLocator([(v.node_id, v.host, v.port) for v in cfg.controller_quorum_voters])


def controller_sasl(cfg: ServerConfig) -> tuple[str, str] | None:
    name = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
    if cfg.security_protocol(name) == "SASL_PLAINTEXT":
        if not cfg.sasl_plain_username:
            raise ValueError(f"sasl.plain.username: required, listener {name} uses SASL_PLAINTEXT")
        return cfg.sasl_plain_username, cfg.sasl_plain_password
    return None


def registration_request(client: KafkaClient, e: SendRegistration, cfg: ServerConfig, cluster_id: str,
                         incarnation_id: uuid.UUID) -> Any:
    ctrl = {n.upper() for n in cfg.controller_listener_names}
    listeners = [l for l in (cfg.advertised_listeners or cfg.listeners) if l.name.upper() not in ctrl]
    return cp.broker_registration(
        client.pick_version(ApiKey.BROKER_REGISTRATION, *cp.REGISTRATION), broker_id=cfg.node_id,
        cluster_id=cluster_id, incarnation_id=incarnation_id, log_dirs=e.log_dirs,
        listeners=[(l.name, l.host or "127.0.0.1", l.port,
                    cp.SASL_PLAINTEXT if cfg.security_protocol(l.name) == "SASL_PLAINTEXT" else cp.PLAINTEXT)
                   for l in listeners])


def heartbeat_request(client: KafkaClient, e: SendHeartbeat, broker_id: int, cordoned: Any = ()) -> Any:
    return cp.broker_heartbeat(client.pick_version(ApiKey.BROKER_HEARTBEAT, *cp.HEARTBEAT), broker_id=broker_id,
                               broker_epoch=e.broker_epoch, current_metadata_offset=e.current_metadata_offset,
                               want_fence=e.want_fence, want_shut_down=e.want_shut_down,
                               offline_log_dirs=e.offline_log_dirs, cordoned_log_dirs=sorted(cordoned, key=str))


def assignments_request(client: KafkaClient, e: SendAssignments, broker_id: int) -> Any:
    return cp.assign_replicas_to_dirs(client.pick_version(ApiKey.ASSIGN_REPLICAS_TO_DIRS, *cp.ASSIGN),
                                      broker_id=broker_id, broker_epoch=e.broker_epoch,
                                      by_directory=e.by_directory())


def assignments_results(resp: Any) -> tuple[int, dict[tuple[uuid.UUID, int], int]]:
    """The answer as the core takes it: plain int error codes."""
    top, per_partition = cp.assignment_errors(resp)
    return int(top.value), {key: int(code.value) for key, code in per_partition.items()}


def metadata_fetch_request(client: KafkaClient, next_offset: int, max_wait_ms: int, max_bytes: int = 8 << 20) -> Any:
    return cp.metadata_fetch(client.pick_version(ApiKey.FETCH, *cp.METADATA_FETCH), fetch_offset=next_offset,
                             max_wait_ms=max_wait_ms, max_bytes=max_bytes)


def alter_partition_request(client: KafkaClient, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                            partition_epoch: int, new_isr: tuple[int, ...], broker_id: int, broker_epoch: int,
                            epoch_of: Any) -> Any:
    """AlterPartition (v2, or v3 with each ISR member's broker epoch from ``epoch_of(id)``)."""
    return cp.alter_partition(client.pick_version(ApiKey.ALTER_PARTITION, *cp.ALTER_PARTITION),
                              broker_id=broker_id, broker_epoch=broker_epoch, topic_id=topic_id,
                              partition=partition, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                              new_isr=new_isr, isr_broker_epochs={b: epoch_of(b) for b in new_isr})


def alter_partition_result(resp: Any, topic_id: uuid.UUID, partition: int) -> tuple[int, Any]:
    """(error code, the partition's answer or None): the top-level code, else the partition's."""
    code, answer = cp.alter_partition_error(resp, topic_id, partition)
    return int(code.value), answer
