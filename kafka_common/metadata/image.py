"""The metadata image: the cluster state that replaying the metadata log produces.

:class:`MetadataImage` is mutable and replayed in place; each record costs O(1) plus the
size of what it names (a RemoveTopicRecord costs its partitions). It holds the tables and
answers the reads itself; it composes its reverse indexes
(:class:`~kafka_common.metadata.image_indexes.ImageIndexes`, ``indexes``) and its pending
changes (:class:`~kafka_common.metadata.image_changes.ImageChanges`), and replays each record
by its rule in :mod:`kafka_common.metadata.image_replay` (functions over the image's tables:
no inheritance). The hot reads — ``partition``, ``partitions_of``, ``brokers``,
``topic_ids`` — are dict lookups on the image itself.

Reads besides the tables (the index ones each O(replicas) per partition to maintain):

- ``partitions_in_dir(dir_id)``: partitions with a replica assigned to that directory
  (reserved ids never indexed); ``partitions_with_isr_member(broker)``: partitions whose ISR
  holds the broker; ``partitions_of_broker(broker)``: partitions the broker is a replica of.
- ``register_offsets[broker]``: offset of the broker's latest RegisterBrokerRecord
  (the "caught up" rule for unfencing).
- ``dir_owner(dir_id)``: the registered broker whose online dirs include ``dir_id``.
- ``known_dirs(broker)`` / ``offline_dirs(broker)``: every dir the broker ever registered
  (until unregistered) / those of them not online now (a resent OfflineLogDirs is known).

The sets returned by the index accessors are live views: do not mutate them, and copy
them before replaying more records while iterating.

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

from kafka_common.ids import TopicId
from kafka_common.metadata.image_changes import ImageChanges, ImageError, PartitionKey
from kafka_common.metadata.image_indexes import ImageIndexes
from kafka_common.metadata.image_replay import RECORD_RULES, install
from kafka_common.metadata.model import BrokerRegistration, PartitionRegistration, TopicRegistration
from kafka_common.metadata.snapshot_state import restore_snapshot_state, snapshot_state

_EMPTY: frozenset = frozenset()


class MetadataImage:
    """The cluster state, replayed in place from metadata records."""

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
        self._dir_owner: dict[uuid.UUID, int] = {}
        self._known_dirs: dict[int, frozenset[uuid.UUID]] = {}
        self.indexes = ImageIndexes()
        self._changes = ImageChanges()

    # --- reads ----------------------------------------------------------------------

    def partition(self, topic_id: TopicId, partition_id: int) -> PartitionRegistration | None:
        parts = self._partitions.get(topic_id)
        return None if parts is None else parts.get(partition_id)

    def partitions_of(self, topic_id: TopicId) -> dict[int, PartitionRegistration]:
        return self._partitions.get(topic_id, {})

    def partitions_in_dir(self, dir_id: uuid.UUID) -> set[PartitionKey] | frozenset:
        return self.indexes.by_dir.get(dir_id, _EMPTY)

    def partitions_with_isr_member(self, broker_id: int) -> set[PartitionKey] | frozenset:
        return self.indexes.by_isr.get(broker_id, _EMPTY)

    def partitions_of_broker(self, broker_id: int) -> set[PartitionKey] | frozenset:
        return self.indexes.by_replica.get(broker_id, _EMPTY)

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
        return self.indexes.count

    def all_partitions(self) -> Iterable[PartitionRegistration]:
        for parts in self._partitions.values():
            yield from parts.values()

    def drain_changes(self) -> ImageChanges:
        changes, self._changes = self._changes, ImageChanges()
        return changes

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
                    changes.note_partition(old, new, key=(tid, pid))
        for bid in set(self.brokers) | set(other.brokers):
            old_b, new_b = self.brokers.get(bid), other.brokers.get(bid)
            if old_b != new_b:
                changes.note_broker(bid, old_b, new_b)
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
        rule = RECORD_RULES.get(type(record))
        if rule is None:
            raise ImageError(f"cannot replay {type(record).__name__}")
        rule(self, record, offset)
        self.last_offset = offset

    def replay_all(self, items: Iterable[tuple[int, Any]]) -> None:
        """Replay ``(offset, record)`` pairs in order."""
        for offset, record in items:
            self.replay(record, offset)

    # --- merged installs (the controller's write path) ------------------------------

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
        install(self, parts, old, new)
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
        last_tid = parts = None
        for old, new in merged:
            tid = old.topic_id
            if tid is not last_tid:
                parts = partitions[tid]
                last_tid = tid
            install(self, parts, old, new)
        self.last_offset = max(self.last_offset, last_offset)
