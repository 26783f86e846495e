"""ISR and leadership moves: fencing, unfencing, failed directories, AlterPartition.

Every function emits into a :class:`WorkingView`. Costs: fencing O(ISR memberships of the
broker), a failed dir O(replicas in that dir) through the image's dir index (never a
scan of all partitions), unfencing O(ISR memberships).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka_common import wire
from kafka_common.ids import from_wire
from kafka_common.metadata import records as r
from kafka_common.metadata.model import NO_LEADER
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.partition_change import Eligibility, build_change, remove_replica
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView

LRS_RECOVERED, LRS_RECOVERING = 0, 1


def remove_from_isrs(view: WorkingView, broker_id: int) -> None:
    """Take ``broker_id`` out of every ISR it is in, moving its leaderships."""
    eligible = Eligibility(view)
    for key in sorted_keys(view.image.partitions_with_isr_member(broker_id)):
        part = view.partition(*key)
        if part is None:
            continue
        rec = remove_replica(eligible, part, broker_id)
        if rec is not None:
            view.emit(rec)


def fence(view: WorkingView, broker_id: int) -> None:
    """Session expiry / want_fence / shutdown / all dirs offline: ISR removal first, then
    the registration change (Kafka's ``handleBrokerFenced``)."""
    reg = view.broker(broker_id)
    assert reg is not None
    remove_from_isrs(view, broker_id)
    if not reg.fenced:
        view.emit(r.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                   fenced=r.FENCE_FENCE))


def unfence(view: WorkingView, broker_id: int) -> None:
    """Unfence, then elect leaders for the leaderless partitions whose ISR holds the broker."""
    reg = view.broker(broker_id)
    assert reg is not None
    view.emit(r.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                               fenced=r.FENCE_UNFENCE))
    for key in sorted(view.image.partitions_with_isr_member(broker_id)):
        part = view.partition(*key)
        if part is None or part.leader != NO_LEADER:
            continue
        rec = build_change(view, part)
        if rec is not None:
            view.emit(rec)


def dirs_offline(view: WorkingView, broker_id: int, newly_offline: set[uuid.UUID]) -> None:
    """For each newly offline dir: ISR shrink + leader move for exactly the partitions whose
    replica on this broker lives there; then ONE registration change with the remaining
    dirs. If no dir would remain (a record cannot say "no dirs": empty = no change) the
    broker is fenced instead and stays fenced until it registers again."""
    reg = view.broker(broker_id)
    assert reg is not None
    leave_isrs_in_dirs(view, broker_id, newly_offline)
    remaining = tuple(d for d in reg.log_dirs if d not in newly_offline)
    if remaining:
        view.emit(r.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                   log_dirs=remaining))
    else:
        fence(view, broker_id)


def sorted_keys(keys) -> list[tuple[uuid.UUID, int]]:
    """``sorted(keys)`` of (topic id, partition) keys, grouped by topic first: ints compare
    far faster than tuples of UUIDs (100k keys: ~20 ms instead of ~200)."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for tid, pid in keys:
        pids = by_topic.get(tid)
        if pids is None:
            pids = by_topic[tid] = []
        pids.append(pid)
    out: list[tuple[uuid.UUID, int]] = []
    for tid in sorted(by_topic, key=lambda t: t.int):
        pids = by_topic[tid]
        pids.sort()
        out.extend([(tid, pid) for pid in pids])
    return out


def leave_isrs_in_dirs(view: WorkingView, broker_id: int, dirs: set[uuid.UUID]) -> None:
    """ISR shrink + leader move for the partitions whose replica on ``broker_id`` lives in
    one of ``dirs`` — found through the image's dir index, O(replicas in those dirs)."""
    eligible = Eligibility(view)
    for dir_id in sorted(dirs, key=lambda d: d.int):
        for key in sorted_keys(view.image.partitions_in_dir(dir_id)):
            part = view.partition(*key)
            if part is None or broker_id not in part.replicas or part.directory(broker_id) != dir_id:
                continue
            rec = remove_replica(eligible, part, broker_id)
            if rec is not None:
                view.emit(rec)


# --- AlterPartition --------------------------------------------------------------------


def alter_partition(view: WorkingView, req: Any) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.ALTER_PARTITION, version)
    cls = wire.response_class(ApiKey.ALTER_PARTITION, version)
    reg = view.broker(req.broker_id)
    if reg is None or reg.epoch != req.broker_epoch:
        return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.stale_broker_epoch, topics=())
    topics = []
    for topic in req.topics:
        tid = from_wire(topic.topic_id)
        known = tid in view.image.topics
        parts = []
        for pd in topic.partitions:
            part = view.partition(tid, pd.partition_index) if known else None
            code = (ErrorCode.unknown_topic_id if not known else
                    ErrorCode.unknown_topic_or_partition if part is None else
                    _alter_one(view, req.broker_id, part, pd))
            part = view.partition(tid, pd.partition_index) if known else None
            parts.append(wire.make(
                mod.PartitionData, partition_index=pd.partition_index, error_code=code,
                leader_id=part.leader if part else NO_LEADER,
                leader_epoch=part.leader_epoch if part else -1,
                isr=part.isr if part and code == ErrorCode.none else (),
                leader_recovery_state=part.leader_recovery_state if part else 0,
                partition_epoch=part.partition_epoch if part else -1))
        topics.append(wire.make(mod.TopicData, topic_id=tid, partitions=tuple(parts)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics))


def _alter_one(view: WorkingView, broker_id: int, part: Any, pd: Any) -> ErrorCode:
    if pd.leader_epoch != part.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if part.leader != broker_id:
        return ErrorCode.invalid_request
    if pd.partition_epoch != part.partition_epoch:
        return ErrorCode.invalid_update_version
    if hasattr(pd, "new_isr_with_epochs"):
        members = [(s.broker_id, s.broker_epoch) for s in pd.new_isr_with_epochs]
    else:
        members = [(b, -1) for b in pd.new_isr]
    new_isr = tuple(b for b, _ in members)
    if not new_isr or broker_id not in new_isr or len(set(new_isr)) != len(new_isr):
        return ErrorCode.invalid_request
    if any(b not in part.replicas for b in new_isr):
        return ErrorCode.invalid_request
    for b, epoch in members:
        reg = view.broker(b)
        if (reg is None or reg.fenced or reg.in_controlled_shutdown
                or (epoch != -1 and epoch != reg.epoch)
                or not reg.has_online_dir(part.directory(b))):
            return ErrorCode.ineligible_replica
    lrs = pd.leader_recovery_state
    if lrs not in (LRS_RECOVERED, LRS_RECOVERING) or (
            lrs == LRS_RECOVERING and part.leader_recovery_state == LRS_RECOVERED):
        return ErrorCode.invalid_request
    if lrs == LRS_RECOVERING and len(new_isr) > 1:
        return ErrorCode.invalid_request
    rec = build_change(view, part, new_isr=new_isr, elect=False, leader_recovery_state=lrs)
    if rec is not None:
        view.emit(rec)
    return ErrorCode.none
