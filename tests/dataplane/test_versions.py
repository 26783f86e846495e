"""Every advertised version of every API is answered over the socket, and the answer
decodes with the matching schema (version-specific required fields, header versions)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from broker_impl.api.request_table import supported_apis
from broker_impl.api.log_dirs import DescribeLogDirsResponseV4, DescribeLogDirsResponseV5
from kafka_common import wire
from kafka_common.metadata import records as r
from testkit.protocol import RawConnection, fetch_request, make_batch, produce_request

pytestmark = pytest.mark.integration
SUPPORTED_APIS = supported_apis()


def _request(api_key: int, version: int, topic: str, topic_id, log_dir: str):
    mod = wire.request_module(api_key, version)
    cls = wire.request_class(api_key, version)
    m = wire.make
    if api_key == 0:
        return produce_request(version, topic, 0, make_batch([b"v%d" % version]), acks=1)
    if api_key == 1:
        return fetch_request(version, topic_id if version >= 13 else topic, 0, 0)
    if api_key == 2:
        return m(cls, replica_id=-1, isolation_level=0, topics=(mod.ListOffsetsTopic(name=topic, partitions=(
            m(mod.ListOffsetsPartition, partition_index=0, timestamp=-1, current_leader_epoch=-1, max_num_offsets=1),)),))
    if api_key == 3:
        return m(cls, topics=(m(mod.MetadataRequestTopic, name=topic, topic_id=None),), allow_auto_topic_creation=False,
                 include_topic_authorized_operations=False, include_cluster_authorized_operations=False)
    if api_key == 10:
        return m(cls, key="group", key_type=0, coordinator_keys=("group",))
    if api_key in GROUP_REQUESTS:
        return GROUP_REQUESTS[api_key](m, mod, cls, version, topic)
    if api_key == 19:
        return m(cls, topics=(m(mod.CreatableTopic, name=f"c{version}", num_partitions=1, replication_factor=1,
                                assignments=(), configs=()),), timeout=timedelta(seconds=5), validate_only=False)
    if api_key == 21:
        return m(cls, topics=(mod.DeleteRecordsTopic(name=topic, partitions=(
            mod.DeleteRecordsPartition(partition_index=0, offset=0),)),), timeout=timedelta(seconds=5))
    if api_key == 32:
        return m(cls, resources=(m(mod.DescribeConfigsResource, resource_type=2, resource_name=topic,
                                   configuration_keys=None),), include_synonyms=True, include_documentation=True)
    if api_key == 33:
        return m(cls, resources=(m(mod.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(
            m(mod.AlterableConfig, name="retention.ms", value=str(1000 + version)),)),), validate_only=False)
    if api_key == 44:
        return m(cls, resources=(m(mod.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(
            m(mod.AlterableConfig, name="retention.bytes", config_operation=0, value=str(5000 + version)),)),),
                 validate_only=False)
    if api_key == 22:
        return m(cls, transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1)
    if api_key == 34:
        return m(cls, dirs=(mod.AlterReplicaLogDir(path=log_dir, topics=(
            mod.AlterReplicaLogDirTopic(name=topic, partitions=(0,)),)),))
    if api_key == 35:
        return m(cls, topics=None)
    if api_key == 60:
        return m(cls, include_cluster_authorized_operations=False, endpoint_type=1)
    if api_key == 20:   # a topic that never existed: refused, the listener's topics untouched
        if version >= 6:
            return m(cls, topics=(m(mod.DeleteTopicState, name=f"never{version}", topic_id=None),),
                     timeout=timedelta(seconds=5))
        return m(cls, topic_names=(f"never{version}",), timeout=timedelta(seconds=5))
    if api_key == 37:   # one more partition of the topic per version
        return m(cls, topics=(m(mod.CreatePartitionsTopic, name=topic, count=version + 2, assignments=None),),
                 timeout=timedelta(seconds=5), validate_only=False)
    if api_key == 43:   # the partition's only replica already leads: ELECTION_NOT_NEEDED (EXPECTED)
        return m(cls, election_type=0, topic_partitions=(m(mod.TopicPartitions, topic=topic, partitions=(0,)),),
                 timeout=timedelta(seconds=5))
    if api_key == 45:   # the current replica set again: nothing to move, NONE
        return m(cls, timeout=timedelta(seconds=5), allow_replication_factor_change=True, topics=(
            m(mod.ReassignableTopic, name=topic, partitions=(m(mod.ReassignablePartition, partition_index=0,
                                                               replicas=(1,)),)),))
    if api_key == 46:
        return m(cls, timeout=timedelta(seconds=5), topics=None)
    raise AssertionError(f"no request builder for api {api_key}")


def _error_codes(value):
    """Every error_code in a response tree."""
    out = []
    if isinstance(value, tuple):
        for v in value:
            out += _error_codes(v)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            v = getattr(value, name)
            if name == "error_code":
                out.append(v)
            else:
                out += _error_codes(v)
    return out


def _group_requests():
    sub = b"\x00\x00\x00\x00\x00\x01\x00\x02vv\x00\x00\x00\x00"   # consumer subscription v0: topic vv
    return {
        8: lambda m, mod, cls, v, t: m(cls, group_id="vg", generation_id_or_member_epoch=-1, member_id="",
                                       group_instance_id=None, retention_time=timedelta(milliseconds=-1),
                                       topics=(m(mod.OffsetCommitRequestTopic, name=t, partitions=(
                                           m(mod.OffsetCommitRequestPartition, partition_index=0, committed_offset=v,
                                             committed_leader_epoch=-1, committed_metadata=""),)),)),
        9: lambda m, mod, cls, v, t: (m(cls, require_stable=False, groups=(m(
            mod.OffsetFetchRequestGroup, group_id="vg", member_id=None, member_epoch=-1, topics=(m(
                mod.OffsetFetchRequestTopics, name=t, partition_indexes=(0,)),)),)) if v >= 8 else
            m(cls, group_id="vg", require_stable=False, topics=(m(mod.OffsetFetchRequestTopic, name=t,
                                                                   partition_indexes=(0,)),))),
        11: lambda m, mod, cls, v, t: m(cls, group_id=f"join{v}", session_timeout=timedelta(seconds=10),
                                        rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
                                        protocol_type="consumer", reason=None,
                                        protocols=(m(mod.JoinGroupRequestProtocol, name="range", metadata=sub),)),
        12: lambda m, mod, cls, v, t: m(cls, group_id="vg", generation_id=1, member_id="nobody",
                                        group_instance_id=None),
        13: lambda m, mod, cls, v, t: (m(cls, group_id="vg", members=(m(mod.MemberIdentity, member_id="nobody",
                                                                        group_instance_id=None, reason=None),))
                                       if v >= 3 else m(cls, group_id="vg", member_id="nobody")),
        14: lambda m, mod, cls, v, t: m(cls, group_id="vg", generation_id=1, member_id="nobody",
                                        group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                        assignments=()),
        15: lambda m, mod, cls, v, t: m(cls, groups=("vg",), include_authorized_operations=False),
        16: lambda m, mod, cls, v, t: m(cls, states_filter=(), types_filter=()),
        42: lambda m, mod, cls, v, t: m(cls, groups_names=(f"never{v}",)),
        47: lambda m, mod, cls, v, t: m(cls, group_id="vg", topics=(m(mod.OffsetDeleteRequestTopic, name=t, partitions=(
            m(mod.OffsetDeleteRequestPartition, partition_index=0),)),)),
    }


GROUP_REQUESTS = _group_requests()
EXPECTED = {
    11: {ErrorCode.none, ErrorCode.member_id_required},       # v4+: MEMBER_ID_REQUIRED first
    12: {ErrorCode.unknown_member_id}, 14: {ErrorCode.unknown_member_id},
    13: {ErrorCode.none, ErrorCode.unknown_member_id},        # v3+: per member, top-level NONE
    42: {ErrorCode.group_id_not_found},
    20: {ErrorCode.unknown_topic_or_partition},
    43: {ErrorCode.none, ErrorCode.election_not_needed},      # v0 has no top-level error code
}
# Kafka 3.9 in KRaft: v0 offsets are ZooKeeper's, every partition UNSUPPORTED_VERSION
EXPECTED_AT = {(8, 0): {ErrorCode.unsupported_version}, (9, 0): {ErrorCode.unsupported_version}}


def test_every_advertised_version_answers(broker):
    async def go():
        tid = await broker.create_topic("vv", 1)
        c = await RawConnection.open(broker.server.port)
        log_dir = broker.lm.dir_set.data_dirs[0].path
        answered = []
        try:
            for _ in range(200):  # the first FindCoordinator creates __consumer_offsets; wait for its load
                fc = await c.call(wire.make(wire.request_class(10, 3), key="vg", key_type=0))
                if fc.error_code is ErrorCode.none and not broker.api.groups.loading():
                    break
                await asyncio.sleep(0.02)
            for api_key, (lo, hi) in sorted(SUPPORTED_APIS.items()):
                for version in range(max(lo, 3) if api_key == 0 else lo, hi + 1):
                    req = _request(api_key, version, "vv", tid, log_dir)
                    resp_cls = {(35, 4): DescribeLogDirsResponseV4, (35, 5): DescribeLogDirsResponseV5}.get(
                        (api_key, version))
                    resp = await c.call(req, resp_cls)
                    codes = set(_error_codes(resp))
                    want = EXPECTED_AT.get((api_key, version), EXPECTED.get(api_key, {ErrorCode.none}))
                    assert codes <= want, (api_key, version, resp)
                    answered.append((api_key, version))
        finally:
            await c.close()
        assert len(answered) == sum(hi - (max(lo, 3) if k == 0 else lo) + 1 for k, (lo, hi) in SUPPORTED_APIS.items())
        assert broker.lm.get_log("vv", 0).log_end_offset == 8        # Produce v3..v10 each appended
    broker.loop.run(go())


def test_new_leader_epoch_keeps_the_producer_state_of_the_log(broker):
    """The producer state belongs to the partition's log, not to a leadership term: after a
    new leader epoch a retried batch is still a duplicate (original offset, not appended
    again: the fail-over duplicate bug), and a known producer's gap is still refused."""
    async def go():
        tid = await broker.create_topic("term", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            def produce(seq):
                return produce_request(9, "term", 0, make_batch([b"x"], producer_id=77, epoch=0, base_seq=seq))

            def answer(resp):
                p = resp.responses[0].partition_responses[0]
                return p.error_code, p.base_offset
            assert answer(await c.call(produce(0))) == (ErrorCode.none, 0)
            assert (await c.call(produce(5))).responses[0].partition_responses[0].error_code \
                is ErrorCode.out_of_order_sequence_number
            broker.feed.append(r.PartitionChangeRecord(partition_id=0, topic_id=tid, leader=1))   # new term
            assert broker.image.partition(tid, 0).leader_epoch == 1
            assert answer(await c.call(produce(0))) == (ErrorCode.none, 0)    # the retry: original offset
            assert (await c.call(produce(5))).responses[0].partition_responses[0].error_code \
                is ErrorCode.out_of_order_sequence_number
            assert answer(await c.call(produce(1))) == (ErrorCode.none, 1)
        finally:
            await c.close()
        assert broker.lm.get_log("term", 0).log_end_offset == 2
    broker.loop.run(go())


def test_replica_fetch_requires_cluster_action(broker):
    async def go():
        tid = await broker.create_topic("auth", 1)
        ctx = SimpleNamespace(listener_name="PLAINTEXT", cluster_action_allowed=False)
        denied = await broker.api.handle(ctx, None, fetch_request(16, tid, 0, 0, replica_id=5))
        assert denied.error_code is ErrorCode.cluster_authorization_failed and denied.responses == ()
        assert 5 not in {k[2] for k in broker.view.follower_leo}
        consumer = await broker.api.handle(ctx, None, fetch_request(16, tid, 0, 0))
        assert consumer.error_code is ErrorCode.none
    broker.loop.run(go())
