"""One partition's change: ISR shrink, directory update and leader election (Kafka's
``PartitionChangeBuilder`` without reassignment, ELR or unclean election).

Leader acceptance (behaviour.md §2): the candidate is in the target ISR, its broker is
registered, unfenced and not in controlled shutdown, it is not the broker being removed,
and its replica's directory is online (UNASSIGNED/MIGRATING online, LOST offline).
Election order: keep the current leader if still acceptable, else the first acceptable
replica in replica order, else no leader (-1).

The ISR never becomes empty: removing its last member keeps the ISR as it is and leaves
the partition leaderless (Kafka without ELR). The record carries only what changed; an
unchanged result yields no record at all (KAFKA-16624). Epochs are the image's business:
partition epoch +1 per record, leader epoch +1 only when ``leader`` is set.
"""

from __future__ import annotations

import uuid

from kafka_common.metadata import records as r
from kafka_common.metadata.model import NO_LEADER, PartitionRegistration

from controller_impl.state.view import WorkingView


def build_change(view: WorkingView, part: PartitionRegistration, *,
                 remove: int | None = None,
                 new_isr: tuple[int, ...] | None = None,
                 set_directory: tuple[int, uuid.UUID] | None = None,
                 elect: bool = True,
                 leader_recovery_state: int | None = None) -> r.PartitionChangeRecord | None:
    replicas = part.replicas
    dirs = part.directories
    if set_directory is not None:
        broker_id, dir_id = set_directory
        i = replicas.index(broker_id)
        dirs = dirs[:i] + (dir_id,) + dirs[i + 1:]
    target = part.isr if new_isr is None else tuple(new_isr)
    if remove is not None:
        shrunk = tuple(b for b in target if b != remove)
        target = shrunk if shrunk else target  # never an empty ISR
    leader = part.leader
    if elect:
        def acceptable(b: int) -> bool:
            return (b != remove and b in target and view.is_active(b)
                    and view.replica_dir_online(b, dirs[replicas.index(b)]))
        if leader == NO_LEADER or not acceptable(leader):
            leader = next((b for b in replicas if acceptable(b)), NO_LEADER)
    elif leader != NO_LEADER and leader not in target:
        leader = NO_LEADER
    lrs = r.NO_LRS_CHANGE
    if leader_recovery_state is not None and leader_recovery_state != part.leader_recovery_state:
        lrs = leader_recovery_state
    if target == part.isr and leader == part.leader and dirs == part.directories and lrs == r.NO_LRS_CHANGE:
        return None
    return r.PartitionChangeRecord(
        topic_id=part.topic_id, partition_id=part.partition_id,
        isr=None if target == part.isr else target,
        leader=r.NO_LEADER_CHANGE if leader == part.leader else leader,
        directories=None if dirs == part.directories else dirs,
        leader_recovery_state=lrs)


class Eligibility:
    """``acceptable`` of :func:`build_change` for many partitions in one handler, with the
    brokers' state looked up once (valid while no broker record is emitted meanwhile: a dir
    failure or a fence changes the broker's registration only after its partitions)."""

    def __init__(self, view: WorkingView) -> None:
        self.view = view
        self._brokers: dict[int, tuple[bool, object]] = {}

    def online(self, broker_id: int, directory: uuid.UUID) -> bool:
        known = self._brokers.get(broker_id)
        if known is None:
            reg = self.view.broker(broker_id)
            active = reg is not None and not reg.fenced and not reg.in_controlled_shutdown
            known = self._brokers[broker_id] = (active, reg, {})
        active, reg, dirs = known
        if not active:
            return False
        online = dirs.get(directory)
        if online is None:
            online = dirs[directory] = reg.has_online_dir(directory)
        return online


def remove_replica(eligible: Eligibility, part: PartitionRegistration,
                   broker_id: int) -> r.PartitionChangeRecord | None:
    """``build_change(view, part, remove=broker_id)`` — the same rule, for the hot path of a
    dir failure or a fence (100k partitions): ISR without the broker (never empty), and a
    new leader among the replicas in that ISR whose broker is active and dir online."""
    isr = part.isr
    target = isr
    if broker_id in isr:
        target = tuple([b for b in isr if b != broker_id]) or isr
    replicas = part.replicas
    old_leader = leader = part.leader
    if leader == NO_LEADER or leader == broker_id or leader not in target \
            or not eligible.online(leader, part.directories[replicas.index(leader)]):
        leader = NO_LEADER
        dirs = part.directories
        for i, b in enumerate(replicas):
            if b != broker_id and b in target and eligible.online(b, dirs[i]):
                leader = b
                break
    if target is isr and leader == old_leader:
        return None
    return r.PartitionChangeRecord(
        topic_id=part.topic_id, partition_id=part.partition_id,
        isr=None if target is isr else target,
        leader=r.NO_LEADER_CHANGE if leader == old_leader else leader)
