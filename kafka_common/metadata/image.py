"""The metadata image: the cluster state that replaying the metadata log produces.

:class:`MetadataImage` is mutable and replayed in place; each record costs O(1) plus the
size of what it names (a RemoveTopicRecord costs its partitions). Indexes kept in step:

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

The sets returned by the index accessors are live views: do not mutate them, and copy
them before replaying more records while iterating.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from kafka_common.ids import MIGRATING, TopicId, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.model import (BrokerRegistration, Endpoint, NO_LEADER,
                                         PartitionRegistration, TopicRegistration)

PartitionKey = tuple[TopicId, int]
TOPIC_RESOURCE = 2  # ConfigRecord.resource_type of a topic
_EMPTY: frozenset = frozenset()


class ImageError(ValueError):
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


class MetadataImage:
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

    # --- snapshots (kafka_common.metadata.snapshot frames these) -------------------

    def snapshot_state(self) -> tuple:
        """The whole image as plain tuples of ints/bytes/str (fast to marshal). Directory
        and topic ids are interned in a table so a partition carries small indexes."""
        ids_table: dict[uuid.UUID, int] = {}

        def ref(u: uuid.UUID) -> int:
            i = ids_table.get(u)
            if i is None:
                i = ids_table[u] = len(ids_table)
            return i

        brokers = tuple((b.broker_id, b.epoch, ref(b.incarnation_id),
                         tuple((e.name, e.host, e.port, e.security_protocol) for e in b.endpoints),
                         b.rack, b.fenced, b.in_controlled_shutdown, tuple(ref(d) for d in b.log_dirs),
                         self.register_offsets.get(b.broker_id, -1),
                         tuple(ref(d) for d in sorted(self._known_dirs.get(b.broker_id, ()), key=lambda u: u.int)))
                        for b in self.brokers.values())
        refs: dict[tuple, tuple] = {}

        def dir_refs(dirs: tuple) -> tuple:
            out = refs.get(dirs)
            if out is None:
                out = refs[dirs] = tuple(ref(d) for d in dirs)
            return out

        topics = tuple((t.name, ref(t.topic_id),
                        tuple((p.partition_id, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch,
                               dir_refs(p.directories), p.removing_replicas, p.adding_replicas,
                               p.leader_recovery_state)
                              for p in self._partitions[t.topic_id].values()))
                       for t in self.topics.values())
        table = tuple(u.bytes for u in ids_table)
        configs = tuple((rtype, rname, tuple(sorted(values.items())))
                        for (rtype, rname), values in sorted(self.configs.items()))
        return (2, self.last_offset, table, brokers, topics, tuple(self.features.items()), configs)

    @classmethod
    def from_snapshot_state(cls, state: tuple) -> "MetadataImage":
        """Rebuild an image from :meth:`snapshot_state` (no change tracking: a fresh image)."""
        version = state[0]
        if version == 1:  # written before configs were stored
            (_v, last_offset, table, brokers, topics, features), configs = state, ()
        elif version == 2:
            _v, last_offset, table, brokers, topics, features, configs = state
        else:
            raise ImageError(f"snapshot state version {version} is not 1 or 2")
        uuids = [uuid.UUID(bytes=b) for b in table]
        img = cls()
        img.last_offset = last_offset
        img.features = dict(features)
        img.configs = {(rtype, rname): dict(values) for rtype, rname, values in configs}
        for (bid, epoch, inc, eps, rack, fenced, in_cs, dirs, reg_off, known) in brokers:
            log_dirs = tuple(uuids[d] for d in dirs)
            img.brokers[bid] = BrokerRegistration(broker_id=bid, epoch=epoch, incarnation_id=uuids[inc],
                                                  endpoints=tuple(Endpoint(*e) for e in eps), rack=rack,
                                                  fenced=fenced, in_controlled_shutdown=in_cs, log_dirs=log_dirs)
            if reg_off >= 0:
                img.register_offsets[bid] = reg_off
            img._known_dirs[bid] = frozenset(uuids[d] for d in known)
            for d in log_dirs:
                img._dir_owner[d] = bid
        reserved = [is_reserved(u) for u in uuids]
        by_dir, by_isr, by_replica = img._by_dir, img._by_isr, img._by_replica
        count = 0
        new_part = PartitionRegistration
        dir_tuples: dict[tuple, tuple] = {}
        dir_sets: dict[tuple, list] = {}
        for name, tref, parts in topics:
            tid = TopicId(uuids[tref])
            img.topics[tid] = TopicRegistration(name=name, topic_id=tid)
            img.topic_ids[name] = tid
            table_parts: dict[int, PartitionRegistration] = {}
            img._partitions[tid] = table_parts
            for (pid, replicas, isr, leader, le, pe, drefs, removing, adding, lrs) in parts:
                dirs = dir_tuples.get(drefs)
                if dirs is None:
                    dirs = dir_tuples[drefs] = tuple(uuids[d] for d in drefs)
                    dir_sets[drefs] = [by_dir.setdefault(uuids[d], set()) for d in drefs if not reserved[d]]
                table_parts[pid] = new_part(tid, pid, replicas, isr, leader, le, pe, dirs, removing, adding, lrs)
                key = (tid, pid)
                for members in dir_sets[drefs]:
                    members.add(key)
                for b in isr:
                    members = by_isr.get(b)
                    if members is None:
                        members = by_isr[b] = set()
                    members.add(key)
                for b in replicas:
                    members = by_replica.get(b)
                    if members is None:
                        members = by_replica[b] = set()
                    members.add(key)
                count += 1
        img._partition_count = count
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

    def _note_broker(self, broker_id: int, old: BrokerRegistration | None,
                     new: BrokerRegistration | None) -> None:
        prev = self._changes.brokers.get(broker_id)
        self._changes.brokers[broker_id] = (prev[0] if prev else old, new)

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
        dirs = _directories(rec.directories, rec.replicas, f"PartitionRecord {rec.topic_id}:{rec.partition_id}")
        new = _checked(PartitionRegistration, f"PartitionRecord {rec.topic_id}:{rec.partition_id}",
                       topic_id=tid, partition_id=rec.partition_id, replicas=tuple(rec.replicas),
                       isr=tuple(rec.isr), leader=rec.leader, leader_epoch=rec.leader_epoch,
                       partition_epoch=rec.partition_epoch, directories=dirs,
                       removing_replicas=tuple(rec.removing_replicas),
                       adding_replicas=tuple(rec.adding_replicas),
                       leader_recovery_state=rec.leader_recovery_state)
        _validate(new)
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


def merge_partition_change(old: PartitionRegistration, rec: r.PartitionChangeRecord) -> PartitionRegistration:
    """The registration ``rec`` turns ``old`` into (Kafka's ``PartitionRegistration.merge``);
    raises :class:`ImageError` if the result breaks an invariant."""
    replicas = old.replicas if rec.replicas is None else tuple(rec.replicas)
    if rec.directories is not None:
        dirs = _directories(rec.directories, replicas, f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}")
    elif replicas != old.replicas:
        # Keep each retained replica's dir; added replicas: MIGRATING (KAFKA-16583).
        by_broker = dict(zip(old.replicas, old.directories))
        dirs = tuple(by_broker.get(b, MIGRATING) for b in replicas)
    else:
        dirs = old.directories
    leader, leader_epoch = old.leader, old.leader_epoch
    if rec.leader != r.NO_LEADER_CHANGE:
        leader, leader_epoch = rec.leader, old.leader_epoch + 1
    try:
        new = PartitionRegistration(
            old.topic_id, old.partition_id, replicas, old.isr if rec.isr is None else tuple(rec.isr),
            leader, leader_epoch, old.partition_epoch + 1, dirs,
            old.removing_replicas if rec.removing_replicas is None else tuple(rec.removing_replicas),
            old.adding_replicas if rec.adding_replicas is None else tuple(rec.adding_replicas),
            old.leader_recovery_state if rec.leader_recovery_state == r.NO_LRS_CHANGE
            else rec.leader_recovery_state)
    except ValueError as exc:
        raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: {exc}") from None
    if replicas is old.replicas and not new.adding_replicas and not new.removing_replicas:
        # the common case (ISR/leader moves over the same replicas): the ISR rules only
        isr = new.isr
        if (len(isr) > 1 and len(set(isr)) != len(isr)) or any(b not in replicas for b in isr) \
                or (leader != NO_LEADER and leader not in isr):
            _validate(new)
    else:
        _validate(new)
    return new


def is_isr_leader_change(rec: r.PartitionChangeRecord, old: PartitionRegistration) -> bool:
    """Whether ``rec`` on ``old`` moves only the ISR and/or the leader (no replica,
    directory or recovery-state change, no reassignment in progress):
    :func:`merge_isr_leader`'s case."""
    return (rec.replicas is None and rec.directories is None and rec.removing_replicas is None
            and rec.adding_replicas is None and rec.leader_recovery_state == r.NO_LRS_CHANGE
            and not old.adding_replicas and not old.removing_replicas)


def merge_isr_leader(old: PartitionRegistration, rec: r.PartitionChangeRecord) -> PartitionRegistration:
    """:func:`merge_partition_change` for a record where :func:`is_isr_leader_change`
    holds — the same result and the same checks (raises :class:`ImageError`), cheaper."""
    replicas = old.replicas
    isr = old.isr
    if rec.isr is not None:
        isr = tuple(rec.isr)
        for b in isr:
            if b not in replicas:
                raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: "
                                 f"ISR {isr} not a subset of replicas {replicas}")
        if len(isr) > 1 and len(set(isr)) != len(isr):
            raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: "
                             f"duplicate ISR members {isr}")
    leader, leader_epoch = old.leader, old.leader_epoch
    if rec.leader != r.NO_LEADER_CHANGE:
        leader, leader_epoch = rec.leader, leader_epoch + 1
    if leader != NO_LEADER and leader not in isr:
        raise ImageError(f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}: "
                         f"leader {leader} not in ISR {isr}")
    return PartitionRegistration(old.topic_id, old.partition_id, replicas, isr, leader, leader_epoch,
                                 old.partition_epoch + 1, old.directories, old.removing_replicas,
                                 old.adding_replicas, old.leader_recovery_state)


def merge_broker_change(old: BrokerRegistration, fenced: int, in_controlled_shutdown: int,
                        log_dirs: tuple[uuid.UUID, ...], what: str = "BrokerRegistrationChangeRecord"
                        ) -> BrokerRegistration:
    """``old`` after a registration change (fenced -1/0/1, in_controlled_shutdown 0/1,
    log_dirs empty = no change). Dir ownership is checked by the image, not here."""
    if fenced not in (-1, 0, 1):
        raise ImageError(f"{what} broker {old.broker_id}: invalid fenced value {fenced}")
    if in_controlled_shutdown not in (0, 1):
        raise ImageError(f"{what} broker {old.broker_id}: invalid in_controlled_shutdown value "
                         f"{in_controlled_shutdown}")
    dirs = old.log_dirs
    if log_dirs:
        dirs = sorted_dirs(log_dirs)
        if len(dirs) != len(log_dirs):
            raise ImageError(f"{what} broker {old.broker_id}: duplicate log dirs")
        bad = [d for d in dirs if is_reserved(d)]
        if bad:
            raise ImageError(f"{what} broker {old.broker_id}: reserved dir {bad[0]}")
    return BrokerRegistration(
        broker_id=old.broker_id, epoch=old.epoch, incarnation_id=old.incarnation_id,
        endpoints=old.endpoints, rack=old.rack,
        fenced=old.fenced if fenced == 0 else fenced == 1,
        in_controlled_shutdown=old.in_controlled_shutdown or in_controlled_shutdown == 1,
        log_dirs=dirs)


def sorted_dirs(dirs: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
    """Distinct dirs in the registration's order (sorted by value, like Kafka's)."""
    return tuple(sorted(set(dirs), key=lambda d: d.int))


def _directories(dirs: tuple[uuid.UUID, ...], replicas: tuple[int, ...], where: str) -> tuple[uuid.UUID, ...]:
    if not dirs:
        return (MIGRATING,) * len(replicas)
    if len(dirs) != len(replicas):
        raise ImageError(f"{where}: {len(dirs)} directories not aligned with {len(replicas)} replicas")
    return tuple(dirs)


def _checked(cls: type, where: str, **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ImageError(f"{where}: {exc}") from None


def _validate(p: PartitionRegistration) -> None:
    where = f"partition {p.topic_id}:{p.partition_id}"
    if len(set(p.replicas)) != len(p.replicas):
        raise ImageError(f"{where}: duplicate replicas {p.replicas}")
    if len(set(p.isr)) != len(p.isr):
        raise ImageError(f"{where}: duplicate ISR members {p.isr}")
    if not set(p.isr) <= set(p.replicas):
        raise ImageError(f"{where}: ISR {p.isr} not a subset of replicas {p.replicas}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise ImageError(f"{where}: leader {p.leader} not in ISR {p.isr}")
    if not set(p.adding_replicas) <= set(p.replicas) or not set(p.removing_replicas) <= set(p.replicas):
        raise ImageError(f"{where}: adding/removing replicas not among replicas {p.replicas}")


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
