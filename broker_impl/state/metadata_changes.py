"""Turn what a metadata batch changed (``MetadataImage.drain_changes()``) into the replica
manager's input: one :class:`PartitionChange` per partition whose old or new registration
names this broker, removals first (so a topic deleted and re-created under the same name in
one batch frees the name before the new incarnation is placed), then by topic and partition.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_impl.state.replica_manager import PartitionChange
from kafka_common.ids import TopicId
from kafka_common.metadata.image_changes import ImageChanges


def partition_changes(changes: ImageChanges, broker_id: int,
                      topic_name: Callable[[TopicId], str | None]) -> list[PartitionChange]:
    """``topic_name`` resolves live topics (e.g. ``lambda t: image.topics[t].name``); names of
    removed topics come from ``changes.removed_topics``."""
    out: list[tuple[int, str, int, PartitionChange]] = []
    for (topic_id, pid), (old, new) in changes.partitions.items():
        mine = (old is not None and broker_id in old.replicas) or (new is not None and broker_id in new.replicas)
        if not mine:
            continue
        removed = changes.removed_topics.get(topic_id)
        name = removed.name if removed is not None else topic_name(topic_id)
        if name is None:
            continue  # created and removed within the batch: nothing to do
        ch = PartitionChange(name, old, new)
        leaving = new is None or broker_id not in new.replicas
        out.append((0 if leaving else 1, name, pid, ch))
    out.sort(key=lambda x: x[:3])
    return [x[3] for x in out]
