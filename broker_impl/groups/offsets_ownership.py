"""Which ``__consumer_offsets`` partitions the group coordinator owns, and their loads.

Ownership follows the metadata image and the local dir state: a partition this broker leads
with an online dir is loaded (its log read from start to end on the dir's worker, records
applied last-writer-wins, tombstones delete; groups with members come back Stable with
fresh session deadlines); it is unloaded when the leadership or the dir goes.
:class:`OffsetsOwnership` is a part of :class:`broker_impl.groups.coordinator.GroupCoordinator`
and owns ``owned`` (partition → :class:`OwnedPartition`); it sees the coordinator only through
the :class:`OwnershipHost` protocol.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Protocol

from broker_impl.groups.state import records as R
from broker_impl.groups.state.model import OffsetEntry
from kafka_common import batch_header as bh

if TYPE_CHECKING:
    from broker_impl.groups.coordinator_config import CoordinatorConfig
    from broker_impl.groups.state.group import Groups

log = logging.getLogger(__name__)
OFFSETS_TOPIC = R.OFFSETS_TOPIC
LOAD_CHUNK_BYTES = 1 << 20


class Ownership(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(slots=True)
class OwnedPartition:
    state: Ownership
    leader_epoch: int
    task: "asyncio.Task[None] | None" = None


class OwnershipHost(Protocol):
    """The coordinator as its offsets ownership sees it: the broker's view (image, local
    replicas, dir states, storage I/O), the settings, the group state the loads fill and
    unloads empty, and the coordinator's task, clock, event and effect helpers."""

    view: Any  # broker_impl.api.view.BrokerView
    config: CoordinatorConfig
    groups: Groups

    @property
    def started(self) -> bool:
        """The coordinator runs (on the loop): ownership follows the image from now on."""
        ...

    def now_ms(self) -> int: ...

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]: ...

    def emit(self, event: str, **fields: Any) -> None:
        """One node event."""
        ...

    def execute(self, effects: list[Any]) -> None:
        """Carry out the group state's effects (replies to parked requests, writes)."""
        ...

    def wake_timer(self) -> None:
        """The group timers' deadlines may have moved."""
        ...


class OffsetsOwnership:
    """The offsets partitions this broker coordinates (``owned``) and their loads."""

    def __init__(self, host: OwnershipHost) -> None:
        self.host = host
        self.owned: dict[int, OwnedPartition] = {}

    # ------------------------------------------------------------------ topology
    @property
    def offsets_topic_id(self) -> uuid.UUID | None:
        return self.host.view.image.topic_ids.get(OFFSETS_TOPIC)

    def partition_count(self) -> int:
        tid = self.offsets_topic_id
        if tid is not None:
            n = len(self.host.view.image.partitions_of(tid))
            if n:
                return n
        return self.host.config.offsets_partitions

    def partition_of(self, group_id: str) -> int:
        return R.partition_for(group_id, self.partition_count())

    def on_partition_changed(self, topic_id: uuid.UUID, partition: int) -> None:
        """A partition's leadership, ISR or local dir state changed (or it was appended to)."""
        if not self.host.started:
            return
        tid = self.offsets_topic_id
        if tid is None or topic_id != tid:
            if tid is None and self.owned:
                self._unload(list(self.owned))
            return
        self._reconcile(tid, partition)

    def reconcile_all(self) -> None:
        tid = self.offsets_topic_id
        if tid is None:
            if self.owned:
                self._unload(list(self.owned))
            return
        for p in list(self.host.view.image.partitions_of(tid)):
            self._reconcile(tid, p)
        for p in [p for p in self.owned if self.host.view.image.partition(tid, p) is None]:
            self._unload([p])

    def _should_lead(self, tid: uuid.UUID, partition: int) -> tuple[bool, int]:
        reg = self.host.view.image.partition(tid, partition)
        if reg is None or reg.leader != self.host.view.node_id or self.host.view.is_partition_offline(tid, partition):
            return False, -1
        return True, reg.leader_epoch

    def _reconcile(self, tid: uuid.UUID, partition: int) -> None:
        lead, epoch = self._should_lead(tid, partition)
        owned = self.owned.get(partition)
        if owned is not None and (not lead or owned.leader_epoch != epoch):
            self._unload([partition])
            owned = None
        if lead and owned is None:
            entry = OwnedPartition(Ownership.LOADING, epoch)
            self.owned[partition] = entry
            entry.task = self.host.spawn(self._load(tid, partition, entry))

    def _groups_on(self, partitions: Iterable[int]) -> list[str]:
        wanted = set(partitions)
        return [gid for gid in self.host.groups.groups if self.partition_of(gid) in wanted]

    def _unload(self, partitions: list[int]) -> None:
        for p in partitions:
            entry = self.owned.pop(p, None)
            if entry is not None and entry.task is not None and not entry.task.done():
                entry.task.cancel()
        gids = self._groups_on(partitions)
        if gids:
            log.info("unloading %d groups of %s-%s", len(gids), OFFSETS_TOPIC, partitions)
        for p in partitions:
            self.host.emit("group_coordinator_unloaded", partition=p,
                       groups=sorted(g for g in gids if self.partition_of(g) == p))
        self.host.execute(self.host.groups.unload(gids))

    async def _load(self, tid: uuid.UUID, partition: int, entry: OwnedPartition) -> None:
        started = self.host.now_ms()
        view = self.host.view
        while True:  # the runtime creates the log and makes it leader after the image says so
            if self.owned.get(partition) is not entry:
                return
            replica = view.local_replica(tid, partition)
            if replica is not None:
                break
            await asyncio.sleep(0.02)
        offsets: dict[R.OffsetKey, OffsetEntry | None] = {}
        groups: dict[str, R.GroupValue | None] = {}
        position = replica.log_start_offset
        try:
            while position < replica.log_end_offset:
                data = await view.replica_io(replica, replica.read, position, LOAD_CHUNK_BYTES, None, True)
                if not data:
                    break
                data = bytes(data)
                next_position = position
                for _pos, header in bh.iter_batches(data, check_crc=False):
                    next_position = max(next_position, header.next_offset)
                for offset, key_bytes, value_bytes in R.decode_batches(data):
                    if offset < position:
                        continue
                    key = R.decode_key(key_bytes)
                    value = R.decode_value(key, value_bytes)
                    if isinstance(key, R.OffsetKey):
                        offsets[key] = value  # type: ignore[assignment]
                        continue
                    groups[key.group_id] = value  # type: ignore[assignment]
                    if value is None:  # a deleted group: its earlier commits go with it
                        for k in [k for k in offsets if k.group_id == key.group_id]:
                            del offsets[k]
                if next_position <= position:
                    break
                position = next_position
        except asyncio.CancelledError:
            raise
        except R.RecordFormatError as exc:
            log.error("%s-%d: cannot load (%s); not coordinating its groups", OFFSETS_TOPIC, partition, exc)
            return
        except Exception as exc:  # a storage error: the dir goes offline, ownership follows
            if isinstance(exc, view.storage_exceptions) or isinstance(exc, OSError):
                view.on_storage_error(tid, partition, "group_load", exc)
                log.warning("%s-%d: load failed: %s", OFFSETS_TOPIC, partition, exc)
                return
            raise
        if self.owned.get(partition) is not entry:
            return
        now = self.host.now_ms()
        for gid, value in groups.items():
            if value is None:
                self.host.groups.load_tombstone(gid)
                continue
            self.host.groups.load_group(gid, protocol_type=value.protocol_type or None, generation=value.generation,
                                   protocol=value.protocol, leader=value.leader,
                                   state_timestamp_ms=now, members=value.members, now_ms=now)
        for key, entry_value in offsets.items():
            self.host.groups.load_offset(key.group_id, key.topic, key.partition, entry_value)
        entry.state = Ownership.LOADED
        entry.task = None
        self.host.emit("group_coordinator_loaded", partition=partition, leader_epoch=entry.leader_epoch,
                   load_ms=now - started, groups=sorted(g for g, v in groups.items() if v is not None),
                   offsets=len(offsets))
        log.info("%s-%d loaded in %d ms: %d groups, %d offsets (to offset %d)", OFFSETS_TOPIC, partition,
                 now - started, len(groups), len(offsets), position)
        self.host.wake_timer()
