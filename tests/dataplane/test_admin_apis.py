"""Metadata, ListOffsets, CreateTopics, DescribeCluster, FindCoordinator, DescribeLogDirs
(with the directory-id tag) and AlterReplicaLogDirs against the real listener."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from broker_impl.api import legacy_produce
from broker_impl.api.log_dirs import DescribeLogDirsResponseV4
from broker_impl.api.request_table import REQUESTS
from kafka_common import ids, wire
from kafka_common.metadata import records as r
from kafka_runtime.connection import API_VERSIONS_RANGE
from tests.dataplane.inprocess_broker import Broker
from testkit.protocol import RawConnection, make_batch, produce_request

pytestmark = pytest.mark.integration


def metadata_request(version, names=None, auto=False):
    mod = wire.request_module(3, version)
    topics = None if names is None else tuple(wire.make(mod.MetadataRequestTopic, name=n, topic_id=None) for n in names)
    return wire.make(wire.request_class(3, version), topics=topics, allow_auto_topic_creation=auto,
                     include_topic_authorized_operations=False, include_cluster_authorized_operations=False)


@pytest.fixture
def broker2dirs(tmp_path, loop_thread):
    b = Broker(tmp_path, n_dirs=2, peers=(2,))
    b.loop = loop_thread
    loop_thread.run(b.start())
    yield b
    loop_thread.run(b.stop())
    assert b.server.stats["handler_errors"] == 0, b.server_log


def test_metadata_topic_ids_leaders_offline_replicas_and_auto_create(broker2dirs):
    b = broker2dirs

    async def go():
        tid = await b.create_topic("m", 2, replicas=(1, 2))
        c = await RawConnection.open(b.server.port)
        try:
            meta = await c.call(metadata_request(13, ["m"]))
            assert meta.error_code is ErrorCode.none and meta.cluster_id == b.view.cluster_id
            assert sorted(x.node_id for x in meta.brokers) == [1, 2]
            (t,) = meta.topics
            assert t.topic_id == tid and t.error_code is ErrorCode.none
            assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.offline_replicas))
                    for p in t.partitions] == [(0, 1, (1, 2), (1, 2), ()), (1, 1, (1, 2), (1, 2), ())]
            # multi-dir broker: new partitions are UNASSIGNED (online); then the broker's first
            # dir fails and is dropped from its registration: a replica assigned there is offline
            failed = b.dir_ids[0]
            b.feed.append(r.PartitionChangeRecord(partition_id=0, topic_id=tid, directories=(failed, ids.UNASSIGNED)))
            b.feed.append(r.PartitionChangeRecord(partition_id=1, topic_id=tid, directories=(ids.LOST, ids.UNASSIGNED),
                                                  leader=2, isr=(2,)))
            b.feed.append(r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=b.image.brokers[1].epoch, log_dirs=(b.dir_ids[1],)))
            meta = await c.call(metadata_request(12, ["m"]))
            parts = {p.partition_index: p for p in meta.topics[0].partitions}
            assert tuple(parts[0].offline_replicas) == (1,) and tuple(parts[1].offline_replicas) == (1,)
            assert parts[1].leader_id == 2 and parts[1].leader_epoch == 1
            b.feed.append(r.PartitionChangeRecord(partition_id=1, topic_id=tid, leader=-1))
            meta = await c.call(metadata_request(9, ["m"]))
            parts = {p.partition_index: p for p in meta.topics[0].partitions}
            assert parts[1].error_code is ErrorCode.leader_not_available
            # unknown topics: without auto-create → UNKNOWN_TOPIC_OR_PARTITION; with it the
            # controller channel creates the topic
            meta = await c.call(metadata_request(12, ["fresh"], auto=False))
            assert meta.topics[0].error_code is ErrorCode.unknown_topic_or_partition
            meta = await c.call(metadata_request(12, ["fresh", "bad/name"], auto=True))
            by_name = {t.name: t for t in meta.topics}
            assert by_name["bad/name"].error_code is ErrorCode.invalid_topic_exception
            assert by_name["fresh"].error_code is ErrorCode.none and by_name["fresh"].topic_id == b.image.topic_ids["fresh"]
            assert [t.name for t in b.controller.requests[-1].topics] == ["fresh"]
            listing = await c.call(metadata_request(1, None))
            assert sorted(t.name for t in listing.topics) == ["fresh", "m"]
            none = await c.call(metadata_request(4, []))
            assert none.topics == ()
        finally:
            await c.close()
    b.loop.run(go())


def test_list_offsets_earliest_latest_timestamp(broker):
    async def go():
        await broker.create_topic("lo", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            for i, ts in enumerate((1000, 2000, 3000)):
                resp = await c.call(produce_request(9, "lo", 0, make_batch([b"a", b"b"], base_timestamp=ts), acks=1))
                assert resp.responses[0].partition_responses[0].error_code is ErrorCode.none

            async def lookup(version, ts):
                mod = wire.request_module(2, version)
                resp = await c.call(wire.make(wire.request_class(2, version), replica_id=-1, isolation_level=1, topics=(
                    mod.ListOffsetsTopic(name="lo", partitions=(wire.make(
                        mod.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=ts),)),)))
                p = resp.topics[0].partitions[0]
                return p.error_code, p.offset

            assert await lookup(7, -2) == (ErrorCode.none, 0)
            assert await lookup(2, -1) == (ErrorCode.none, 6)
            assert await lookup(7, 2001) == (ErrorCode.none, 2)      # batch 2..3 has max ts 2001
            assert await lookup(1, 1500) == (ErrorCode.none, 2)
            assert await lookup(7, 99_999) == (ErrorCode.none, -1)
        finally:
            await c.close()
    broker.loop.run(go())


def test_create_topics_describe_cluster_find_coordinator(broker):
    async def go():
        c = await RawConnection.open(broker.server.port)
        try:
            mod = wire.request_module(19, 7)

            async def create(partitions):
                resp = await c.call(wire.request_class(19, 7)(topics=(
                    mod.CreatableTopic(name="made", num_partitions=partitions, replication_factor=1, assignments=(),
                                       configs=()),), timeout=timedelta(seconds=5), validate_only=False))
                return resp.topics[0]
            first = await create(3)
            assert first.error_code is ErrorCode.none and first.topic_id == broker.image.topic_ids["made"]
            assert (await create(1)).error_code is ErrorCode.topic_already_exists
            assert len(broker.image.partitions_of(broker.image.topic_ids["made"])) == 3
            dc = await c.call(wire.make(wire.request_class(60, 1), include_cluster_authorized_operations=False,
                                        endpoint_type=1))
            assert dc.error_code is ErrorCode.none and [(x.broker_id, x.port) for x in dc.brokers] == [(1, broker.server.port)]
            # the first FindCoordinator creates __consumer_offsets (3 partitions, RF 1 here)
            fc = await c.call(wire.make(wire.request_class(10, 3), key="g", key_type=0))
            assert fc.error_code is ErrorCode.coordinator_not_available
            for _ in range(100):
                fc = await c.call(wire.make(wire.request_class(10, 3), key="g", key_type=0))
                if fc.error_code is ErrorCode.none:
                    break
                await asyncio.sleep(0.02)
            assert (fc.error_code, fc.node_id, fc.port) == (ErrorCode.none, 1, broker.server.port)
            assert len(broker.image.partitions_of(broker.image.topic_ids["__consumer_offsets"])) == 3
            txn = await c.call(wire.make(wire.request_class(10, 3), key="t", key_type=1))
            assert txn.error_code is ErrorCode.coordinator_not_available
        finally:
            await c.close()
    broker.loop.run(go())


def test_create_topics_without_controller_answers_request_timed_out(broker):
    class Down:
        async def create_topics(self, request):
            raise ConnectionError("controller 3000 unreachable")

    async def go():
        broker.view.controller = Down()
        c = await RawConnection.open(broker.server.port)
        try:
            mod = wire.request_module(19, 4)
            resp = await c.call(wire.request_class(19, 4)(topics=(
                mod.CreatableTopic(name="x", num_partitions=1, replication_factor=1, assignments=(), configs=()),),
                timeout=timedelta(seconds=5), validate_only=False))
            assert resp.topics[0].error_code is ErrorCode.request_timed_out
        finally:
            await c.close()
    broker.loop.run(go())


def test_describe_log_dirs_v4_carries_directory_id_tag_and_offline_dir(broker2dirs):
    b = broker2dirs

    async def go():
        await b.create_topic("d", 2, replicas=(1,))
        c = await RawConnection.open(b.server.port)
        try:
            for p in (0, 1):
                resp = await c.call(produce_request(9, "d", p, make_batch([b"v" * 100]), acks=1))
                assert resp.responses[0].partition_responses[0].error_code is ErrorCode.none
            resp = await c.call(wire.request_class(35, 4)(topics=None), DescribeLogDirsResponseV4)
            by_id = {res.directory_id: res for res in resp.results}
            assert set(by_id) == set(b.dir_ids)
            sizes = {}
            for res in resp.results:
                assert res.error_code is ErrorCode.none and res.total_bytes > 0
                for t in res.topics:
                    assert t.partitions, "no topic with an empty partition list (KAFKA-16807)"
                    for p in t.partitions:
                        sizes[(t.name, p.partition_index)] = (res.log_dir, p.partition_size, p.offset_lag, p.is_future_key)
            assert set(sizes) == {("d", 0), ("d", 1)}
            for (_t, p), (log_dir, size, lag, fut) in sizes.items():
                log = b.lm.get_log("d", p)
                assert (log_dir, size, lag, fut) == (log.log_dir, log.size_bytes, 0, False)
            filtered = await c.call(wire.request_class(35, 1)(topics=(
                wire.request_module(35, 1).DescribableLogDirTopic(topic="d", partitions=(1,)),)))
            listed = [(t.name, p.partition_index) for res in filtered.results for t in res.topics for p in t.partitions]
            assert listed == [("d", 1)]
            # a move of partition 1 to the other dir is under way: its future log is listed too
            current = b.lm.get_log("d", 1)
            other = next(d.path for d in b.lm.dir_set.data_dirs if d.path != current.log_dir)
            future = b.lm.create_future_log(current.topic_id, "d", 1, other)
            future.append_as_follower(current.read(0, 1 << 20, None))
            await c.call(produce_request(9, "d", 1, make_batch([b"w", b"x"]), acks=1))  # the future lags 2
            resp = await c.call(wire.request_class(35, 4)(topics=None), DescribeLogDirsResponseV4)
            entries = {(res.log_dir, p.partition_index, p.is_future_key): (p.partition_size, p.offset_lag)
                       for res in resp.results for t in res.topics for p in t.partitions if t.name == "d"}
            assert entries[(other, 1, True)] == (future.size_bytes, 2)
            assert entries[(current.log_dir, 1, False)][0] == current.size_bytes
            # the dir holding partition 0 fails
            dead = b.lm.get_log("d", 0).log_dir
            b.lm.mark_offline(dead)
            resp = await c.call(wire.request_class(35, 4)(topics=None), DescribeLogDirsResponseV4)
            dead_res = next(res for res in resp.results if res.log_dir == dead)
            assert dead_res.error_code is ErrorCode.kafka_storage_error and dead_res.topics == ()
            assert dead_res.directory_id == b.lm.dir_id_of(dead)
        finally:
            await c.close()
    b.loop.run(go())


def test_alter_replica_log_dirs_validates_and_hands_to_mover(broker2dirs):
    b = broker2dirs

    async def go():
        tid = await b.create_topic("mv", 1, replicas=(1,))
        c = await RawConnection.open(b.server.port)
        try:
            mod = wire.request_module(34, 2)
            target = b.lm.dir_set.data_dirs[1].path

            async def alter(path, name="mv", partition=0):
                resp = await c.call(wire.request_class(34, 2)(dirs=(mod.AlterReplicaLogDir(
                    path=path, topics=(mod.AlterReplicaLogDirTopic(name=name, partitions=(partition,)),)),)))
                return resp.results[0].partitions[0].error_code

            assert await alter("/no/such/dir") is ErrorCode.log_dir_not_found
            assert await alter(target, name="ghost") is ErrorCode.unknown_topic_or_partition
            assert await alter(target + "/") is ErrorCode.none
            assert b.mover.calls == [(tid, 0, b.lm.dir_id_of(target))]
            b.mover.answer = ErrorCode.replica_not_available.value
            assert await alter(target) is ErrorCode.replica_not_available
            b.lm.mark_offline(target)
            assert await alter(target) is ErrorCode.kafka_storage_error
        finally:
            await c.close()
    b.loop.run(go())


def test_legacy_produce_v2_decodes_and_answers(broker):
    """Produce v0–2 (advertised for librdkafka's codec gates): kio has no schema, ours decode
    the wire bytes; a v2 batch is accepted, and so is a real magic-1 message set (up-converted,
    Kafka 3.9's rule); a v2 batch whose magic byte says 1 is not a valid message set."""
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    builder.append(timestamp=1_700_000_000_000, key=None, value=b"old")
    builder.close()
    message_set = bytes(builder.buffer())

    async def go():
        await broker.create_topic("old", 1)
        for version in legacy_produce.VERSIONS:
            mod = legacy_produce.request_module(version)
            for batch, expected in ((make_batch([b"new"]), ErrorCode.none), (message_set, ErrorCode.none),
                                    (make_batch([b"old"], magic=1), ErrorCode.corrupt_message)):
                req = mod.ProduceRequest(acks=1, timeout=timedelta(seconds=5), topic_data=(mod.TopicProduceData(
                    name="old", partition_data=(mod.PartitionProduceData(index=0, records=batch),)),))
                frame = wire.encode_request(req, 7, "legacy")
                cls = broker.api.request_classes[(0, version)]
                header, n = wire.decode(cls.__header_schema__, frame)
                decoded, m = wire.decode(cls, frame, n)
                assert n + m == len(frame) and decoded == req and header.request_api_version == version
                resp = await broker.api.handle(None, header, decoded)
                body = wire.encode_response(resp, 7)
                resp_cls = type(resp)
                _hdr, k = wire.decode(resp_cls.__header_schema__, body)
                again, _ = wire.decode(resp_cls, body, k)
                assert again.responses[0].partition_responses[0].error_code is expected
        assert broker.lm.get_log("old", 0).log_end_offset == 6
    broker.loop.run(go())


def test_legacy_produce_over_the_listener(broker):
    """Produce v0–2 sent over TCP: the listener decodes them with the broker's own schemas
    (``request_classes``) and answers; the batch lands in the log."""
    async def go():
        await broker.create_topic("wire-old", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            for version in legacy_produce.VERSIONS:
                mod = legacy_produce.request_module(version)
                req = mod.ProduceRequest(acks=1, timeout=timedelta(seconds=5), topic_data=(mod.TopicProduceData(
                    name="wire-old", partition_data=(mod.PartitionProduceData(index=0, records=make_batch([b"v"])),)),))
                resp = await c.call(req, legacy_produce.response_module(version).ProduceResponse)
                part = resp.responses[0].partition_responses[0]
                assert part.error_code is ErrorCode.none and part.base_offset == version
        finally:
            await c.close()
        assert broker.lm.get_log("wire-old", 0).log_end_offset == 3
    broker.loop.run(go())


def test_advertised_versions(broker):
    async def go():
        c = await RawConnection.open(broker.server.port)
        try:
            resp = await c.call(wire.make(wire.request_class(18, 3), client_software_name="t",
                                          client_software_version="1"))
            table = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
        finally:
            await c.close()
        # exactly the request table's rows, each with a handler, plus ApiVersions itself
        assert table == {**{k: row.versions for k, row in REQUESTS.items()}, 18: API_VERSIONS_RANGE}
        assert broker.api.supported_apis == {k: row.versions for k, row in REQUESTS.items()}
        assert table[0][0] == 0 and table[10][0] == 0   # librdkafka's gzip/snappy/lz4 gates
        assert table[1][1] >= 13 and table[3][1] >= 12
    broker.loop.run(go())



def test_offset_fetch_v8_answers_several_groups_in_one_request(broker):
    async def go():
        await broker.create_topic("mg", 2)
        c = await RawConnection.open(broker.server.port)
        try:
            for _ in range(200):   # the first FindCoordinator creates __consumer_offsets; wait for its load
                fc = await c.call(wire.make(wire.request_class(10, 4), key_type=0, coordinator_keys=("g1", "g2")))
                if all(x.error_code is ErrorCode.none for x in fc.coordinators) and not broker.api.groups.loading():
                    break
                await asyncio.sleep(0.02)
            assert [(x.key, x.node_id) for x in fc.coordinators] == [("g1", 1), ("g2", 1)]
            mod = wire.request_module(8, 9)
            for group, offset in (("g1", 11), ("g2", 22)):
                r = await c.call(wire.make(wire.request_class(8, 9), group_id=group, generation_id_or_member_epoch=-1,
                                           member_id="", group_instance_id=None, topics=(wire.make(
                                               mod.OffsetCommitRequestTopic, name="mg", partitions=(wire.make(
                                                   mod.OffsetCommitRequestPartition, partition_index=1,
                                                   committed_offset=offset, committed_leader_epoch=3,
                                                   committed_metadata=group),)),)))
                assert r.topics[0].partitions[0].error_code is ErrorCode.none
            fm = wire.request_module(9, 9)
            resp = await c.call(wire.make(wire.request_class(9, 9), require_stable=True, groups=tuple(
                wire.make(fm.OffsetFetchRequestGroup, group_id=g, member_id=None, member_epoch=-1, topics=topics)
                for g, topics in (("g1", None), ("g2", (wire.make(fm.OffsetFetchRequestTopics, name="mg",
                                                                 partition_indexes=(0, 1)),)), ("none", None)))))
            got = {g.group_id: (g.error_code, [(t.name, p.partition_index, p.committed_offset,
                                                 p.committed_leader_epoch, p.metadata)
                                                for t in g.topics for p in t.partitions]) for g in resp.groups}
            assert got == {"g1": (ErrorCode.none, [("mg", 1, 11, 3, "g1")]),
                           "g2": (ErrorCode.none, [("mg", 0, -1, -1, ""), ("mg", 1, 22, 3, "g2")]),
                           "none": (ErrorCode.none, [])}
        finally:
            await c.close()
    broker.loop.run(go())
