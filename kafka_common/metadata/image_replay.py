"""The metadata image's record rules: what each metadata record does to the image's tables.

One function per record type (:data:`RECORD_RULES`), ``rule(image, record, offset)``; they
write the tables of a :class:`ReplayTarget` — the image itself: these functions are part of
:class:`~kafka_common.metadata.image.MetadataImage`'s implementation, which dispatches
:meth:`~kafka_common.metadata.image.MetadataImage.replay` here. :func:`install` puts a merged
partition registration in place (the ISR index and the change tracking follow); the image's
merged installs use it too. The rules themselves are in :mod:`kafka_common.metadata.image`'s
docstring; the merges and their invariant checks are :mod:`.registration_merge`'s.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Protocol

from kafka_common.ids import TopicId, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.image_changes import ImageChanges, ImageError
from kafka_common.metadata.image_indexes import ImageIndexes
from kafka_common.metadata.model import BrokerRegistration, Endpoint, PartitionRegistration, TopicRegistration
from kafka_common.metadata.registration_merge import (aligned_directories, checked, is_isr_leader_change,
                                                      merge_broker_change, merge_isr_leader,
                                                      merge_partition_change, sorted_dirs, validate)

TOPIC_RESOURCE = 2  # ConfigRecord.resource_type of a topic


class ReplayTarget(Protocol):
    """The image's tables as its record rules write them (the image's own attributes)."""

    brokers: dict[int, BrokerRegistration]
    register_offsets: dict[int, int]
    topics: dict[TopicId, TopicRegistration]
    topic_ids: dict[str, TopicId]
    features: dict[str, int]
    configs: dict[tuple[int, str], dict[str, str]]
    _partitions: dict[TopicId, dict[int, PartitionRegistration]]
    _dir_owner: dict[uuid.UUID, int]
    _known_dirs: dict[int, frozenset[uuid.UUID]]
    indexes: ImageIndexes
    _changes: ImageChanges


# ---------------------------------------------------------------------- broker records
def register_broker(img: ReplayTarget, rec: r.RegisterBrokerRecord, offset: int) -> None:
    dirs = sorted_dirs(rec.log_dirs)
    if len(dirs) != len(rec.log_dirs):
        raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: duplicate log dirs")
    for d in dirs:
        if is_reserved(d):
            raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: reserved dir {d}")
        owner = img._dir_owner.get(d)
        if owner is not None and owner != rec.broker_id:
            raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: dir {d} owned by broker {owner}")
    old = img.brokers.get(rec.broker_id)
    new = BrokerRegistration(
        broker_id=rec.broker_id, epoch=rec.broker_epoch, incarnation_id=rec.incarnation_id,
        endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points),
        rack=rec.rack, fenced=rec.fenced, in_controlled_shutdown=rec.in_controlled_shutdown,
        log_dirs=dirs)
    _set_dirs(img, rec.broker_id, old.log_dirs if old else (), dirs)
    img.brokers[rec.broker_id] = new
    img.register_offsets[rec.broker_id] = offset
    img._known_dirs[rec.broker_id] = img._known_dirs.get(rec.broker_id, frozenset()) | set(dirs)
    img._changes.note_broker(rec.broker_id, old, new)


def unregister_broker(img: ReplayTarget, rec: r.UnregisterBrokerRecord, offset: int) -> None:
    old = _broker_at_epoch(img, rec.broker_id, rec.broker_epoch, "UnregisterBrokerRecord")
    _set_dirs(img, rec.broker_id, old.log_dirs, ())
    del img.brokers[rec.broker_id]
    img.register_offsets.pop(rec.broker_id, None)
    img._known_dirs.pop(rec.broker_id, None)
    img._changes.note_broker(rec.broker_id, old, None)


def fence_broker(img: ReplayTarget, rec: r.FenceBrokerRecord, offset: int) -> None:
    _change_broker(img, rec.id, rec.epoch, 1, 0, (), "FenceBrokerRecord")


def unfence_broker(img: ReplayTarget, rec: r.UnfenceBrokerRecord, offset: int) -> None:
    _change_broker(img, rec.id, rec.epoch, -1, 0, (), "UnfenceBrokerRecord")


def change_registration(img: ReplayTarget, rec: r.BrokerRegistrationChangeRecord, offset: int) -> None:
    _change_broker(img, rec.broker_id, rec.broker_epoch, rec.fenced, rec.in_controlled_shutdown,
                        rec.log_dirs, "BrokerRegistrationChangeRecord")


def _change_broker(img: ReplayTarget, broker_id: int, epoch: int, fenced: int, in_cs: int,
                   log_dirs: tuple[uuid.UUID, ...], what: str) -> None:
    old = _broker_at_epoch(img, broker_id, epoch, what)
    new = merge_broker_change(old, fenced, in_cs, log_dirs, what)
    for d in new.log_dirs:
        owner = img._dir_owner.get(d)
        if owner is not None and owner != broker_id:
            raise ImageError(f"{what} broker {broker_id}: dir {d} owned by broker {owner}")
    if new.log_dirs != old.log_dirs:
        img._known_dirs[broker_id] = img._known_dirs.get(broker_id, frozenset()) | set(new.log_dirs)
        _set_dirs(img, broker_id, old.log_dirs, new.log_dirs)
    img.brokers[broker_id] = new
    img._changes.note_broker(broker_id, old, new)


def _broker_at_epoch(img: ReplayTarget, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
    reg = img.brokers.get(broker_id)
    if reg is None:
        raise ImageError(f"{what}: broker {broker_id} is not registered")
    if reg.epoch != epoch:
        raise ImageError(f"{what}: broker {broker_id} epoch {epoch} != registered epoch {reg.epoch}")
    return reg


def _set_dirs(img: ReplayTarget, broker_id: int, old: tuple[uuid.UUID, ...], new: tuple[uuid.UUID, ...]) -> None:
    for d in old:
        if img._dir_owner.get(d) == broker_id:
            del img._dir_owner[d]
    for d in new:
        img._dir_owner[d] = broker_id

# ---------------------------------------------------------------------- topic and partition records
def add_topic(img: ReplayTarget, rec: r.TopicRecord, offset: int) -> None:
    if rec.topic_id in img.topics:
        raise ImageError(f"TopicRecord: topic id {rec.topic_id} already exists")
    if rec.name in img.topic_ids:
        raise ImageError(f"TopicRecord: topic name {rec.name!r} already exists")
    if is_reserved(rec.topic_id):
        raise ImageError(f"TopicRecord {rec.name!r}: reserved topic id {rec.topic_id}")
    topic = TopicRegistration(name=rec.name, topic_id=TopicId(rec.topic_id))
    img.topics[topic.topic_id] = topic
    img.topic_ids[rec.name] = topic.topic_id
    img._partitions[topic.topic_id] = {}
    img._changes.created_topics[topic.topic_id] = topic


def remove_topic(img: ReplayTarget, rec: r.RemoveTopicRecord, offset: int) -> None:
    topic = img.topics.get(TopicId(rec.topic_id))
    if topic is None:
        raise ImageError(f"RemoveTopicRecord: unknown topic id {rec.topic_id}")
    for part in img._partitions.pop(topic.topic_id).values():
        img.indexes.remove(part)  # per partition, whatever its ISR (reference §3.4)
        img._changes.note_partition(part, None)
    del img.topics[topic.topic_id]
    del img.topic_ids[topic.name]
    img.configs.pop((TOPIC_RESOURCE, topic.name), None)  # a topic's configs go with it
    if img._changes.created_topics.pop(topic.topic_id, None) is None:
        img._changes.removed_topics[topic.topic_id] = topic


def add_partition(img: ReplayTarget, rec: r.PartitionRecord, offset: int) -> None:
    tid = TopicId(rec.topic_id)
    parts = img._partitions.get(tid)
    if parts is None:
        raise ImageError(f"PartitionRecord {rec.topic_id}:{rec.partition_id}: unknown topic")
    if rec.partition_id < 0:
        raise ImageError(f"PartitionRecord {rec.topic_id}: invalid partition id {rec.partition_id}")
    dirs = aligned_directories(rec.directories, rec.replicas, f"PartitionRecord {rec.topic_id}:{rec.partition_id}")
    new = checked(PartitionRegistration, f"PartitionRecord {rec.topic_id}:{rec.partition_id}",
                   topic_id=tid, partition_id=rec.partition_id, replicas=tuple(rec.replicas),
                   isr=tuple(rec.isr), leader=rec.leader, leader_epoch=rec.leader_epoch,
                   partition_epoch=rec.partition_epoch, directories=dirs,
                   removing_replicas=tuple(rec.removing_replicas),
                   adding_replicas=tuple(rec.adding_replicas),
                   leader_recovery_state=rec.leader_recovery_state)
    validate(new)
    old = parts.get(rec.partition_id)
    if old is not None:
        img.indexes.remove(old)
    parts[rec.partition_id] = new
    img.indexes.add(new)
    img._changes.note_partition(old, new, key=(tid, rec.partition_id))


def change_partition(img: ReplayTarget, rec: r.PartitionChangeRecord, offset: int) -> None:
    tid = rec.topic_id  # a TopicId (NewType: the uuid itself)
    pid = rec.partition_id
    parts = img._partitions.get(tid)
    old = None if parts is None else parts.get(pid)
    if old is None:
        raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: unknown partition")
    if is_isr_leader_change(rec, old):
        install(img, parts, old, merge_isr_leader(old, rec))
        return
    new = merge_partition_change(old, rec)
    parts[pid] = new
    if new.replicas == old.replicas and new.directories == old.directories:
        # the common case (ISR/leader moves): only the ISR index can change
        if new.isr != old.isr:
            img.indexes.move_isr((tid, pid), old.isr, new.isr)
    else:
        img.indexes.remove(old)
        img.indexes.add(new)
    img._changes.note_partition(old, new)


def set_config(img: ReplayTarget, rec: r.ConfigRecord, offset: int) -> None:
    key = (rec.resource_type, rec.resource_name)
    if rec.value is None:
        values = img.configs.get(key)
        if values is not None:
            values.pop(rec.name, None)
            if not values:
                del img.configs[key]
    else:
        img.configs.setdefault(key, {})[rec.name] = rec.value


def set_feature(img: ReplayTarget, rec: r.FeatureLevelRecord, offset: int) -> None:
    img.features[rec.name] = rec.feature_level
    img._changes.features[rec.name] = rec.feature_level


def noop(img: ReplayTarget, rec: r.NoOpRecord, offset: int) -> None:
    pass


def install(img: ReplayTarget, parts: dict[int, PartitionRegistration], old: PartitionRegistration,
            new: PartitionRegistration) -> None:
    """``new`` replaces ``old`` in its topic's ``parts``: an ISR/leader change (the replicas and
    dirs are the same), so only the ISR index moves."""
    tid, pid = new.topic_id, new.partition_id
    parts[pid] = new
    key = (tid, pid)
    old_isr, isr = old.isr, new.isr
    if isr != old_isr:
        img.indexes.move_isr(key, old_isr, isr)
    changes = img._changes.partitions
    prev = changes.get(key)
    changes[key] = (old if prev is None else prev[0], new)


RECORD_RULES: dict[type, Callable[[Any, Any, int], None]] = {
    r.RegisterBrokerRecord: register_broker,
    r.UnregisterBrokerRecord: unregister_broker,
    r.FenceBrokerRecord: fence_broker,
    r.UnfenceBrokerRecord: unfence_broker,
    r.BrokerRegistrationChangeRecord: change_registration,
    r.TopicRecord: add_topic,
    r.RemoveTopicRecord: remove_topic,
    r.PartitionRecord: add_partition,
    r.PartitionChangeRecord: change_partition,
    r.FeatureLevelRecord: set_feature,
    r.ConfigRecord: set_config,
    r.NoOpRecord: noop,
}
