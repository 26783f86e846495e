"""DescribeLogDirs (35, v1–v5) and AlterReplicaLogDirs (34, v1–v2).

DescribeLogDirs lists every configured log dir: path, error code (KAFKA_STORAGE_ERROR and
no topics when offline), per-partition size / offset lag / is-future (future replicas of
AlterReplicaLogDirs moves included), volume total/usable bytes (v4). Topics with no
partition in a dir are left out (KAFKA-16807). In v4 each result also carries the dir's
``directory.id`` as **tagged field 0 (uuid)** — the KIP's future work. kio's v4 classes do
not know that tag, so :class:`DescribeLogDirsResultV4` / :class:`DescribeLogDirsResponseV4`
extend them (same wire layout plus the tag); clients that do not know the tag skip it.
(Readers built on stock kio raise on unknown tags: decode with these classes.) v5 adds
``IsCordoned`` (KIP-1066: the dir is in ``cordoned.log.dirs``), the tag kept the same way.

AlterReplicaLogDirs, per partition: unknown destination path → LOG_DIR_NOT_FOUND (57);
destination offline → KAFKA_STORAGE_ERROR; destination cordoned (KIP-1066) →
INVALID_REPLICA_ASSIGNMENT (Kafka's choice, KAFKA-19774); topic or partition unknown →
UNKNOWN_TOPIC_OR_PARTITION; partition offline here → KAFKA_STORAGE_ERROR; else the move is
handed to ``BrokerView.mover`` whose error code is returned (REPLICA_NOT_AVAILABLE when not
hosted here, KAFKA_STORAGE_ERROR while any dir is offline, …).
"""

# No ``from __future__ import annotations`` here: kio reads the field types at runtime.
import os.path
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.describe_log_dirs.v4 import response as _v4
from kio.schema.describe_log_dirs.v5 import response as _v5
from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, error, response_type
from broker_impl.api.view import LogDirInfo

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

DESCRIBE_KEY = ApiKey.DESCRIBE_LOG_DIRS
ALTER_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS
DIRECTORY_ID_TAG = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResultV4(_v4.DescribeLogDirsResult):
    directory_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid", "tag": DIRECTORY_ID_TAG}, default=None)
    """The dir's directory.id (None = not sent)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResponseV4(_v4.DescribeLogDirsResponse):
    results: tuple[DescribeLogDirsResultV4, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResultV5(_v5.DescribeLogDirsResult):
    directory_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid", "tag": DIRECTORY_ID_TAG}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogDirsResponseV5(_v5.DescribeLogDirsResponse):
    results: tuple[DescribeLogDirsResultV5, ...]


_TAGGED = {4: (DescribeLogDirsResultV4, DescribeLogDirsResponseV4), 5: (DescribeLogDirsResultV5, DescribeLogDirsResponseV5)}


def _norm(path: str) -> str:
    return os.path.normpath(path)


def _wanted(req: Any) -> dict[str, set[int]] | None:
    if req.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for t in req.topics:
        wanted.setdefault(t.topic, set()).update(t.partitions)
    return wanted


async def handle_describe_log_dirs(api: "ApiContext", ctx: Any, req: Any) -> Any:
    version = req.__version__
    part_cls = response_type(DESCRIBE_KEY, version, "DescribeLogDirsPartition")
    topic_cls = response_type(DESCRIBE_KEY, version, "DescribeLogDirsTopic")
    result_cls: type
    resp_cls: type
    if version in _TAGGED:
        result_cls, resp_cls = _TAGGED[version]
    else:
        result_cls = response_type(DESCRIBE_KEY, version, "DescribeLogDirsResult")
        resp_cls = response_type(DESCRIBE_KEY, version, "DescribeLogDirsResponse")
    wanted = _wanted(req)
    results = []
    for d in api.view.log_dirs():
        topics: dict[str, list[Any]] = {}
        if d.online:
            for r in d.replicas:
                if wanted is not None and r.partition not in wanted.get(r.topic_name, ()):
                    continue
                topics.setdefault(r.topic_name, []).append(build(
                    part_cls, partition_index=r.partition, partition_size=r.size_bytes,
                    offset_lag=r.offset_lag, is_future_key=r.is_future))
        results.append(build(
            result_cls, error_code=ErrorCode.none if d.online else ErrorCode.kafka_storage_error,
            log_dir=d.path, total_bytes=d.total_bytes, usable_bytes=d.usable_bytes, directory_id=d.directory_id,
            is_cordoned=d.is_cordoned,
            topics=tuple(build(topic_cls, name=name, partitions=tuple(sorted(ps, key=lambda p: (p.partition_index, p.is_future_key))))
                         for name, ps in sorted(topics.items()))))
    return build(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))


async def _alter_one(api: "ApiContext", target: LogDirInfo | None, name: str, partition: int) -> ErrorCode:
    view = api.view
    if target is None:
        return ErrorCode.log_dir_not_found
    if not target.online:
        return ErrorCode.kafka_storage_error
    if target.is_cordoned:
        return ErrorCode.invalid_replica_assignment
    topic_id = view.image.topic_ids.get(name)
    if topic_id is None or view.image.partition(topic_id, partition) is None:
        return ErrorCode.unknown_topic_or_partition
    if view.is_partition_offline(topic_id, partition):
        return ErrorCode.kafka_storage_error
    return error(await view.mover.alter_replica_log_dir(topic_id, partition, target.directory_id))


async def handle_alter_replica_log_dirs(api: "ApiContext", ctx: Any, req: Any) -> Any:
    version = req.__version__
    part_cls = response_type(ALTER_KEY, version, "AlterReplicaLogDirPartitionResult")
    topic_cls = response_type(ALTER_KEY, version, "AlterReplicaLogDirTopicResult")
    resp_cls = response_type(ALTER_KEY, version, "AlterReplicaLogDirsResponse")
    dirs = {_norm(d.path): d for d in api.view.log_dirs()}
    results: dict[str, list[Any]] = {}
    for d in req.dirs:
        target = dirs.get(_norm(d.path)) if len(d.path) <= 255 else None
        for t in d.topics:
            for p in t.partitions:
                code = await _alter_one(api, target, t.name, p)
                results.setdefault(t.name, []).append(build(part_cls, partition_index=p, error_code=code))
    return build(resp_cls, throttle_time=NO_THROTTLE, results=tuple(
        build(topic_cls, topic_name=name, partitions=tuple(parts)) for name, parts in results.items()))
