"""The metadata image: the cluster state that replaying the metadata log produces.

:class:`MetadataImage` is mutable and replayed in place; each record costs O(1) plus the
size of what it names (a RemoveTopicRecord costs its partitions). Its tables and the indexes
kept in step with them are :class:`~kafka_common.metadata.image_tables.ImageTables`'s.

Replay rules (reference §1.1, §2.4): BrokerRegistrationChangeRecord ``log_dirs`` empty = no
change, ``fenced`` -1/0/1 = unfence/no change/fence; every PartitionChangeRecord bumps the
partition epoch, the leader epoch is bumped only when ``leader`` is set (≠ -2);
``directories`` None = unchanged, an empty list = MIGRATING for every replica, otherwise
aligned with the (new) replicas. A record that would break an invariant raises
:class:`ImageError` and leaves the image unchanged.

Configs: ``configs[(resource type, resource name)]`` holds the dynamic configs set by
ConfigRecords (a null value deletes one); a RemoveTopicRecord drops the topic's configs.
Snapshots carry them (state version 2; version 1, without configs, still loads).

Change tracking: :meth:`MetadataImage.drain_changes` returns what changed since the last
drain (per partition: first old value and latest new value; same for brokers; topics added
and removed) — the broker's replica management consumes it once per applied batch.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from kafka_common.ids import TopicId, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.image_changes import ImageError
from kafka_common.metadata.image_tables import ImageTables
from kafka_common.metadata.model import BrokerRegistration, Endpoint, PartitionRegistration, TopicRegistration
from kafka_common.metadata.registration_merge import (aligned_directories, checked, is_isr_leader_change,
                                                      merge_broker_change, merge_isr_leader,
                                                      merge_partition_change, sorted_dirs, validate)
from kafka_common.metadata.snapshot_state import restore_snapshot_state, snapshot_state

TOPIC_RESOURCE = 2  # ConfigRecord.resource_type of a topic


class MetadataImage(ImageTables):
    """The cluster state, replayed in place from metadata records."""

    # --- snapshots (kafka_common.metadata.snapshot frames these) -------------------

    def snapshot_state(self) -> tuple:
        """The whole image as plain tuples of ints/bytes/str (fast to marshal)."""
        return snapshot_state(self)

    @classmethod
    def from_snapshot_state(cls, state: tuple) -> "MetadataImage":
        """Rebuild an image from :meth:`snapshot_state` (no change tracking: a fresh image)."""
        img = cls()
        restore_snapshot_state(img, state)
        return img

    def replace_with(self, other: "MetadataImage") -> None:
        """Become ``other`` (a snapshot's image) in place — holders of this object see the
        new state — and record what differs as changes, as if replayed record by record."""
        changes = self._changes
        for tid in set(self._partitions) | set(other._partitions):
            old_parts = self._partitions.get(tid, {})
            new_parts = other._partitions.get(tid, {})
            for pid in set(old_parts) | set(new_parts):
                old, new = old_parts.get(pid), new_parts.get(pid)
                if old != new:
                    self._note_partition(old, new, key=(tid, pid))
        for bid in set(self.brokers) | set(other.brokers):
            old_b, new_b = self.brokers.get(bid), other.brokers.get(bid)
            if old_b != new_b:
                self._note_broker(bid, old_b, new_b)
        for tid, topic in other.topics.items():
            if tid not in self.topics:
                changes.created_topics[tid] = topic
        for tid, topic in self.topics.items():
            if tid not in other.topics and changes.created_topics.pop(tid, None) is None:
                changes.removed_topics[tid] = topic
        for name, level in other.features.items():
            if self.features.get(name) != level:
                changes.features[name] = level
        keep = self._changes
        self.__dict__.update({k: v for k, v in other.__dict__.items() if k != "_changes"})
        self._changes = keep

    # --- replay ---------------------------------------------------------------------

    def replay(self, record: Any, offset: int) -> None:
        if offset <= self.last_offset:
            raise ImageError(f"offset {offset} not after last applied offset {self.last_offset}")
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise ImageError(f"cannot replay {type(record).__name__}")
        handler(self, record, offset)
        self.last_offset = offset

    def replay_all(self, items: Iterable[tuple[int, Any]]) -> None:
        """Replay ``(offset, record)`` pairs in order."""
        for offset, record in items:
            self.replay(record, offset)

    # broker records

    def _register(self, rec: r.RegisterBrokerRecord, offset: int) -> None:
        dirs = sorted_dirs(rec.log_dirs)
        if len(dirs) != len(rec.log_dirs):
            raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: duplicate log dirs")
        for d in dirs:
            if is_reserved(d):
                raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: reserved dir {d}")
            owner = self._dir_owner.get(d)
            if owner is not None and owner != rec.broker_id:
                raise ImageError(f"RegisterBrokerRecord broker {rec.broker_id}: dir {d} owned by broker {owner}")
        old = self.brokers.get(rec.broker_id)
        new = BrokerRegistration(
            broker_id=rec.broker_id, epoch=rec.broker_epoch, incarnation_id=rec.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in rec.end_points),
            rack=rec.rack, fenced=rec.fenced, in_controlled_shutdown=rec.in_controlled_shutdown,
            log_dirs=dirs)
        self._set_dirs(rec.broker_id, old.log_dirs if old else (), dirs)
        self.brokers[rec.broker_id] = new
        self.register_offsets[rec.broker_id] = offset
        self._known_dirs[rec.broker_id] = self._known_dirs.get(rec.broker_id, frozenset()) | set(dirs)
        self._note_broker(rec.broker_id, old, new)

    def _unregister(self, rec: r.UnregisterBrokerRecord, offset: int) -> None:
        old = self._broker_at_epoch(rec.broker_id, rec.broker_epoch, "UnregisterBrokerRecord")
        self._set_dirs(rec.broker_id, old.log_dirs, ())
        del self.brokers[rec.broker_id]
        self.register_offsets.pop(rec.broker_id, None)
        self._known_dirs.pop(rec.broker_id, None)
        self._note_broker(rec.broker_id, old, None)

    def _fence(self, rec: r.FenceBrokerRecord, offset: int) -> None:
        self._change_broker(rec.id, rec.epoch, 1, 0, (), "FenceBrokerRecord")

    def _unfence(self, rec: r.UnfenceBrokerRecord, offset: int) -> None:
        self._change_broker(rec.id, rec.epoch, -1, 0, (), "UnfenceBrokerRecord")

    def _registration_change(self, rec: r.BrokerRegistrationChangeRecord, offset: int) -> None:
        self._change_broker(rec.broker_id, rec.broker_epoch, rec.fenced, rec.in_controlled_shutdown,
                            rec.log_dirs, "BrokerRegistrationChangeRecord")

    def _change_broker(self, broker_id: int, epoch: int, fenced: int, in_cs: int,
                       log_dirs: tuple[uuid.UUID, ...], what: str) -> None:
        old = self._broker_at_epoch(broker_id, epoch, what)
        new = merge_broker_change(old, fenced, in_cs, log_dirs, what)
        for d in new.log_dirs:
            owner = self._dir_owner.get(d)
            if owner is not None and owner != broker_id:
                raise ImageError(f"{what} broker {broker_id}: dir {d} owned by broker {owner}")
        if new.log_dirs != old.log_dirs:
            self._known_dirs[broker_id] = self._known_dirs.get(broker_id, frozenset()) | set(new.log_dirs)
            self._set_dirs(broker_id, old.log_dirs, new.log_dirs)
        self.brokers[broker_id] = new
        self._note_broker(broker_id, old, new)

    def _broker_at_epoch(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        reg = self.brokers.get(broker_id)
        if reg is None:
            raise ImageError(f"{what}: broker {broker_id} is not registered")
        if reg.epoch != epoch:
            raise ImageError(f"{what}: broker {broker_id} epoch {epoch} != registered epoch {reg.epoch}")
        return reg

    def _set_dirs(self, broker_id: int, old: tuple[uuid.UUID, ...], new: tuple[uuid.UUID, ...]) -> None:
        for d in old:
            if self._dir_owner.get(d) == broker_id:
                del self._dir_owner[d]
        for d in new:
            self._dir_owner[d] = broker_id

    # topic and partition records

    def _topic(self, rec: r.TopicRecord, offset: int) -> None:
        if rec.topic_id in self.topics:
            raise ImageError(f"TopicRecord: topic id {rec.topic_id} already exists")
        if rec.name in self.topic_ids:
            raise ImageError(f"TopicRecord: topic name {rec.name!r} already exists")
        if is_reserved(rec.topic_id):
            raise ImageError(f"TopicRecord {rec.name!r}: reserved topic id {rec.topic_id}")
        topic = TopicRegistration(name=rec.name, topic_id=TopicId(rec.topic_id))
        self.topics[topic.topic_id] = topic
        self.topic_ids[rec.name] = topic.topic_id
        self._partitions[topic.topic_id] = {}
        self._changes.created_topics[topic.topic_id] = topic

    def _remove_topic(self, rec: r.RemoveTopicRecord, offset: int) -> None:
        topic = self.topics.get(TopicId(rec.topic_id))
        if topic is None:
            raise ImageError(f"RemoveTopicRecord: unknown topic id {rec.topic_id}")
        for part in self._partitions.pop(topic.topic_id).values():
            self._unindex(part)  # per partition, whatever its ISR (reference §3.4)
            self._note_partition(part, None)
        del self.topics[topic.topic_id]
        del self.topic_ids[topic.name]
        self.configs.pop((TOPIC_RESOURCE, topic.name), None)  # a topic's configs go with it
        if self._changes.created_topics.pop(topic.topic_id, None) is None:
            self._changes.removed_topics[topic.topic_id] = topic

    def _partition(self, rec: r.PartitionRecord, offset: int) -> None:
        tid = TopicId(rec.topic_id)
        parts = self._partitions.get(tid)
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
            self._unindex(old)
        parts[rec.partition_id] = new
        self._index(new)
        self._note_partition(old, new, key=(tid, rec.partition_id))

    def _partition_change(self, rec: r.PartitionChangeRecord, offset: int) -> None:
        tid = rec.topic_id  # a TopicId (NewType: the uuid itself)
        pid = rec.partition_id
        parts = self._partitions.get(tid)
        old = None if parts is None else parts.get(pid)
        if old is None:
            raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: unknown partition")
        if is_isr_leader_change(rec, old):
            self._install(parts, old, merge_isr_leader(old, rec))
            return
        new = merge_partition_change(old, rec)
        parts[pid] = new
        if new.replicas == old.replicas and new.directories == old.directories:
            # the common case (ISR/leader moves): only the ISR index can change
            if new.isr != old.isr:
                key = (tid, rec.partition_id)
                for b in old.isr:
                    if b not in new.isr:
                        members = self._by_isr.get(b)
                        if members is not None:
                            members.discard(key)
                            if not members:
                                del self._by_isr[b]
                for b in new.isr:
                    if b not in old.isr:
                        self._by_isr.setdefault(b, set()).add(key)
        else:
            self._unindex(old)
            self._index(new)
        self._note_partition(old, new)

    def replay_merged(self, record: r.PartitionChangeRecord, offset: int, old: PartitionRegistration,
                      new: PartitionRegistration) -> None:
        """:meth:`replay` of a PartitionChangeRecord whose result is known already: ``new``
        = :func:`merge_isr_leader` (``old``, ``record``), computed (and so checked) by
        whoever made the record from this image. Installed as is if the partition's
        registration is still ``old`` itself, else replayed."""
        parts = self._partitions.get(old.topic_id)
        if (offset <= self.last_offset or parts is None or parts.get(old.partition_id) is not old
                or record.partition_id != old.partition_id or record.topic_id != old.topic_id):
            self.replay(record, offset)
            return
        self._install(parts, old, new)
        self.last_offset = offset

    def merges_apply(self, merged: Iterable[tuple[PartitionRegistration, PartitionRegistration]]) -> bool:
        """Whether :meth:`install_merged` of ``merged`` (in order) is exactly the replay of
        their records: each ``old`` is its partition's registration at that point (the
        image's own object, or the ``new`` of an earlier pair), i.e. the merges were made
        from this image, with :func:`merge_isr_leader`'s checks."""
        partitions = self._partitions
        pending: dict[tuple[int, int], PartitionRegistration] = {}
        last_tid = parts = None
        for old, new in merged:
            tid = old.topic_id
            if tid is not last_tid:
                parts = partitions.get(tid)
                if parts is None:
                    return False
                last_tid = tid
            pid = old.partition_id
            if new.partition_id != pid or (new.topic_id is not tid and new.topic_id != tid):
                return False
            k = (id(parts), pid)
            current = pending.get(k)
            if current is None:
                current = parts.get(pid)
            if current is not old:
                return False
            pending[k] = new
        return True

    def install_merged(self, merged: Iterable[tuple[PartitionRegistration, PartitionRegistration]],
                       last_offset: int) -> None:
        """Install the pairs :meth:`merges_apply` approved (the replay of their records,
        the last at ``last_offset``)."""
        partitions = self._partitions
        install = self._install
        last_tid = parts = None
        for old, new in merged:
            tid = old.topic_id
            if tid is not last_tid:
                parts = partitions[tid]
                last_tid = tid
            install(parts, old, new)
        self.last_offset = max(self.last_offset, last_offset)

    def _install(self, parts: dict[int, PartitionRegistration], old: PartitionRegistration,
                 new: PartitionRegistration) -> None:
        tid, pid = new.topic_id, new.partition_id
        parts[pid] = new
        key = (tid, pid)
        old_isr, isr = old.isr, new.isr
        if isr != old_isr:
            by_isr = self._by_isr
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
        changes = self._changes.partitions
        prev = changes.get(key)
        changes[key] = (old if prev is None else prev[0], new)

    def _config(self, rec: r.ConfigRecord, offset: int) -> None:
        key = (rec.resource_type, rec.resource_name)
        if rec.value is None:
            values = self.configs.get(key)
            if values is not None:
                values.pop(rec.name, None)
                if not values:
                    del self.configs[key]
        else:
            self.configs.setdefault(key, {})[rec.name] = rec.value

    def _feature(self, rec: r.FeatureLevelRecord, offset: int) -> None:
        self.features[rec.name] = rec.feature_level
        self._changes.features[rec.name] = rec.feature_level

    def _noop(self, rec: r.NoOpRecord, offset: int) -> None:
        pass



_HANDLERS: dict[type, Any] = {
    r.RegisterBrokerRecord: MetadataImage._register,
    r.UnregisterBrokerRecord: MetadataImage._unregister,
    r.FenceBrokerRecord: MetadataImage._fence,
    r.UnfenceBrokerRecord: MetadataImage._unfence,
    r.BrokerRegistrationChangeRecord: MetadataImage._registration_change,
    r.TopicRecord: MetadataImage._topic,
    r.RemoveTopicRecord: MetadataImage._remove_topic,
    r.PartitionRecord: MetadataImage._partition,
    r.PartitionChangeRecord: MetadataImage._partition_change,
    r.FeatureLevelRecord: MetadataImage._feature,
    r.ConfigRecord: MetadataImage._config,
    r.NoOpRecord: MetadataImage._noop,
}
