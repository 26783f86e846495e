"""The controller-protocol requests: each builder's value encodes and decodes back equal at
every version it is written at, under the API key kio's index gives its name."""

import uuid

import pytest

from kafka_common import controller_protocol as cp
from kafka_common import ids, wire
from kafka_common.clock import ms_to_timedelta
from kafka_common.wire import ApiKey, ErrorCode

pytestmark = pytest.mark.unit

D1, D2 = uuid.UUID(int=0x11 << 64 | 5), uuid.UUID(int=0x22 << 64 | 6)
T1, T2 = uuid.UUID(int=0x33 << 64 | 7), uuid.UUID(int=0x44 << 64 | 8)


def roundtrip(request):
    cls = type(request)
    _, back = wire.decode_request(wire.encode_request(request, 7, "t"))
    assert back == request
    return cls.__api_key__, cls.__version__


def test_api_keys_come_from_kio_by_name() -> None:
    assert ApiKey.BROKER_REGISTRATION == 62 and ApiKey.BROKER_HEARTBEAT == 63
    assert ApiKey.ASSIGN_REPLICAS_TO_DIRS == 73 and ApiKey.FETCH == 1 and ApiKey.ALTER_PARTITION == 56
    assert wire.request_class(ApiKey.CREATE_TOPICS, 7).__name__ == "CreateTopicsRequest"


@pytest.mark.parametrize("version", range(cp.REGISTRATION[0], cp.REGISTRATION[1] + 2))
def test_registration(version) -> None:
    req = cp.broker_registration(version, broker_id=4, cluster_id="c", incarnation_id=T1,
                                 listeners=[("PLAINTEXT", "h", 9092, cp.PLAINTEXT), ("S", "h", 9093, cp.SASL_PLAINTEXT)],
                                 log_dirs=[D1, D2])
    assert roundtrip(req) == (ApiKey.BROKER_REGISTRATION, version)
    assert [(l.name, l.port, l.security_protocol) for l in req.listeners] == [("PLAINTEXT", 9092, 0), ("S", 9093, 2)]
    assert req.log_dirs == (D1, D2) and req.features[0].name == "metadata.version"


def test_heartbeat_and_assignments() -> None:
    hb = cp.broker_heartbeat(1, broker_id=4, broker_epoch=9, current_metadata_offset=100, want_fence=True,
                             offline_log_dirs=[D2])
    assert roundtrip(hb) == (ApiKey.BROKER_HEARTBEAT, 1)
    assert hb.offline_log_dirs == (D2,) and hb.want_fence and not hb.want_shut_down
    grouped = cp.group_by_dir({D1: [(T1, 0), (T2, 1), (T1, 2)], D2: [(T2, 0)]})
    assert grouped == {D1: {T1: [0, 2], T2: [1]}, D2: {T2: [0]}}
    req = cp.assign_replicas_to_dirs(0, broker_id=4, broker_epoch=9, by_directory=grouped)
    assert roundtrip(req) == (ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0)
    mod = wire.response_module(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0)
    resp = wire.make(wire.response_class(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0), error_code=ErrorCode.none,
                     throttle_time=ms_to_timedelta(0), directories=(mod.DirectoryData(id_=D1, topics=(mod.TopicData(topic_id=T1, partitions=(
                         mod.PartitionData(partition_index=2, error_code=ErrorCode.unknown_topic_id),)),)),))
    assert cp.assignment_errors(resp) == (ErrorCode.none, {(T1, 2): ErrorCode.unknown_topic_id})


@pytest.mark.parametrize("version", [2, 3])
def test_alter_partition(version) -> None:
    req = cp.alter_partition(version, broker_id=1, broker_epoch=5, topic_id=T1, partition=3, leader_epoch=2,
                             partition_epoch=8, new_isr=[1, 2], isr_broker_epochs={1: 5})
    assert roundtrip(req) == (ApiKey.ALTER_PARTITION, version)
    part = req.topics[0].partitions[0]
    if version >= 3:
        assert [(b.broker_id, b.broker_epoch) for b in part.new_isr_with_epochs] == [(1, 5), (2, -1)]
    else:
        assert part.new_isr == (1, 2)


def test_create_topics_and_metadata_fetch() -> None:
    counted = cp.create_topics(7, "t", 3, 2)
    assert roundtrip(counted) == (ApiKey.CREATE_TOPICS, 7)
    assert (counted.topics[0].num_partitions, counted.topics[0].replication_factor) == (3, 2)
    placed = cp.create_topics(7, "t", 3, 2, assignments={1: [2, 3], 0: [1, 2]}, timeout_ms=500)
    topic = placed.topics[0]
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert [(a.partition_index, a.broker_ids) for a in topic.assignments] == [(0, (1, 2)), (1, (2, 3))]
    assert placed.timeout.total_seconds() == 0.5
    for version in range(cp.METADATA_FETCH[0], cp.METADATA_FETCH[1] + 1):
        req = cp.metadata_fetch(version, fetch_offset=42, max_wait_ms=250)
        assert roundtrip(req) == (ApiKey.FETCH, version)
        part = req.topics[0].partitions[0]
        assert part.fetch_offset == 42 and req.max_wait.total_seconds() == 0.25
        assert (req.topics[0].topic_id if version >= 13 else req.topics[0].topic) in (
            ids.METADATA_TOPIC_ID, ids.METADATA_TOPIC)
