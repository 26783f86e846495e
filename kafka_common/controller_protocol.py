"""The requests a broker sends to the controller quorum, built from plain values, and the
readings of their answers: the one home of the controller-protocol client's messages. The
broker's controller channel, the lab (test brokers, the demo, metadata readers) and the
tests all build them here.

Each builder takes the version to write (callers pick it from the peer's ApiVersions within
the range named here, e.g. ``client.pick_version(ApiKey.BROKER_REGISTRATION, *REGISTRATION)``)
and returns a kio request value; fields a version lacks are dropped (``wire.make``).

========================  ======  ==========================================
API                        key     builder
========================  ======  ==========================================
BrokerRegistration         62      :func:`broker_registration`
BrokerHeartbeat            63      :func:`broker_heartbeat`
AssignReplicasToDirs       73      :func:`assign_replicas_to_dirs`
AlterPartition             56      :func:`alter_partition`
CreateTopics               19      :func:`create_topics`
Fetch (__cluster_metadata)  1      :func:`metadata_fetch`
========================  ======  ==========================================
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_common import ids, wire
from kafka_common.clock import ms_to_timedelta
from kafka_common.wire import ApiKey, ErrorCode

__all__ = [
    "REGISTRATION", "HEARTBEAT", "ASSIGN", "METADATA_FETCH", "CREATE_TOPICS", "PLAINTEXT",
    "SASL_PLAINTEXT", "Listener", "broker_registration", "broker_heartbeat",
    "assign_replicas_to_dirs", "group_by_dir", "assignment_errors", "alter_partition",
    "alter_partition_error", "create_topics", "metadata_fetch", "ALTER_PARTITION",
]

# The version ranges this project writes (min, max), for ``pick_version``.
REGISTRATION = (2, 3)
HEARTBEAT = (1, 2)  # v2: CordonedLogDirs (KIP-1066)
ASSIGN = (0, 0)
METADATA_FETCH = (12, 16)
CREATE_TOPICS = (7, 7)
ALTER_PARTITION = (2, 3)

# security_protocol of a registered listener (Kafka's SecurityProtocol ids)
PLAINTEXT = 0
SASL_PLAINTEXT = 2

Listener = tuple[str, str, int, int]
"""(name, host, port, security_protocol) of one listener a broker registers."""

# metadata.version range a broker supports (the controller checks it at registration)
_METADATA_VERSION = ("metadata.version", 1, 25)


def broker_registration(version: int, *, broker_id: int, cluster_id: str, incarnation_id: uuid.UUID,
                        listeners: Iterable[Listener], log_dirs: Iterable[uuid.UUID]) -> Any:
    mod = wire.request_module(ApiKey.BROKER_REGISTRATION, version)
    name, low, high = _METADATA_VERSION
    return wire.make(
        wire.request_class(ApiKey.BROKER_REGISTRATION, version), broker_id=broker_id,
        cluster_id=cluster_id, incarnation_id=incarnation_id,
        listeners=tuple(mod.Listener(name=n, host=h, port=p, security_protocol=sp) for n, h, p, sp in listeners),
        features=(mod.Feature(name=name, min_supported_version=low, max_supported_version=high),),
        rack=None, is_migrating_zk_broker=False, log_dirs=tuple(log_dirs), previous_broker_epoch=-1)


def broker_heartbeat(version: int, *, broker_id: int, broker_epoch: int, current_metadata_offset: int,
                     want_fence: bool = False, want_shut_down: bool = False,
                     offline_log_dirs: Iterable[uuid.UUID] = (),
                     cordoned_log_dirs: Iterable[uuid.UUID] | None = None) -> Any:
    return wire.make(wire.request_class(ApiKey.BROKER_HEARTBEAT, version), broker_id=broker_id,
                     broker_epoch=broker_epoch, current_metadata_offset=current_metadata_offset,
                     want_fence=want_fence, want_shut_down=want_shut_down,
                     offline_log_dirs=tuple(offline_log_dirs),
                     cordoned_log_dirs=None if cordoned_log_dirs is None else tuple(cordoned_log_dirs))


def group_by_dir(assignments: Mapping[uuid.UUID, Iterable[tuple[uuid.UUID, int]]]
                 ) -> dict[uuid.UUID, dict[uuid.UUID, list[int]]]:
    """{dir: [(topic_id, partition), …]} → {dir: {topic_id: [partition, …]}}."""
    out: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
    for dir_id, parts in assignments.items():
        by_topic = out.setdefault(dir_id, {})
        for topic_id, partition in parts:
            by_topic.setdefault(topic_id, []).append(partition)
    return out


def assign_replicas_to_dirs(version: int, *, broker_id: int, broker_epoch: int,
                            by_directory: Mapping[uuid.UUID, Mapping[uuid.UUID, Sequence[int]]]) -> Any:
    """``by_directory``: {dir_id: {topic_id: [partition, …]}} (see :func:`group_by_dir`)."""
    mod = wire.request_module(ApiKey.ASSIGN_REPLICAS_TO_DIRS, version)
    directories = tuple(
        mod.DirectoryData(id_=dir_id, topics=tuple(
            mod.TopicData(topic_id=t, partitions=tuple(mod.PartitionData(partition_index=p) for p in ps))
            for t, ps in by_topic.items()))
        for dir_id, by_topic in by_directory.items())
    return wire.make(wire.request_class(ApiKey.ASSIGN_REPLICAS_TO_DIRS, version), broker_id=broker_id,
                     broker_epoch=broker_epoch, directories=directories)


def assignment_errors(resp: Any) -> tuple[ErrorCode, dict[tuple[uuid.UUID, int], ErrorCode]]:
    """(top-level error, {(topic_id, partition): error}) of an AssignReplicasToDirs answer."""
    results: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    for d in resp.directories or ():
        for t in d.topics or ():
            for p in t.partitions or ():
                results[(ids.from_wire(t.topic_id), p.partition_index)] = p.error_code
    return resp.error_code, results


def alter_partition(version: int, *, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                    leader_epoch: int, partition_epoch: int, new_isr: Sequence[int],
                    isr_broker_epochs: Mapping[int, int] | None = None) -> Any:
    """A leader's ISR change of one partition; from v3 each ISR member goes with its broker
    epoch (``isr_broker_epochs``, -1 where unknown)."""
    mod = wire.request_module(ApiKey.ALTER_PARTITION, version)
    part: dict[str, Any] = dict(partition_index=partition, leader_epoch=leader_epoch, leader_recovery_state=0,
                                partition_epoch=partition_epoch)
    if version >= 3:
        epochs = isr_broker_epochs or {}
        part["new_isr_with_epochs"] = tuple(mod.BrokerState(broker_id=b, broker_epoch=epochs.get(b, -1))
                                            for b in new_isr)
    else:
        part["new_isr"] = tuple(new_isr)
    return wire.make(wire.request_class(ApiKey.ALTER_PARTITION, version), broker_id=broker_id,
                     broker_epoch=broker_epoch,
                     topics=(wire.make(mod.TopicData, topic_id=topic_id,
                                       partitions=(wire.make(mod.PartitionData, **part),)),))


def alter_partition_error(resp: Any, topic_id: uuid.UUID, partition: int) -> tuple[ErrorCode, Any]:
    """(error, the partition's answer or None) of an AlterPartition answer: the top-level
    error when there is one, else the partition's."""
    if resp.error_code != ErrorCode.none:
        return resp.error_code, None
    for t in resp.topics:
        for p in t.partitions:
            if ids.from_wire(t.topic_id) == topic_id and p.partition_index == partition:
                return p.error_code, p
    return resp.error_code, None


def create_topics(version: int, name: str, partitions: int, replication_factor: int, *,
                  assignments: Mapping[int, Sequence[int]] | None = None, timeout_ms: int = 30000,
                  validate_only: bool = False) -> Any:
    """One topic; ``assignments`` ({partition: [broker, …]}) replaces the counts when given."""
    mod = wire.request_module(ApiKey.CREATE_TOPICS, version)
    topic = mod.CreatableTopic(
        name=name, num_partitions=-1 if assignments else partitions,
        replication_factor=-1 if assignments else replication_factor,
        assignments=tuple(mod.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                          for p, b in sorted((assignments or {}).items())),
        configs=())
    return wire.make(wire.request_class(ApiKey.CREATE_TOPICS, version), topics=(topic,),
                     timeout=ms_to_timedelta(timeout_ms), validate_only=validate_only)


def metadata_fetch(version: int, *, fetch_offset: int, max_wait_ms: int, max_bytes: int = 8 << 20) -> Any:
    """Fetch of ``__cluster_metadata-0`` from ``fetch_offset``, as a broker (replica id -1)."""
    mod = wire.request_module(ApiKey.FETCH, version)
    part = wire.make(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=fetch_offset,
                     last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
    topic = wire.make(mod.FetchTopic, topic=ids.METADATA_TOPIC, topic_id=ids.METADATA_TOPIC_ID,
                      partitions=(part,))
    return wire.make(wire.request_class(ApiKey.FETCH, version), replica_id=-1,
                     max_wait=ms_to_timedelta(max_wait_ms), min_bytes=1, max_bytes=max_bytes,
                     isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                     forgotten_topics_data=(), rack_id="")
