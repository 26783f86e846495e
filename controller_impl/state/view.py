"""A handler's working view: the image plus the records this handler has emitted so far.

Handlers never mutate the image. They emit records into a :class:`WorkingView`, which
applies each one to a small overlay (with the image's own merge rules), so that later
decisions in the same handler see earlier ones — e.g. a heartbeat that takes two dirs
offline, or an AssignReplicasToDirs naming one partition twice. Cost: O(records emitted).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka_common.ids import TopicId
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.registration_merge import merge_broker_change, merge_partition_change, sorted_dirs
from kafka_common.metadata.model import (BrokerRegistration, Endpoint, PartitionRegistration,
                                         TopicRegistration)

_GONE = object()


class _Pending:
    """A change emitted but not merged yet: most handlers never read a partition back after
    changing it (a dir failure touches each of 100k partitions once), so the merge is done
    on the next read only — the image does it anyway when the records are replayed."""
    __slots__ = ("old", "record")

    def __init__(self, old: PartitionRegistration, record: Any) -> None:
        self.old, self.record = old, record


class WorkingView:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.records: list[Any] = []
        self._parts: dict[tuple[TopicId, int], PartitionRegistration] = {}
        # partition changes emitted in bulk (emit_merged_changes), not indexed in _parts
        # until something reads a partition back: a dir failure's 100k never are
        self._unindexed: list[tuple[tuple[TopicId, int], PartitionRegistration, Any, PartitionRegistration]] = []
        # aligned with records once a merged change was emitted: (read, merged) or None
        self._merged: list[Any] | None = None
        self._brokers: dict[int, Any] = {}
        self._topic_names: dict[str, TopicId] = {}

    # reads (overlay first, then image)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        reg = self._brokers.get(broker_id)
        if reg is _GONE:
            return None
        return reg if reg is not None else self.image.brokers.get(broker_id)

    def partition(self, topic_id: TopicId, partition_id: int) -> PartitionRegistration | None:
        if self._unindexed:
            self._index_pending()
        part = self._parts.get((topic_id, partition_id))
        if part is None:
            return self.image.partition(topic_id, partition_id)
        if type(part) is _Pending:
            part = self._parts[(topic_id, partition_id)] = merge_partition_change(part.old, part.record)
        return part

    def has_changes(self) -> bool:
        """Whether any partition was changed or created in this view so far."""
        return bool(self._parts or self._unindexed)

    def _index_pending(self) -> None:
        parts = self._parts
        for key, _old, _record, new in self._unindexed:
            parts[key] = new
        self._unindexed = []

    def merged(self) -> tuple[Any, ...] | None:
        """``ControllerResult.merged`` for the records emitted so far (None: none merged)."""
        if self._merged is None:
            return None
        return tuple(self._merged) + (None,) * (len(self.records) - len(self._merged))

    def topic_exists(self, name: str) -> bool:
        return name in self._topic_names or name in self.image.topic_ids

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced, not in controlled shutdown (Kafka's ``isActive``)."""
        reg = self.broker(broker_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    def replica_dir_online(self, broker_id: int, directory: uuid.UUID) -> bool:
        """UNASSIGNED/MIGRATING online, LOST offline, else: in the broker's online dirs."""
        reg = self.broker(broker_id)
        return reg is not None and reg.has_online_dir(directory)

    def next_offset(self, base_next_offset: int) -> int:
        """Offset the next emitted record will get, if the log's next offset is ``base``."""
        return base_next_offset + len(self.records)

    # writes

    def emit_merged_changes(self, changes: list[tuple[tuple[TopicId, int], PartitionRegistration, Any,
                                                      PartitionRegistration]]) -> None:
        """Emit many PartitionChangeRecords at once: ``(key, current, record, merged)``
        where ``current`` is what :meth:`partition` returns for ``key`` now, each key
        appears once and ``merged`` = ``merge_isr_leader(current, record)`` —
        :meth:`emit` for each, without the per-record lookups, the merges kept for the
        image (:meth:`merged`)."""
        if self._merged is None:
            self._merged = []
        self._merged.extend([None] * (len(self.records) - len(self._merged)))
        self._merged.extend([(c[1], c[3]) for c in changes])
        self._unindexed.extend(changes)
        self.records.extend([c[2] for c in changes])

    def emit(self, record: Any) -> None:
        kind = type(record)
        if kind is r.PartitionChangeRecord:
            key = (TopicId(record.topic_id), record.partition_id)
            old = self.partition(*key)
            assert old is not None, f"change for unknown partition {key}"
            self._parts[key] = _Pending(old, record)
        elif kind is r.BrokerRegistrationChangeRecord:
            old = self.broker(record.broker_id)
            assert old is not None, f"change for unknown broker {record.broker_id}"
            self._brokers[record.broker_id] = merge_broker_change(
                old, record.fenced, record.in_controlled_shutdown, record.log_dirs)
        elif kind is r.RegisterBrokerRecord:
            self._brokers[record.broker_id] = BrokerRegistration(
                broker_id=record.broker_id, epoch=record.broker_epoch,
                incarnation_id=record.incarnation_id,
                endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol)
                                for e in record.end_points),
                rack=record.rack, fenced=record.fenced,
                in_controlled_shutdown=record.in_controlled_shutdown,
                log_dirs=sorted_dirs(record.log_dirs))
        elif kind is r.UnregisterBrokerRecord:
            self._brokers[record.broker_id] = _GONE
        elif kind is r.TopicRecord:
            self._topic_names[record.name] = TopicId(record.topic_id)
        elif kind is r.PartitionRecord:
            key = (TopicId(record.topic_id), record.partition_id)
            self._parts[key] = PartitionRegistration(
                topic_id=key[0], partition_id=record.partition_id, replicas=record.replicas,
                isr=record.isr, leader=record.leader, leader_epoch=record.leader_epoch,
                partition_epoch=record.partition_epoch, directories=record.directories)
        self.records.append(record)

    def topic(self, name: str) -> TopicRegistration | None:
        tid = self._topic_names.get(name)
        if tid is not None:
            return TopicRegistration(name=name, topic_id=tid)
        tid = self.image.topic_ids.get(name)
        return None if tid is None else self.image.topics[tid]
