"""Effects: what the pure broker core asks the runtime to do.

Every handler of the core returns a list of these frozen values; the runtime executes them
in order. Nothing here does I/O. Partitions are named by :class:`TopicPartition` (the name
the storage layer uses on disk, ``<topic>-<partition>``) and carry the topic id.

Internal effects (``QueueAssignment``, ``ReportDirFailure``) are produced by the component
state machines and consumed by :class:`broker_impl.state.core.BrokerCore`; the runtime only
sees them if it drives the components directly.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka_common.ids import TopicId


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# ---------------------------------------------------------------- controller channel
@dataclass(frozen=True, slots=True)
class SendRegistration:
    """BrokerRegistration (62) with ``LogDirs`` = ``log_dirs`` (sorted, signed compare)."""
    log_dirs: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    """BrokerHeartbeat (63). ``offline_log_dirs`` is cumulative since start."""
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    offline_log_dirs: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One replica → dir assignment. ``seq`` identifies this write (last writer wins)."""
    topic_id: TopicId
    partition: int
    dir_id: uuid.UUID
    reason: str
    queued_at_ms: int
    seq: int

    @property
    def key(self) -> tuple[TopicId, int]:
        return (self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class SendAssignments:
    """AssignReplicasToDirs (73). ``assignments`` in send order; :meth:`by_directory`
    groups them as the request wants (dir → topic → partitions)."""
    broker_epoch: int
    assignments: tuple[Assignment, ...]

    def by_directory(self) -> dict[uuid.UUID, dict[TopicId, list[int]]]:
        out: dict[uuid.UUID, dict[TopicId, list[int]]] = {}
        for a in self.assignments:
            out.setdefault(a.dir_id, {}).setdefault(a.topic_id, []).append(a.partition)
        return out


@dataclass(frozen=True, slots=True)
class QueueAssignment:
    """Internal: hand an assignment to the AssignmentsManager."""
    topic_id: TopicId
    partition: int
    dir_id: uuid.UUID
    reason: str
    tp: TopicPartition | None = None


@dataclass(frozen=True, slots=True)
class ReportDirFailure:
    """Internal: tell the lifecycle (immediate heartbeat) and arm the failure timer."""
    dir_id: uuid.UUID


# ---------------------------------------------------------------- storage / data plane
@dataclass(frozen=True, slots=True)
class CreateLog:
    tp: TopicPartition
    topic_id: TopicId
    dir_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class DeleteLog:
    """Delete the log of ``tp`` in ``dir_id`` Kafka's way: renamed ``<topic>-<p>.<uuid>-delete``
    at once (the name is free for a new incarnation), removed afterwards on the dir's worker.
    ``stray``: found at start-up with no replica of the metadata claiming it (its topic id is
    not in the image, or differs from the image's topic of that name, it has no
    ``partition.metadata``, or this broker is no longer a replica: KAFKA-14616, 16157, 16814)."""
    tp: TopicPartition
    topic_id: TopicId | None
    dir_id: uuid.UUID
    stray: bool = False


@dataclass(frozen=True, slots=True)
class MarkDirOffline:
    """Stop every write to the dir: close its logs, no checkpoints, no probe."""
    dir_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class MarkPartitionsOffline:
    """Serve KAFKA_STORAGE_ERROR (56) for these partitions from now on."""
    dir_id: uuid.UUID
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class StopFetcher:
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class StartFetcher:
    tp: TopicPartition
    topic_id: TopicId
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    tp: TopicPartition
    topic_id: TopicId
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UpdateLeaderState:
    """Still leader, same leader epoch; ISR / partition epoch changed."""
    tp: TopicPartition
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    tp: TopicPartition
    topic_id: TopicId
    leader_id: int  # -1: no leader, do not fetch
    leader_epoch: int


# ---------------------------------------------------------------- dir moves (AlterReplicaLogDirs)
@dataclass(frozen=True, slots=True)
class CreateFutureLog:
    tp: TopicPartition
    topic_id: TopicId
    dir_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class StartDirMover:
    """Copy current → future log and report caught-up via ``on_future_caught_up``."""
    tp: TopicPartition
    source_dir: uuid.UUID
    target_dir: uuid.UUID


@dataclass(frozen=True, slots=True)
class StopDirMover:
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class DeleteFutureLog:
    tp: TopicPartition
    dir_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class SwapFutureLog:
    """Block appends, let the future catch up fully, swap it in, delete the old log;
    then call ``on_swap_done``."""
    tp: TopicPartition
    source_dir: uuid.UUID
    target_dir: uuid.UUID


# ---------------------------------------------------------------- process
@dataclass(frozen=True, slots=True)
class Halt:
    """Exit non-zero now, no graceful shutdown; ``reason`` is the one-line log."""
    reason: str


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Graceful stop (exit code chosen by the runtime from ``clean``)."""
    reason: str
    clean: bool = True


@dataclass(frozen=True, slots=True)
class EmitEvent:
    """A node event (one line of the node event log, :mod:`kafka_runtime.events`)."""
    event: str
    fields: tuple[tuple[str, Any], ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return dict(self.fields)


def event(name: str, **fields: Any) -> EmitEvent:
    return EmitEvent(name, tuple(fields.items()))
