"""DeleteTopics and CreatePartitions on a real kraft-controller process (what brokers forward),
and its ApiVersions: exactly the APIs it serves."""

from __future__ import annotations

import datetime

import pytest

from controller_impl.runtime.request_table import REQUESTS
from kafka_common import wire
from kafka_common.ids import UNASSIGNED
from kafka_common.wire import ErrorCode
from kafka_runtime.client import KafkaClient
from test_controller_process import read_metadata, run, setup_cluster

pytestmark = pytest.mark.integration
T = datetime.timedelta(seconds=10)
# served by the listener itself besides its request table: ApiVersions, SASL
OWN = {18, 17, 36}


def _delete(version, **topic):
    mod = wire.request_module(20, version)
    return wire.make(wire.request_class(20, version), timeout=T,
                     topics=(wire.make(mod.DeleteTopicState, **{"name": None, "topic_id": None, **topic}),))


def _grow(name, count):
    mod = wire.request_module(37, 3)
    return wire.make(wire.request_class(37, 3), timeout=T, validate_only=False,
                     topics=(wire.make(mod.CreatePartitionsTopic, name=name, count=count, assignments=None),))


def test_api_versions_list_exactly_what_is_served(controller):
    async def go():
        c = await KafkaClient.connect("127.0.0.1", controller.port)
        try:
            table = await c.negotiate()
        finally:
            await c.close()
        assert set(table) <= set(REQUESTS) | OWN, sorted(set(table) - set(REQUESTS) - OWN)
        for key, row in REQUESTS.items():
            assert table[key] == row.versions, key
        assert table[20] == (0, 6) and table[37] == (0, 3)
    run(go())


def test_create_partitions_then_delete_by_id_through_the_process(controller):
    async def go():
        brokers, admin, reader, tid = await setup_cluster(controller, partitions=2)
        try:
            resp = await admin.request(_grow("t", 4))
            assert [r.error_code for r in resp.results] == [ErrorCode.none]
            await reader.catch_up()
            parts = reader.image.partitions_of(tid)
            assert sorted(parts) == [0, 1, 2, 3]
            assert all(p.directories == (UNASSIGNED,) * 2 and p.leader in (1, 2) for pid, p in parts.items() if pid >= 2)
            resp = await admin.request(_delete(6, topic_id=tid))
            (out,) = resp.responses
            assert (out.name, out.topic_id, out.error_code) == ("t", tid, ErrorCode.none)
            await reader.catch_up()
            assert "t" not in reader.image.topic_ids and reader.image.partitions_of(tid) == {}
            resp = await admin.request(_delete(6, name="t"))
            assert resp.responses[0].error_code == ErrorCode.unknown_topic_or_partition
        finally:
            await admin.close()
            for b in brokers:
                await b.close()
    run(go())


def test_deletion_disabled_is_refused_and_the_topic_stays(make_controller):
    proc = make_controller(delete_topic_enable="false")

    async def go():
        brokers, admin, reader, tid = await setup_cluster(proc, partitions=1, assign=False)
        try:
            resp = await admin.request(_delete(6, name="t"))
            assert resp.responses[0].error_code == ErrorCode.topic_deletion_disabled
        finally:
            await admin.close()
            for b in brokers:
                await b.close()
        assert "t" in (await read_metadata(proc)).image.topic_ids
    run(go())
