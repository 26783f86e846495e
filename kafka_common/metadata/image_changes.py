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

