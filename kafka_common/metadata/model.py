"""Registrations held in the metadata image: what a broker and a partition look like.

These are the values the controller's state machine and the broker's replica management
read. They are immutable; replaying a record produces new values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kafka_common.ids import LOST, MIGRATING, UNASSIGNED, TopicId

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # listener name, e.g. "PLAINTEXT"
    host: str
    port: int
    security_protocol: int = 0  # 0 PLAINTEXT, 2 SASL_PLAINTEXT (Kafka's ids)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    # Online dirs, sorted. Never empty for a registration made by this project (D2).
    log_dirs: tuple[uuid.UUID, ...]

    def has_online_dir(self, dir_id: uuid.UUID) -> bool:
        """UNASSIGNED and MIGRATING are online, LOST is not, else: is it in log_dirs."""
        if dir_id == UNASSIGNED or dir_id == MIGRATING:
            return True
        if dir_id == LOST:
            return False
        return dir_id in self.log_dirs

    def endpoint(self, name: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.name == name), None)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    topic_id: TopicId
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # Aligned with ``replicas``: directories[i] is the dir of replicas[i].
    directories: tuple[uuid.UUID, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0

    def __post_init__(self) -> None:
        if len(self.directories) != len(self.replicas):
            raise ValueError(
                f"partition {self.topic_id}:{self.partition_id}: directories {len(self.directories)} "
                f"not aligned with replicas {len(self.replicas)}")

    def directory(self, broker_id: int) -> uuid.UUID:
        try:
            return self.directories[self.replicas.index(broker_id)]
        except ValueError:
            raise KeyError(f"broker {broker_id} is not a replica of {self.topic_id}:{self.partition_id}") from None


@dataclass(frozen=True, slots=True)
class TopicRegistration:
    name: str
    topic_id: TopicId
