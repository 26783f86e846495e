"""Helpers for the pure broker-core unit tests (values, not fakes of I/O)."""

from __future__ import annotations

import random
import uuid

from broker_impl.state.effects import EmitEvent, TopicPartition
from kafka_common.ids import uuid_of
from kafka_common.metadata.model import PartitionRegistration

D1 = uuid_of(0x1111, 0x1)
D2 = uuid_of(0x2222, 0x2)
D3 = uuid_of(0x3333, 0x3)
T1 = uuid_of(0xAAAA, 0x1)
T2 = uuid_of(0xBBBB, 0x2)
ME = 1


def reg(topic_id=T1, pid=0, replicas=(ME, 2, 3), dirs=None, leader=ME, leader_epoch=0, partition_epoch=0,
        isr=None, dir_for_me=None):
    if dirs is None:
        dirs = tuple(dir_for_me if r == ME and dir_for_me is not None else uuid_of(0x9999, r) for r in replicas)
    return PartitionRegistration(topic_id=topic_id, partition_id=pid, replicas=tuple(replicas),
                                 isr=tuple(isr if isr is not None else replicas), leader=leader,
                                 leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                                 directories=tuple(dirs))


def tp(topic="t", p=0):
    return TopicPartition(topic, p)


def of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def events(effects, name=None):
    return [e for e in effects if isinstance(e, EmitEvent) and (name is None or e.event == name)]


def no_events(effects):
    return [e for e in effects if not isinstance(e, EmitEvent)]


class FixedRng:
    """rng.random() returning a fixed value (0.5 → no jitter)."""

    def __init__(self, value: float = 0.5) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def seeded(seed: int = 7) -> random.Random:
    return random.Random(seed)


def new_dir() -> uuid.UUID:
    return uuid.uuid4()
