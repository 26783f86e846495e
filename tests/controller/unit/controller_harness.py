"""A pure controller driven like the runtime drives it: handle → (encode/decode) → replay.

Every record a handler returns goes through the real frame encoder and decoder before it
is replayed, so each test also proves the records it relies on serialize. Time is a
manual clock (``now``).
"""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace
from typing import Any

from kio.schema.unregister_broker.v0 import request as ub0

from kafka_common import controller_protocol as cp
from kafka_common.ids import uuid_of
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage
from controller_impl.state import ControllerResult, ControllerState

CLUSTER = "jbodlab-cluster-0001"


def dir_id(broker: int, n: int) -> uuid.UUID:
    """Distinct, non-reserved dir ids: d(broker, n)."""
    return uuid_of(0x1000 + broker, 0x100 + n)


class Harness:
    def __init__(self, *, session_timeout_ms: int = 9000, num_partitions: int = 1,
                 default_replication_factor: int = 1) -> None:
        self.image = MetadataImage()
        self.now = 0
        self.config = SimpleNamespace(
            cluster_id=CLUSTER, broker_session_timeout_ms=session_timeout_ms,
            num_partitions=num_partitions, default_replication_factor=default_replication_factor,
            authorizer_enabled=True, super_users=frozenset({"User:broker"}))
        self.state = ControllerState(self.image, self.config, self.now, rng=random.Random(7))
        self.incarnations: dict[int, uuid.UUID] = {}

    # plumbing

    def apply(self, result: ControllerResult) -> ControllerResult:
        for rec in result.records:
            back = r.decode_record(r.encode_record(rec))
            assert back == rec
            self.image.replay(back, self.image.last_offset + 1)
        return result

    def advance(self, ms: int) -> None:
        self.now += ms

    def epoch(self, broker: int) -> int:
        return self.image.brokers[broker].epoch

    # requests

    def register(self, broker: int, dirs: list[uuid.UUID], *, incarnation: uuid.UUID | None = None,
                 cluster_id: str = CLUSTER) -> tuple[ControllerResult, Any]:
        inc = incarnation or self.incarnations.get(broker) or uuid_of(0x2000 + broker, 1)
        self.incarnations[broker] = inc
        req = cp.broker_registration(4, broker_id=broker, cluster_id=cluster_id, incarnation_id=inc,
                                     listeners=[("PLAINTEXT", "127.0.0.1", 9100 + broker, cp.PLAINTEXT)],
                                     log_dirs=dirs)
        res = self.apply(self.state.handle_broker_registration(req, self.now))
        return res, res.response

    def heartbeat(self, broker: int, *, offline: list[uuid.UUID] = (), want_fence: bool = False,
                  want_shut_down: bool = False, epoch: int | None = None,
                  metadata_offset: int | None = None) -> tuple[ControllerResult, Any]:
        req = cp.broker_heartbeat(
            1, broker_id=broker, broker_epoch=self.epoch(broker) if epoch is None else epoch,
            current_metadata_offset=self.image.last_offset if metadata_offset is None else metadata_offset,
            want_fence=want_fence, want_shut_down=want_shut_down, offline_log_dirs=offline)
        res = self.apply(self.state.handle_broker_heartbeat(req, self.now))
        return res, res.response

    def start_broker(self, broker: int, dirs: list[uuid.UUID]) -> None:
        """Register and unfence (caught up, want_fence=false); assigns UNASSIGNED replicas
        to its first dir first if needed (D4)."""
        _, resp = self.register(broker, dirs)
        assert resp.error_code.value == 0, resp
        _, hb = self.heartbeat(broker)
        assert not hb.is_fenced, hb

    def create_topic(self, name: str, partitions: int = -1, rf: int = -1,
                     assignments: list[list[int]] | None = None, validate_only: bool = False):
        req = cp.create_topics(7, name, partitions, rf, validate_only=validate_only,
                               assignments=dict(enumerate(assignments)) if assignments is not None else None)
        res = self.apply(self.state.handle_create_topics(req, self.now))
        return res, res.response.topics[0]

    def assign(self, broker: int, assignments: dict[uuid.UUID, list[tuple[uuid.UUID, int]]], *,
               epoch: int | None = None) -> tuple[ControllerResult, Any]:
        req = cp.assign_replicas_to_dirs(0, broker_id=broker,
                                         broker_epoch=self.epoch(broker) if epoch is None else epoch,
                                         by_directory=cp.group_by_dir(assignments))
        res = self.apply(self.state.handle_assign_replicas_to_dirs(req, self.now))
        return res, res.response

    def alter_partition(self, broker: int, tid: uuid.UUID, pid: int, new_isr: list[int], *,
                        leader_epoch: int | None = None, partition_epoch: int | None = None,
                        isr_epochs: dict[int, int] | None = None, epoch: int | None = None):
        part = self.image.partition(tid, pid)
        req = cp.alter_partition(
            3, broker_id=broker, broker_epoch=self.epoch(broker) if epoch is None else epoch, topic_id=tid,
            partition=pid, leader_epoch=part.leader_epoch if leader_epoch is None else leader_epoch,
            partition_epoch=part.partition_epoch if partition_epoch is None else partition_epoch,
            new_isr=new_isr, isr_broker_epochs=isr_epochs)
        res = self.apply(self.state.handle_alter_partition(req, self.now))
        return res, res.response

    def unregister(self, broker: int):
        res = self.apply(self.state.handle_unregister_broker(ub0.UnregisterBrokerRequest(broker_id=broker), self.now))
        return res, res.response

    def tick(self) -> ControllerResult:
        return self.apply(self.state.tick(self.now))

    # views

    def part(self, tid: uuid.UUID, pid: int = 0):
        return self.image.partition(tid, pid)

    def topic_id(self, name: str) -> uuid.UUID:
        return self.image.topic_ids[name]


def kinds(result: ControllerResult) -> list[str]:
    return [type(rec).__name__ for rec in result.records]


def code(value: Any) -> int:
    return value.error_code.value
