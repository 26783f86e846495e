"""Partition reassignment across brokers: AlterPartitionReassignments (45) and
ListPartitionReassignments (46), Kafka's controller state (KIP-455).

A reassignment lives in the partition's registration: ``replicas`` = target + the replicas
being removed, ``adding_replicas`` = target − original, ``removing_replicas`` = original −
target. Per partition of an AlterPartitionReassignments:

- unknown topic/partition → UNKNOWN_TOPIC_OR_PARTITION (3);
- ``replicas`` null = cancel: none in progress → NO_REASSIGNMENT_IN_PROGRESS (85); else the
  original replicas come back (replicas − adding, in order), the ISR keeps only them and a
  leader among the adding replicas moves to one of them; if no original replica is in the
  ISR the cancel is refused with ELIGIBLE_LEADERS_NOT_AVAILABLE (83) (Kafka allows it only
  with unclean election enabled; here never: nothing is lost by waiting);
- a target: empty, a broker twice, a broker not registered → INVALID_REPLICA_ASSIGNMENT
  (39); another size than the current replicas with ``allow_replication_factor_change``
  false (v1) → INVALID_REPLICA_ASSIGNMENT. A target over a reassignment in progress starts
  from the current replicas (the old adding replicas not in the new target are removed).
  The record: replicas = target + removing, adding, removing, and the new replicas'
  directories = each broker's default (its only dir, or UNASSIGNED: the broker places the
  replica on a dir that is online and not cordoned and reports it with
  AssignReplicasToDirs). Nothing to add or remove → replicas := target, no reassignment.

Completion (:func:`maybe_complete`, called after every AlterPartition of a reassigning
partition and right after a reassignment starts): once every target replica is in the ISR,
replicas := target, ISR := ISR ∩ target, adding/removing cleared, and a leader that is
being removed hands over to the first acceptable target replica in the ISR. The removed
replicas' brokers see they are no replica any more: they stop fetching, delete their logs
and drop any queued dir assignment of it (KAFKA-16886).

A target replica whose directory fails before it joined the ISR (KAFKA-16297's window: the
move was accepted, the promotion has not happened) is never promoted: AlterPartition
refuses an ISR member whose dir is offline (INELIGIBLE_REPLICA) and an election never picks
it, so the reassignment stays in progress with the original replicas serving; the operator
cancels it or points it at another broker (ListPartitionReassignments shows it meanwhile).
"""

from __future__ import annotations

from typing import Any

from controller_impl.errors import ControllerError
from kafka_common import wire
from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from kafka_common.metadata.model import NO_LEADER, PartitionRegistration
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.elections import acceptable
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView


class ReassignmentError(ControllerError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def is_reassigning(part: PartitionRegistration) -> bool:
    return bool(part.adding_replicas or part.removing_replicas)


def target_of(part: PartitionRegistration) -> tuple[int, ...]:
    return tuple(b for b in part.replicas if b not in part.removing_replicas)


def _leader_within(view: WorkingView, part: PartitionRegistration, isr: tuple[int, ...],
                   candidates: tuple[int, ...]) -> int:
    """The current leader if it is among ``candidates`` and still in ``isr``, else the first
    acceptable candidate in ``isr``, else no leader."""
    if part.leader in candidates and part.leader in isr:
        return part.leader
    return next((b for b in candidates if b in isr and acceptable(view, part, b, in_isr=False)), NO_LEADER)


def _change(part: PartitionRegistration, replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
            adding: tuple[int, ...], removing: tuple[int, ...], directories: tuple[Any, ...]
            ) -> r.PartitionChangeRecord:
    return r.PartitionChangeRecord(
        topic_id=part.topic_id, partition_id=part.partition_id,
        replicas=None if replicas == part.replicas else replicas,
        isr=None if isr == part.isr else isr,
        leader=r.NO_LEADER_CHANGE if leader == part.leader else leader,
        adding_replicas=None if adding == part.adding_replicas else adding,
        removing_replicas=None if removing == part.removing_replicas else removing,
        directories=None if directories == part.directories else directories)


def default_dir(reg: Any) -> Any:
    """A new replica's directory: the broker's only online dir, else UNASSIGNED (as
    :func:`controller_impl.state.cluster_control.default_dir`; not imported: that module
    sits above this one)."""
    if reg is not None and len(reg.log_dirs) == 1:
        return reg.log_dirs[0]
    return UNASSIGNED


def _dirs_for(view: WorkingView, part: PartitionRegistration, replicas: tuple[int, ...]) -> tuple[Any, ...]:
    kept = dict(zip(part.replicas, part.directories))
    return tuple(kept[b] if b in kept else default_dir(view.broker(b)) for b in replicas)


def start(view: WorkingView, part: PartitionRegistration, target: tuple[int, ...] | None,
          allow_rf_change: bool = True) -> None:
    """Validate and emit one partition's reassignment (or cancel); raises ReassignmentError."""
    if target is None:
        return _cancel(view, part)
    target = tuple(target)
    if not target:
        raise ReassignmentError(ErrorCode.invalid_replica_assignment, "the target replica list is empty")
    if len(set(target)) != len(target):
        raise ReassignmentError(ErrorCode.invalid_replica_assignment, f"a broker is listed twice in {list(target)}")
    unknown = [b for b in target if view.broker(b) is None]
    if unknown:
        raise ReassignmentError(ErrorCode.invalid_replica_assignment,
                                f"broker {unknown[0]} is not registered")
    current = part.replicas
    if not allow_rf_change and len(target) != len(target_of(part)):
        raise ReassignmentError(ErrorCode.invalid_replica_assignment,
                                f"the target has {len(target)} replicas, the partition "
                                f"{len(target_of(part))}, and the request does not allow a change")
    removing = tuple(b for b in current if b not in target)
    adding = tuple(b for b in target if b not in current)
    replicas = target + removing
    isr = part.isr
    if not removing and not adding:
        leader = part.leader
        rec = _change(part, target, isr, leader, (), (), _dirs_for(view, part, target))
    else:
        rec = _change(part, replicas, isr, part.leader, adding, removing, _dirs_for(view, part, replicas))
    if _is_noop(rec):
        return None
    view.emit(rec)
    maybe_complete(view, part.topic_id, part.partition_id)
    return None


def _cancel(view: WorkingView, part: PartitionRegistration) -> None:
    if not is_reassigning(part):
        raise ReassignmentError(ErrorCode.no_reassignment_in_progress,
                                f"partition {part.partition_id} has no reassignment in progress")
    original = tuple(b for b in part.replicas if b not in part.adding_replicas)
    isr = tuple(b for b in part.isr if b in original)
    if not isr:
        raise ReassignmentError(ErrorCode.eligible_leaders_not_available,
                                f"no original replica of {list(original)} is in the ISR {list(part.isr)}")
    leader = _leader_within(view, part, isr, original)
    view.emit(_change(part, original, isr, leader, (), (), _dirs_for(view, part, original)))


def _is_noop(rec: r.PartitionChangeRecord) -> bool:
    return (rec.replicas is None and rec.isr is None and rec.leader == r.NO_LEADER_CHANGE
            and rec.adding_replicas is None and rec.removing_replicas is None and rec.directories is None)


def maybe_complete(view: WorkingView, topic_id: Any, partition_id: int) -> bool:
    """Finish the reassignment of the partition if every target replica is in the ISR."""
    part = view.partition(topic_id, partition_id)
    if part is None or not is_reassigning(part):
        return False
    target = target_of(part)
    if not all(b in part.isr for b in target):
        return False
    isr = tuple(b for b in part.isr if b in target)
    leader = _leader_within(view, part, isr, target)
    view.emit(_change(part, target, isr, leader, (), (), _dirs_for(view, part, target)))
    return True


def alter_partition_reassignments(view: WorkingView, req: Any) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    cls = wire.response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    allow = bool(getattr(req, "allow_replication_factor_change", True))
    topics = []
    for topic in req.topics:
        reg = view.topic(topic.name)
        parts = []
        for p in topic.partitions:
            code, message = ErrorCode.none, None
            part = view.partition(reg.topic_id, p.partition_index) if reg is not None else None
            try:
                if part is None:
                    raise ReassignmentError(ErrorCode.unknown_topic_or_partition,
                                            f"{topic.name}-{p.partition_index} does not exist")
                start(view, part, None if p.replicas is None else tuple(p.replicas), allow)
            except ReassignmentError as exc:
                code, message = exc.code, str(exc)
            parts.append(wire.make(mod.ReassignablePartitionResponse, partition_index=p.partition_index,
                                   error_code=code, error_message=message))
        topics.append(wire.make(mod.ReassignableTopicResponse, name=topic.name, partitions=tuple(parts)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                     allow_replication_factor_change=allow, responses=tuple(topics))


def list_partition_reassignments(view: WorkingView, req: Any) -> Any:
    """Every reassignment in progress (``topics`` null) or those of the named partitions
    (a partition without one, or unknown, is left out, as Kafka does)."""
    version = req.__version__
    mod = wire.response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    cls = wire.response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    image = view.image
    if req.topics is None:
        wanted = [(t.name, sorted(image.partitions_of(t.topic_id)))
                  for t in sorted(image.topics.values(), key=lambda t: t.name)]
    else:
        wanted = [(t.name, t.partition_indexes) for t in req.topics]
    out = []
    for name, pids in wanted:
        reg = view.topic(name)
        if reg is None:
            continue
        parts = []
        for pid in pids:
            part = view.partition(reg.topic_id, pid)
            if part is None or not is_reassigning(part):
                continue
            parts.append(wire.make(mod.OngoingPartitionReassignment, partition_index=pid,
                                   replicas=part.replicas, adding_replicas=part.adding_replicas,
                                   removing_replicas=part.removing_replicas))
        if parts:
            out.append(wire.make(mod.OngoingTopicReassignment, name=name, partitions=tuple(parts)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                     topics=tuple(out))
