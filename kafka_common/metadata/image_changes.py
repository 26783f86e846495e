"""What replaying metadata records changed, and the error a record that cannot be applied raises."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_common.errors import KafkaCommonError
from kafka_common.ids import TopicId
from kafka_common.metadata.model import BrokerRegistration, PartitionRegistration, TopicRegistration

PartitionKey = tuple[TopicId, int]


class ImageError(KafkaCommonError, ValueError):
    """A record that cannot be applied to the image (broken invariant, unknown entity)."""


@dataclass
class ImageChanges:
    """What a run of records changed. ``None`` as old = created, as new = deleted."""

    partitions: dict[PartitionKey, tuple[PartitionRegistration | None, PartitionRegistration | None]] = field(default_factory=dict)
    brokers: dict[int, tuple[BrokerRegistration | None, BrokerRegistration | None]] = field(default_factory=dict)
    created_topics: dict[TopicId, TopicRegistration] = field(default_factory=dict)
    removed_topics: dict[TopicId, TopicRegistration] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.partitions or self.brokers or self.created_topics or self.removed_topics
                    or self.features)

    def note_partition(self, old: PartitionRegistration | None, new: PartitionRegistration | None,
                       key: PartitionKey | None = None) -> None:
        """A partition went from ``old`` to ``new``: kept as (first old, latest new)."""
        if key is None:
            ref = old if old is not None else new
            assert ref is not None
            key = (ref.topic_id, ref.partition_id)
        prev = self.partitions.get(key)
        first_old = prev[0] if prev else old
        if first_old is None and new is None:
            del self.partitions[key]  # created and deleted within one drain
        else:
            self.partitions[key] = (first_old, new)

    def note_broker(self, broker_id: int, old: BrokerRegistration | None, new: BrokerRegistration | None) -> None:
        prev = self.brokers.get(broker_id)
        self.brokers[broker_id] = (prev[0] if prev else old, new)
