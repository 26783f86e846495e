"""Configs survive the controller's snapshots: a topic created with configs (through a
broker, by confluent-kafka's AdminClient), then the metadata log rolls and is dropped below a
snapshot; a broker restarted behind the log start loads the snapshot (FetchSnapshot) and
describes the same configs, and the controller restarted from its snapshot + tail still
refuses/accepts alterations against them."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from testkit.cluster import wait_until  # noqa: E402
from testkit.processes import BrokerProcess  # noqa: E402

from testkit.quorum import QuorumCluster, register_many  # noqa: E402
from kafka_runtime.controller_client import MetadataReader  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402
from kafka_runtime.events import read_events  # noqa: E402

pytestmark = pytest.mark.integration


async def _image(q: QuorumCluster):
    leader = await q.leader()
    client = await KafkaClient.connect("127.0.0.1", q.port(leader))
    try:
        reader = MetadataReader(client)
        await reader.catch_up()
        return reader.image
    finally:
        await client.close()


def test_configs_in_snapshots_reach_a_broker_behind_the_log_start(tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
    q = QuorumCluster(str(tmp_path / "q"), 1, extra={"metadata.log.max.record.count.between.snapshots": "10",
                                                     "log.segment.bytes": "1024",
                                                     "broker.session.timeout.ms": "4000"})
    b = BrokerProcess(str(tmp_path / "broker1"), 1, q.procs[1],
                      extra={"controller.quorum.voters": q.voters, "log.dir.probe.interval.ms": "100"})
    try:
        q.start()
        b.format()
        b.start()
        wait_until(lambda: any(e["event"] == "unfenced" for e in b.events()), 40, "broker unfenced")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.port}"})
        admin.create_topics([NewTopic("snap", 1, 1, config={"retention.bytes": "31337", "segment.ms": "90000"})],
                            request_timeout=30)["snap"].result(30)
        b.kill()

        # other brokers' registrations: the log rolls and is dropped below snapshots
        asyncio.run(register_many(q, range(10, 60), seed=4))
        snaps = [e for e in read_events(q.procs[1].events_path) if e["event"] == "snapshot_written"]
        assert snaps and snaps[-1]["log_start_offset"] > 0

        # the controller restarted: snapshot + tail
        q.procs[1].kill()
        q.procs[1].start()
        image = asyncio.run(_image(q))
        assert image.configs[(2, "snap")] == {"retention.bytes": "31337", "segment.ms": "90000"}

        before = len(b.events())
        b.start()  # no metadata on disk: starts below the log start → FetchSnapshot
        wait_until(lambda: any(e["event"] == "metadata_snapshot_loaded" for e in b.events()[before:]), 40,
                   "snapshot loaded after the restart")
        # unfenced: Metadata lists it (a fenced broker's Metadata has no live broker)
        wait_until(lambda: any(e["event"] == "unfenced" for e in b.events()[before:]), 40, "unfenced")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.port}"})
        res = ConfigResource(ResourceType.TOPIC, "snap")
        got = admin.describe_configs([res], request_timeout=30)[res].result(30)
        assert got["retention.bytes"].value == "31337" and got["segment.ms"].value == "90000"
        assert got["retention.ms"].value == "604800000"
    finally:
        b.kill()
        for p in q.procs.values():
            p.kill()
