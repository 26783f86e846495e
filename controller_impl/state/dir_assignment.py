"""AssignReplicasToDirs (API 73): the broker tells the controller where its replicas live.

behaviour.md §2; reference §4. Top level: unknown broker or wrong epoch →
STALE_BROKER_EPOCH (77), nothing else looked at. Per partition: UNKNOWN_TOPIC_ID,
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (broker not a replica), else NONE with
a PartitionChangeRecord carrying only ``Directories`` (none if the assignment is already
in place). When the target dir is LOST, unknown to the broker or offline, the assignment
is recorded AND a second record takes the broker out of the ISR and leadership, as for a
failed dir (D6). Each record is applied to the working view before the next is built, so
the second one keeps the new Directories and a partition named twice ends as the later
entry says.
"""

from __future__ import annotations

from typing import Any

from kafka_common import wire
from kafka_common.ids import from_wire
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.partition_change import build_change
from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView


def assign(view: WorkingView, req: Any) -> Any:
    mod = wire.response_module(ApiKey.ASSIGN_REPLICAS_TO_DIRS, req.__version__)
    cls = wire.response_class(ApiKey.ASSIGN_REPLICAS_TO_DIRS, req.__version__)
    broker_id = req.broker_id
    reg = view.broker(broker_id)
    if reg is None or reg.epoch != req.broker_epoch:
        return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.stale_broker_epoch,
                         directories=())
    out_dirs = []
    for entry in req.directories:
        dir_id = from_wire(entry.id_)
        offline = not reg.has_online_dir(dir_id)  # LOST, unknown or gone offline
        out_topics = []
        for topic in entry.topics:
            tid = from_wire(topic.topic_id)
            known = tid in view.image.topics
            out_parts = []
            for pd in topic.partitions:
                code = _assign_one(view, broker_id, tid, pd.partition_index, dir_id, offline) \
                    if known else ErrorCode.unknown_topic_id
                out_parts.append(mod.PartitionData(partition_index=pd.partition_index, error_code=code))
            out_topics.append(mod.TopicData(topic_id=tid, partitions=tuple(out_parts)))
        out_dirs.append(mod.DirectoryData(id_=dir_id, topics=tuple(out_topics)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none,
                     directories=tuple(out_dirs))


def _assign_one(view: WorkingView, broker_id: int, tid: Any, pid: int, dir_id: Any,
                offline: bool) -> ErrorCode:
    part = view.partition(tid, pid)
    if part is None:
        return ErrorCode.unknown_topic_or_partition
    if broker_id not in part.replicas:
        return ErrorCode.not_leader_or_follower
    rec = build_change(view, part, set_directory=(broker_id, dir_id), elect=not offline)
    if rec is not None:
        view.emit(rec)
    if offline:
        part = view.partition(tid, pid)
        assert part is not None
        rec = build_change(view, part, remove=broker_id)
        if rec is not None:
            view.emit(rec)
    return ErrorCode.none
