"""The metadata image's reverse indexes of its partitions, kept in step with the partition
table by the image (:class:`~kafka_common.metadata.image.MetadataImage` composes one
:class:`ImageIndexes` as ``indexes``). Each costs O(replicas) per partition to maintain:

- ``by_dir[dir_id]``: partitions with a replica assigned to that directory. Reserved ids
  (UNASSIGNED / LOST / MIGRATING) are never indexed. Cleaned per partition on
  RemoveTopicRecord (not per ISR member: Kafka's latent bug, reference §3.4).
- ``by_isr[broker]``: partitions whose ISR holds the broker.
- ``by_replica[broker]``: partitions the broker is a replica of.
- ``count``: how many partitions are indexed (every partition of the image).

A key is ``(topic_id, partition_id)``; an index holds no empty set.
"""

from __future__ import annotations

import uuid

from kafka_common.ids import is_reserved
from kafka_common.metadata.image_changes import PartitionKey
from kafka_common.metadata.model import PartitionRegistration


class ImageIndexes:
    """The reverse indexes of the image's partitions (module docstring)."""

    __slots__ = ("by_dir", "by_isr", "by_replica", "count")

    def __init__(self) -> None:
        self.by_dir: dict[uuid.UUID, set[PartitionKey]] = {}
        self.by_isr: dict[int, set[PartitionKey]] = {}
        self.by_replica: dict[int, set[PartitionKey]] = {}
        self.count = 0

    def add(self, part: PartitionRegistration) -> None:
        key = (part.topic_id, part.partition_id)
        for d in part.directories:
            if not is_reserved(d):
                self.by_dir.setdefault(d, set()).add(key)
        for b in part.isr:
            self.by_isr.setdefault(b, set()).add(key)
        for b in part.replicas:
            self.by_replica.setdefault(b, set()).add(key)
        self.count += 1

    def remove(self, part: PartitionRegistration) -> None:
        key = (part.topic_id, part.partition_id)
        for index, ids in ((self.by_dir, (d for d in part.directories if not is_reserved(d))),
                           (self.by_isr, part.isr), (self.by_replica, part.replicas)):
            for k in ids:
                members = index.get(k)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[k]
        self.count -= 1

    def move_isr(self, key: PartitionKey, old_isr: tuple[int, ...], isr: tuple[int, ...]) -> None:
        """The partition's ISR went from ``old_isr`` to ``isr`` (its replicas and dirs did
        not change): only the ISR index moves."""
        by_isr = self.by_isr
        for b in old_isr:
            if b not in isr:
                members = by_isr.get(b)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del by_isr[b]
        for b in isr:
            if b not in old_isr:
                members = by_isr.get(b)
                if members is None:
                    members = by_isr[b] = set()
                members.add(key)
