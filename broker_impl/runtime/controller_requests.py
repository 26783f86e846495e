"""The broker's requests to the controller, as the core and the data plane need them.

:class:`ControllerLinks` holds the three connections (``lifecycle``: registration and
heartbeats only; ``metadata``: the long-poll; ``data``: AssignReplicasToDirs,
AlterPartition and forwarded CreateTopics), so a heartbeat never queues behind a parked
long-poll or a request waiting for the controller's log fsync.

:class:`ControllerRequests` turns the core's controller effects into requests and their
answers (or failures) back into the core's inputs; it also serves the data plane's
AlterPartition and CreateTopics forwarding. Request builders live in
:mod:`.controller_channel`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

from broker_impl.runtime.controller_channel import (ControllerConnection, alter_partition_request,
                                                    alter_partition_result, assignments_request, assignments_results,
                                                    controller_locator, controller_sasl, heartbeat_request,
                                                    registration_request)
from broker_impl.runtime.host import Host
from broker_impl.state import effects as fx
from kafka_common.config import ServerConfig
from kafka_common.metadata.model import PartitionRegistration
from kafka_runtime.client import ClientError

log = logging.getLogger(__name__)


class ControllerLinks:
    def __init__(self, cfg: ServerConfig) -> None:
        locator = controller_locator(cfg)
        sasl = controller_sasl(cfg)

        def connection(suffix: str) -> ControllerConnection:
            return ControllerConnection(locator, client_id=f"broker-{cfg.node_id}{suffix}", sasl=sasl,
                                        max_frame_bytes=cfg.socket_request_max_bytes)
        self.lifecycle = connection("")
        self.metadata = connection("-metadata")
        self.data = connection("-data")

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in (self.lifecycle, self.metadata, self.data)),
                             return_exceptions=True)


class ControllerRequests:
    def __init__(self, host: Host, links: ControllerLinks, cluster_id: str, incarnation_id: uuid.UUID) -> None:
        self.host = host
        self.links = links
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id

    @property
    def _lifecycle_timeout_s(self) -> float:
        return max(0.1, self.host.cfg.broker_session_timeout_ms / 2000)

    def execute(self, e: Any) -> None:
        """A controller effect of the core: sent in a task of its own."""
        if isinstance(e, fx.SendRegistration):
            self.host.spawn(self._registration(e))
        elif isinstance(e, fx.SendHeartbeat):
            self.host.spawn(self._heartbeat(e))
        elif isinstance(e, fx.SendAssignments):
            self.host.spawn(self._assignments(e))
        else:
            raise TypeError(f"not a controller effect: {e!r}")

    async def _registration(self, e: fx.SendRegistration) -> None:
        host, core = self.host, self.host.core
        try:
            resp = await self.links.lifecycle.request(
                lambda c: registration_request(c, e, host.cfg, self.cluster_id, self.incarnation_id),
                self._lifecycle_timeout_s)
        except (ClientError, OSError) as exc:
            log.warning("registration failed: %s", exc)
            host.feed(core.on_controller_request_failed(host.now_ms()))
            return
        code = int(resp.error_code.value)
        if code:
            host.events.emit("registration_rejected", error=resp.error_code.name)
        host.feed(core.on_registration_response(code, resp.broker_epoch, host.now_ms()))

    async def _heartbeat(self, e: fx.SendHeartbeat) -> None:
        host, core = self.host, self.host.core
        try:
            cordoned = host.core.log_dirs.cordoned
            resp = await self.links.lifecycle.request(lambda c: heartbeat_request(c, e, host.cfg.node_id, cordoned),
                                                      self._lifecycle_timeout_s)
        except (ClientError, OSError) as exc:
            log.warning("heartbeat failed: %s", exc)
            host.feed(core.on_controller_request_failed(host.now_ms()))
            return
        host.feed(core.on_heartbeat_response(int(resp.error_code.value), host.now_ms(),
                                             is_caught_up=resp.is_caught_up, is_fenced=resp.is_fenced,
                                             should_shut_down=resp.should_shut_down))

    async def _assignments(self, e: fx.SendAssignments) -> None:
        host, core = self.host, self.host.core
        try:
            resp = await self.links.data.request(lambda c: assignments_request(c, e, host.cfg.node_id), 30.0)
        except (ClientError, OSError) as exc:
            log.warning("AssignReplicasToDirs failed: %s", exc)
            host.feed(core.on_assignments_response(-1, {}, host.now_ms()))
            return
        code, results = assignments_results(resp)
        host.feed(core.on_assignments_response(code, results, host.now_ms()))

    # ------------------------------------------------------------------ for the data plane
    async def create_topics(self, request: Any) -> Any:
        """``ControllerChannel`` of the CreateTopics, AlterConfigs and IncrementalAlterConfigs
        handlers: the request is sent to the active controller as it is."""
        try:
            return await self.links.data.request(lambda c: request, 30.0)
        except ClientError as exc:
            raise ConnectionError(f"controller: {exc}") from None

    alter_configs = create_topics
    forward = create_topics       # DeleteTopics, CreatePartitions, ElectLeaders, Alter/ListPartitionReassignments

    async def alter_partition(self, topic_id: uuid.UUID, partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: tuple[int, ...]) -> tuple[int, PartitionRegistration | None]:
        """(error code, the registration the controller committed); code -1 when no answer."""
        host = self.host
        image = host.image

        def epoch_of(broker: int) -> int:
            reg = image.brokers.get(broker)
            return reg.epoch if reg is not None else -1

        broker_epoch = host.core.lifecycle.broker_epoch
        try:
            resp = await self.links.data.request(
                lambda c: alter_partition_request(c, topic_id, partition, leader_epoch, partition_epoch, new_isr,
                                                  host.cfg.node_id, broker_epoch, epoch_of), 10.0)
            code, answer = alter_partition_result(resp, topic_id, partition)
        except (ClientError, OSError, KeyError) as exc:
            log.warning("AlterPartition %s-%s failed: %s", topic_id, partition, exc)
            return -1, None
        reg = image.partition(topic_id, partition)
        if code != 0 or answer is None or reg is None:
            return code, None
        return code, dataclasses.replace(reg, isr=tuple(answer.isr), leader_epoch=answer.leader_epoch,
                                         partition_epoch=answer.partition_epoch)
