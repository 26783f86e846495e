"""The metadata image's tables and the indexes kept in step with them.

:class:`ImageTables` holds the state; :class:`~kafka_common.metadata.image.MetadataImage`
adds replay. Indexes (each O(replicas) per partition to maintain):

- ``partitions_in_dir(dir_id)``: partitions with a replica assigned to that directory.
  Reserved ids (UNASSIGNED / LOST / MIGRATING) are never indexed. Cleaned per partition
  on RemoveTopicRecord (not per ISR member: Kafka's latent bug, reference §3.4).
- ``partitions_with_isr_member(broker)``: partitions whose ISR holds the broker.
- ``partitions_of_broker(broker)``: partitions the broker is a replica of.
- ``register_offsets[broker]``: offset of the broker's latest RegisterBrokerRecord
  (the "caught up" rule for unfencing).
- ``dir_owner(dir_id)``: the registered broker whose online dirs include ``dir_id``.
- ``known_dirs(broker)`` / ``offline_dirs(broker)``: every dir the broker ever registered
  (until unregistered) / those of them not online now (a resent OfflineLogDirs is known).

The sets returned by the index accessors are live views: do not mutate them, and copy
them before replaying more records while iterating.
"""

from __future__ import annotations

import uuid
from typing import Iterable

from kafka_common.ids import TopicId, is_reserved
from kafka_common.metadata.image_changes import ImageChanges, PartitionKey
from kafka_common.metadata.model import BrokerRegistration, PartitionRegistration, TopicRegistration

_EMPTY: frozenset = frozenset()


class ImageTables:
    def __init__(self) -> None:
        self.last_offset: int = -1
        self.brokers: dict[int, BrokerRegistration] = {}
        self.register_offsets: dict[int, int] = {}
        self.topics: dict[TopicId, TopicRegistration] = {}
        self.topic_ids: dict[str, TopicId] = {}
        self.features: dict[str, int] = {}
        # dynamic configs: (resource type, resource name) -> {name: value} (ConfigRecord)
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self._partitions: dict[TopicId, dict[int, PartitionRegistration]] = {}
        self._by_dir: dict[uuid.UUID, set[PartitionKey]] = {}
        self._by_isr: dict[int, set[PartitionKey]] = {}
        self._by_replica: dict[int, set[PartitionKey]] = {}
        self._dir_owner: dict[uuid.UUID, int] = {}
        self._known_dirs: dict[int, frozenset[uuid.UUID]] = {}
        self._changes = ImageChanges()
        self._partition_count = 0

    # --- reads ----------------------------------------------------------------------

    def partition(self, topic_id: TopicId, partition_id: int) -> PartitionRegistration | None:
        parts = self._partitions.get(topic_id)
        return None if parts is None else parts.get(partition_id)

    def partitions_of(self, topic_id: TopicId) -> dict[int, PartitionRegistration]:
        return self._partitions.get(topic_id, {})

    def partitions_in_dir(self, dir_id: uuid.UUID) -> set[PartitionKey] | frozenset:
        return self._by_dir.get(dir_id, _EMPTY)

    def partitions_with_isr_member(self, broker_id: int) -> set[PartitionKey] | frozenset:
        return self._by_isr.get(broker_id, _EMPTY)

    def partitions_of_broker(self, broker_id: int) -> set[PartitionKey] | frozenset:
        return self._by_replica.get(broker_id, _EMPTY)

    def dir_owner(self, dir_id: uuid.UUID) -> int | None:
        return self._dir_owner.get(dir_id)

    def known_dirs(self, broker_id: int) -> frozenset[uuid.UUID]:
        """Every dir the broker has registered (any incarnation) since it was last
        unregistered: its online dirs plus those that went offline."""
        return self._known_dirs.get(broker_id, frozenset())

    def offline_dirs(self, broker_id: int) -> frozenset[uuid.UUID]:
        """Known dirs of the broker that are not among its online dirs now (and that no
        other broker owns now)."""
        reg = self.brokers.get(broker_id)
        online = set(reg.log_dirs) if reg else set()
        return frozenset(d for d in self.known_dirs(broker_id)
                         if d not in online and self._dir_owner.get(d) in (None, broker_id))

    def partition_count(self) -> int:
        return self._partition_count

    def all_partitions(self) -> Iterable[PartitionRegistration]:
        for parts in self._partitions.values():
            yield from parts.values()

    def drain_changes(self) -> ImageChanges:
        changes, self._changes = self._changes, ImageChanges()
        return changes

    def _note_broker(self, broker_id: int, old: BrokerRegistration | None,
                     new: BrokerRegistration | None) -> None:
        prev = self._changes.brokers.get(broker_id)
        self._changes.brokers[broker_id] = (prev[0] if prev else old, new)

    # index maintenance: O(replicas) per partition

    def _index(self, part: PartitionRegistration) -> None:
        key = (part.topic_id, part.partition_id)
        for d in part.directories:
            if not is_reserved(d):
                self._by_dir.setdefault(d, set()).add(key)
        for b in part.isr:
            self._by_isr.setdefault(b, set()).add(key)
        for b in part.replicas:
            self._by_replica.setdefault(b, set()).add(key)
        self._partition_count += 1

    def _unindex(self, part: PartitionRegistration) -> None:
        key = (part.topic_id, part.partition_id)
        for index, ids in ((self._by_dir, (d for d in part.directories if not is_reserved(d))),
                           (self._by_isr, part.isr), (self._by_replica, part.replicas)):
            for k in ids:
                members = index.get(k)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[k]
        self._partition_count -= 1

    def _note_partition(self, old: PartitionRegistration | None, new: PartitionRegistration | None,
                        key: PartitionKey | None = None) -> None:
        if key is None:
            ref = old if old is not None else new
            assert ref is not None
            key = (ref.topic_id, ref.partition_id)
        prev = self._changes.partitions.get(key)
        first_old = prev[0] if prev else old
        if first_old is None and new is None:
            del self._changes.partitions[key]  # created and deleted within one drain
        else:
            self._changes.partitions[key] = (first_old, new)
