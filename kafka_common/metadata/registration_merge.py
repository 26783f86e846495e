"""How a record changes one registration: the partition and broker merges the image
replays (and the controller computes ahead of writing a record), with their invariant checks.
Each raises :class:`ImageError` on a result that breaks an invariant."""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from kafka_common.ids import MIGRATING, is_reserved
from kafka_common.metadata import records as r
from kafka_common.metadata.image_changes import ImageError
from kafka_common.metadata.model import BrokerRegistration, NO_LEADER, PartitionRegistration


def merge_partition_change(old: PartitionRegistration, rec: r.PartitionChangeRecord) -> PartitionRegistration:
    """The registration ``rec`` turns ``old`` into (Kafka's ``PartitionRegistration.merge``);
    raises :class:`ImageError` if the result breaks an invariant."""
    replicas = old.replicas if rec.replicas is None else tuple(rec.replicas)
    if rec.directories is not None:
        dirs = aligned_directories(rec.directories, replicas, f"PartitionChangeRecord {rec.topic_id}:{rec.partition_id}")
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
            validate(new)
    else:
        validate(new)
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


def aligned_directories(dirs: tuple[uuid.UUID, ...], replicas: tuple[int, ...], where: str) -> tuple[uuid.UUID, ...]:
    if not dirs:
        return (MIGRATING,) * len(replicas)
    if len(dirs) != len(replicas):
        raise ImageError(f"{where}: {len(dirs)} directories not aligned with {len(replicas)} replicas")
    return tuple(dirs)


def checked(cls: type, where: str, **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ImageError(f"{where}: {exc}") from None


def validate(p: PartitionRegistration) -> None:
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
