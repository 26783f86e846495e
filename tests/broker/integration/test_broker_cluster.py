"""1 kraft-controller + 2 kraft-brokers × 3 temp log dirs, real processes on loopback:
registration with real dir ids, placement + AssignReplicasToDirs so that every replica ends
up with the id of the dir its log really lives in, and D4 (a broker with queued assignments
is unfenced only after they are committed)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from testkit.cluster import check_real_dirs, reader_for, unfenced, until, wait_until

from testkit.processes import BrokerProcess
from kafka_runtime.controller_client import create_topic
from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r

pytestmark = pytest.mark.integration


def test_replicas_get_real_directory_ids(cluster):
    ctrl, brokers = cluster

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1, 2)), 30, "both brokers unfenced", brokers)
            for b in brokers:
                reg = reader.image.brokers[b.node_id]
                assert set(reg.log_dirs) == set(b.dir_ids().values())
            resp = await create_topic(client, "t1", 6, 2)
            assert resp.topics[0].error_code.value == 0, resp
            await until(reader, lambda im: "t1" in im.topic_ids and all(
                UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids["t1"]).values()),
                20, "every t1 replica assigned to a real dir", brokers)
            check_real_dirs(reader.image, brokers, "t1")
            # least-loaded placement spreads 6 replicas per broker over its 3 dirs: 2 each
            for b in brokers:
                counts = {path: sum(1 for n in os.listdir(path) if n.startswith("t1-")) for path in b.dirs}
                assert sorted(counts.values()) == [2, 2, 2], counts
        finally:
            await client.close()

    asyncio.run(run())
    for b in brokers:
        assert b.stop() == 0, b.stderr()
        names = [e["event"] for e in b.events()]
        assert "registered" in names and "unfenced" in names and "assignment_acked" in names
    # a restart attaches the existing logs where the metadata says they are: nothing to send
    b1 = brokers[0]
    before = len(b1.events())
    b1.start()
    wait_until(lambda: any(e["event"] == "unfenced" for e in b1.events()[before:]), 30, "broker 1 unfenced again")
    run2 = b1.events()[before:]
    assert run2[0]["event"] == "broker_starting" and run2[0]["existing_logs"] == 6
    assert run2[0]["event_loop"] == "uvloop"  # kraft-broker's default loop (kafka_runtime.event_loop)
    started = [e for e in ctrl.events() if e["event"] == "controller_started"]
    assert started and started[-1]["event_loop"] == "uvloop"
    assert not [e for e in run2 if e["event"].startswith("assignment_") or e["event"] == "log_deleted"]
    assert b1.stop() == 0, b1.stderr()


def test_unfenced_only_after_assignments_committed_D4(cluster):
    ctrl, brokers = cluster
    b1, b2 = brokers

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1, 2)), 30, "both brokers unfenced", brokers)
            assert b2.stop() == 0, b2.stderr()
            await until(reader, lambda im: im.brokers[2].fenced, 20, "broker 2 fenced after its shutdown")
            # broker 2 is down: its replicas of t2 are UNASSIGNED until it comes back and places them
            resp = await create_topic(client, "t2", 0, 0, assignments={p: [1, 2] for p in range(4)})
            assert resp.topics[0].error_code.value == 0, resp
            await until(reader, lambda im: "t2" in im.topic_ids, 10, "t2 created")
            t2 = reader.image.topic_ids["t2"]
            assert all(p.directories[1] == UNASSIGNED for p in reader.image.partitions_of(t2).values())
            restart_from = reader.next_offset
            b2.start()
            await until(reader, lambda im: unfenced(im, (2,)) and all(
                UNASSIGNED not in p.directories for p in im.partitions_of(t2).values()),
                30, "broker 2 back, unfenced, t2 assigned", brokers)
            check_real_dirs(reader.image, brokers, "t2")
            # the metadata log order: broker 2's dir assignments for t2 are committed before
            # the UnfenceBrokerRecord of its new registration
            later = [(o, rec) for o, rec in reader.records if o >= restart_from]
            reg_off = max(o for o, rec in later if isinstance(rec, r.RegisterBrokerRecord) and rec.broker_id == 2)
            unfence_off = min(o for o, rec in later if o > reg_off and (
                (isinstance(rec, r.UnfenceBrokerRecord) and rec.id == 2) or
                (isinstance(rec, r.BrokerRegistrationChangeRecord) and rec.broker_id == 2 and rec.fenced == -1)))
            assigned = [o for o, rec in later if isinstance(rec, r.PartitionChangeRecord)
                        and rec.topic_id == t2 and rec.directories]
            assert assigned and max(assigned) < unfence_off, (assigned, unfence_off)
        finally:
            await client.close()

    asyncio.run(run())

    def unfenced_after_ack():
        ev = b2.events()
        acked = [e["ts_ns"] for e in ev if e["event"] == "assignment_acked"]
        unfenced_ts = [e["ts_ns"] for e in ev if e["event"] == "unfenced"]
        return acked and unfenced_ts and max(unfenced_ts) > min(acked)

    wait_until(unfenced_after_ack, 10, "broker 2's own unfenced event after its assignment_acked")


def test_registration_refused_for_a_cloned_dir_exits_with_reason(make_cluster):
    """A disk cloned from another broker (same directory.id): the controller refuses the
    registration (D2, INVALID_REQUEST); the broker retries, then gives up after
    initial.broker.registration.timeout.ms with a one-line reason and exit status 1."""
    ctrl, brokers = make_cluster(n_brokers=1)
    [b1] = brokers
    wait_until(lambda: any(e["event"] == "unfenced" for e in b1.events()), 30, "broker 1 unfenced")
    b2 = BrokerProcess(os.path.join(os.path.dirname(b1.workdir), "broker2"), 2, ctrl,
                       extra={"initial.broker.registration.timeout.ms": "1500"})
    try:
        b2.format()
        shutil.copy(os.path.join(b1.dirs[1], "meta.properties"), os.path.join(b2.dirs[1], "meta.properties"))
        with open(os.path.join(b2.dirs[1], "meta.properties"), encoding="utf-8") as f:
            text = f.read().replace("node.id=1", "node.id=2")
        with open(os.path.join(b2.dirs[1], "meta.properties"), "w", encoding="utf-8") as f:
            f.write(text)
        b2.start()
        assert b2.wait_exit(20) == 1, b2.stderr()
        err = b2.stderr()
        assert "unable to register with the controller quorum within 1500 ms (last error code 42)" in err, err
        assert any(e["event"] == "registration_failed" and e["error_code"] == 42 for e in b2.events())
    finally:
        b2.kill()
