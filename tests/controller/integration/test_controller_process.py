"""A real kraft-controller process driven over TCP with kio-encoded requests, as brokers
would; the committed records are read back via Fetch of __cluster_metadata."""

from __future__ import annotations

import asyncio
import datetime
import collections
import os
import random
import struct
import subprocess
import sys
import time

import pytest

from controller_impl.log import DIR_NAME
from loopdev import fill_up
from kafka_runtime.controller_client import MetadataReader, SimBroker, create_topic
from harness.run.local_processes import REPO, ControllerProcess
from kafka_common import framing, ids, wire
from kafka_common.metadata import records as r
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient
from kafka_runtime.events import read_events

pytestmark = pytest.mark.integration
RNG = random.Random(858)


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def read_metadata(proc) -> MetadataReader:
    """A reader caught up with the controller's committed metadata log (its connection closed)."""
    admin = await KafkaClient.connect("127.0.0.1", proc.port)
    reader = MetadataReader(admin)
    await reader.catch_up()
    await admin.close()
    return reader


def new_brokers(proc, n=2, dirs=3):
    return [SimBroker(b, [ids.random_directory_id(RNG) for _ in range(dirs)], cluster_id=proc.cluster_id)
            for b in range(1, n + 1)]


async def setup_cluster(proc, *, partitions=6, n=2, assign=True):
    """Register n brokers (3 dirs each), unfence them, create topic 't', assign replicas
    round-robin to dirs. Returns (brokers, admin client, reader, topic_id)."""
    brokers = new_brokers(proc, n)
    for b in brokers:
        await b.connect("127.0.0.1", proc.port)
        resp = await b.register()
        assert resp.error_code == ErrorCode.none, resp
    admin = await KafkaClient.connect("127.0.0.1", proc.port)
    reader = MetadataReader(admin)
    await unfence(brokers, reader)
    resp = await create_topic(admin, "t", partitions, 2)
    assert resp.topics[0].error_code == ErrorCode.none, resp
    await reader.catch_up()
    topic_id = reader.image.topic_ids["t"]
    if assign:
        parts = reader.image.partitions_of(topic_id)
        for b in brokers:
            mine = sorted(pid for pid, p in parts.items() if b.broker_id in p.replicas)
            plan = collections.defaultdict(list)
            for i, pid in enumerate(mine):
                plan[b.dirs[i % len(b.dirs)]].append((topic_id, pid))
            resp = await b.assign(plan)
            assert resp.error_code == ErrorCode.none, resp
        await reader.catch_up()
    return brokers, admin, reader, topic_id


async def unfence(brokers, reader):
    for _ in range(100):
        await reader.catch_up()
        fenced = False
        for b in brokers:
            resp = await b.heartbeat(reader.next_offset - 1)
            assert resp.error_code == ErrorCode.none, resp
            fenced |= resp.is_fenced
        if not fenced:
            await reader.catch_up()
            return
        await asyncio.sleep(0.02)
    raise AssertionError("brokers never unfenced")


async def close_all(brokers, *clients):
    for b in brokers:
        await b.close()
    for c in clients:
        await c.close()


def image_summary(image):
    return (dict(image.brokers), dict(image.topics),
            {(p.topic_id, p.partition_id): p for p in image.all_partitions()})


# -- the main flow --------------------------------------------------------------------------

# 3300 partitions: ~1100 replicas in the failed dir, a change big enough to be answered
# while the controller's image installs it (image_io.DEFERRED_INSTALL_MIN_RECORDS)
@pytest.mark.parametrize("partitions", [9, 3300])
def test_register_unfence_create_assign_and_dir_failure(controller, partitions):
    async def body():
        brokers, admin, reader, topic_id = await setup_cluster(controller, partitions=partitions)
        image = reader.image
        assert {b: (reg.fenced, len(reg.log_dirs)) for b, reg in image.brokers.items()} == \
            {1: (False, 3), 2: (False, 3)}
        before = dict(image.partitions_of(topic_id))
        assert all(ids.UNASSIGNED not in p.directories for p in before.values())
        failed = brokers[0].dirs[1]
        in_dir = {pid for pid, p in before.items() if 1 in p.replicas and p.directory(1) == failed}
        assert in_dir
        brokers[0].offline = [failed]
        resp = await brokers[0].heartbeat(reader.next_offset - 1)
        assert resp.error_code == ErrorCode.none
        hw_before = reader.next_offset
        await reader.catch_up()
        after = image.partitions_of(topic_id)
        for pid, p in after.items():
            if pid in in_dir:
                assert 1 not in p.isr and p.leader == 2, p
            else:
                assert p == before[pid]
        assert failed not in image.brokers[1].log_dirs
        new = [rec for off, rec in reader.records if off >= hw_before]
        assert sum(isinstance(x, r.PartitionChangeRecord) for x in new) == len(in_dir)
        assert sum(isinstance(x, r.BrokerRegistrationChangeRecord) for x in new) == 1
        # resent cumulative set: idempotent, no new records
        resp = await brokers[0].heartbeat(reader.next_offset - 1)
        assert resp.error_code == ErrorCode.none
        assert await reader.catch_up() == 0
        # the controller's next change starts from the registrations the failure left: with
        # broker 2 fenced, a partition of the failed dir keeps its last ISR member, leaderless
        resp = await brokers[1].heartbeat(reader.next_offset - 1, want_fence=True)
        assert resp.error_code == ErrorCode.none and resp.is_fenced
        await reader.catch_up()
        for pid, p in image.partitions_of(topic_id).items():
            if pid in in_dir:
                assert p.isr == (2,) and p.leader == -1, p
            else:
                assert 2 not in p.isr and p.leader == 1, p
        await close_all(brokers, admin)
        return in_dir, failed
    in_dir, failed = run(body())
    events = read_events(controller.events_path)
    kinds = collections.Counter(e["event"] for e in events)
    assert kinds["registered"] == 2 and kinds["unfenced"] == 2
    changes = [e for e in events if e["event"] == "partition_change" and e["reason"] == "log_dir_offline"]
    assert {e["partition"] for e in changes} == in_dir
    for e in changes:
        assert e["topic"] == "t" and e["leader"] == 2 and 1 not in e["isr"]
        assert len(e["directories"]) == 2 and ids.to_base64(failed) in e["directories"]
    assert controller.stop() == 0


def test_fetch_by_name_v12_and_by_topic_id_v13_plus_return_the_same_records(controller):
    async def body():
        brokers, admin, reader, _ = await setup_cluster(controller, partitions=3, assign=False)
        out = {}
        for v in (12, 13, 16):
            rd = MetadataReader(admin, version=v)
            await rd.catch_up()
            out[v] = rd.records
        # a wrong topic / partition gets an error, not records
        mod = wire.request_module(1, 13)
        bad = wire.make(wire.request_class(1, 13), replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                        max_bytes=1 << 20, topics=(mod.FetchTopic(topic_id=ids.uuid_of(5, 5), partitions=(
                            wire.make(mod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1000),)),),
                        forgotten_topics_data=())
        resp = await admin.request(bad)
        assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
        rd = MetadataReader(admin, version=12)
        rd.next_offset = 10**6
        with pytest.raises(RuntimeError, match="offset_out_of_range"):
            await rd.fetch_once(0)
        await close_all(brokers, admin)
        return out
    out = run(body())
    assert out[12] == out[13] == out[16] and len(out[12]) > 4
    assert [o for o, _ in out[12]] == list(range(len(out[12])))  # gap-free from 0


def test_long_poll_waits_and_a_commit_wakes_it_at_once(make_controller):
    # a wait cap far above any test time: only a wake-up can end the poll early
    proc = make_controller(metadata_fetch_max_wait_ms="60000")

    async def body():
        admin = await KafkaClient.connect("127.0.0.1", proc.port)
        reader = MetadataReader(admin)
        b = new_brokers(proc, 1)[0]
        await b.connect("127.0.0.1", proc.port)
        while reader.next_offset < 1:  # the leader's epoch-start record, once committed
            await reader.fetch_once(100)
        poll = asyncio.ensure_future(reader.fetch_once(60000))
        await asyncio.sleep(0.3)
        assert not poll.done()  # it is parked: nothing new committed yet
        t = time.monotonic()
        await b.register()
        got = await asyncio.wait_for(poll, 30)
        assert got >= 1 and time.monotonic() - t < 30
        await close_all([b], admin)
    run(body())


def test_long_poll_without_commits_returns_empty_after_max_wait(controller):
    async def body():
        admin = await KafkaClient.connect("127.0.0.1", controller.port)
        reader = MetadataReader(admin)
        while reader.next_offset < 1:  # the leader's epoch-start record, once committed
            await reader.fetch_once(100)
        t = time.monotonic()
        assert await reader.fetch_once(250) == 0
        waited = time.monotonic() - t
        await admin.close()
        return waited
    assert run(body()) >= 0.24


# -- durability ----------------------------------------------------------------------------

def test_kill9_mid_stream_then_restart_replays_every_acknowledged_change(controller):
    async def body():
        brokers, admin, reader, _ = await setup_cluster(controller, partitions=2, assign=False)
        # pipeline many CreateTopics; kill -9 the controller while they are in flight
        futs = []
        mod = wire.request_module(19, 7)
        for i in range(150):
            req = wire.make(wire.request_class(19, 7), topics=(mod.CreatableTopic(
                name=f"s{i}", num_partitions=2, replication_factor=2, assignments=(), configs=()),),
                timeout=datetime.timedelta(seconds=30), validate_only=False)
            futs.append(admin.send(req))
        acked = []
        for i, f in enumerate(futs):
            resp = await f
            if resp.topics[0].error_code == ErrorCode.none:
                acked.append(resp.topics[0].name)
            if i == 40:
                controller.kill()
                break
        await close_all(brokers)
        try:
            await admin.close()
        except Exception:
            pass
        return acked
    acked = run(body())
    assert len(acked) >= 41
    controller.start()
    reader = run(read_metadata(controller))
    for name in acked:
        assert name in reader.image.topic_ids, f"acknowledged topic {name} lost"
    offsets = [o for o, _ in reader.records]
    assert offsets == list(range(len(offsets)))


def test_restart_replays_to_the_same_image(controller):
    async def before():
        brokers, admin, reader, topic_id = await setup_cluster(controller, partitions=8)
        brokers[1].offline = [brokers[1].dirs[0]]
        assert (await brokers[1].heartbeat(reader.next_offset - 1)).error_code == ErrorCode.none
        await reader.catch_up()
        await close_all(brokers, admin)
        return reader
    first = run(before())
    controller.kill()
    controller.start()
    second = run(read_metadata(controller))
    assert image_summary(second.image) == image_summary(first.image)
    # the same log, plus the epoch-start record the restarted leader wrote (Kafka's LeaderChange)
    assert second.records[:len(first.records)] == first.records
    assert [type(r).__name__ for _, r in second.records[len(first.records):]] == ["NoOpRecord"]


def test_torn_last_batch_is_truncated_at_start_up(controller):
    async def write_some():
        brokers = new_brokers(controller, 3)
        for b in brokers:
            await b.connect("127.0.0.1", controller.port)
            assert (await b.register()).error_code == ErrorCode.none
        await close_all(brokers)
    run(write_some())
    assert controller.stop() == 0
    seg_dir = os.path.join(controller.metadata_dir, DIR_NAME)
    seg = os.path.join(seg_dir, sorted(os.listdir(seg_dir))[-1])
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.truncate(size - 7)  # the last registration's batch is now torn
    controller.start()

    async def check():
        admin = await KafkaClient.connect("127.0.0.1", controller.port)
        reader = MetadataReader(admin)
        await reader.catch_up()
        assert sorted(reader.image.brokers) == [1, 2]
        # the log goes on gap-free after the cut
        b = new_brokers(controller, 3)[2]
        await b.connect("127.0.0.1", controller.port)
        assert (await b.register()).error_code == ErrorCode.none
        await reader.catch_up()
        assert sorted(reader.image.brokers) == [1, 2, 3]
        assert [o for o, _ in reader.records] == list(range(len(reader.records)))
        await close_all([b], admin)
    run(check())
    events = read_events(controller.events_path)
    cut = [e for e in events if e["event"] == "metadata_log_truncated"]
    assert len(cut) == 1 and cut[0]["bytes"] > 0 and cut[0]["reason"]


# -- process behaviour -----------------------------------------------------------------------

def test_sigterm_exits_zero_and_bad_starts_exit_with_a_reason(make_controller, tmp_path):
    proc = make_controller()
    assert proc.alive() and proc.stop() == 0
    unformatted = ControllerProcess(str(tmp_path / "raw"))
    unformatted.write_config()
    out = subprocess.run([sys.executable, "-m", "controller_impl", unformatted.config_path], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "not formatted" in out.stderr
    bad = tmp_path / "bad.properties"
    bad.write_text("process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://127.0.0.1:1\n"
                   "metadata.log.dir=/tmp/x\nbroker.session.timeout.ms=-4\n")
    out = subprocess.run([sys.executable, "-m", "controller_impl", str(bad)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "broker.session.timeout.ms" in out.stderr and "-4" in out.stderr


def test_unsupported_version_keeps_connection_and_undecodable_frame_closes_it(controller):
    async def body():
        client = await KafkaClient.connect("127.0.0.1", controller.port)
        assert client.versions[1][0] <= 12 <= client.versions[1][1]
        assert 62 in client.versions and 73 in client.versions and 63 in client.versions
        hb0 = wire.make(wire.request_class(63, 0), broker_id=1, broker_epoch=1, current_metadata_offset=0,
                        want_fence=False, want_shut_down=False)
        assert (await client.request(hb0)).error_code == ErrorCode.unsupported_version
        assert (await client.negotiate())  # still usable
        client.send_raw(struct.pack(">hhi", 62, 3, 9) + b"\xde\xad")
        with pytest.raises(ClientError):
            await client.request(hb0, timeout_s=5)
        await client.close()
        again = await KafkaClient.connect("127.0.0.1", controller.port)
        await again.close()
    run(body())
    assert any(e["event"] == "bad_request" for e in read_events(controller.events_path))


def test_protocol_errors_from_the_state_machine_over_the_wire(controller):
    async def body():
        brokers, admin, reader, _ = await setup_cluster(controller, partitions=2, assign=False)
        b = brokers[0]
        stale = b.heartbeat_request(reader.next_offset - 1)
        stale = wire.make(type(stale), **{**{f: getattr(stale, f) for f in stale.__dataclass_fields__},
                                          "broker_epoch": b.epoch - 1})
        assert (await b.client.request(stale)).error_code == ErrorCode.stale_broker_epoch
        b.offline = [ids.random_directory_id(RNG)]  # not one of its dirs (D3)
        hw = reader.next_offset
        assert (await b.heartbeat(hw - 1)).error_code == ErrorCode.log_dir_not_found
        assert await reader.catch_up() == 0  # changed nothing
        wrong = SimBroker(7, [ids.random_directory_id(RNG)], cluster_id=ids.to_base64(ids.random_uuid(RNG)))
        await wrong.connect("127.0.0.1", controller.port)
        assert (await wrong.register()).error_code == ErrorCode.inconsistent_cluster_id
        empty = SimBroker(8, [], cluster_id=controller.cluster_id)
        await empty.connect("127.0.0.1", controller.port)
        assert (await empty.register()).error_code == ErrorCode.invalid_request  # D2
        await close_all(brokers + [wrong, empty], admin)
    run(body())



def test_metadata_dir_full_halts_the_controller_without_acknowledging(make_controller, small_tmpfs):
    proc = make_controller(start=False, metadata_log_dir=str(small_tmpfs / "meta"))
    proc.start()
    # fill the filesystem so that the next append fails with ENOSPC
    fill_up(small_tmpfs / "filler")

    async def body():
        # the log's last page may still have room: register until a write needs a new one
        acked = []
        for b in new_brokers(proc, 60):
            try:
                await b.connect("127.0.0.1", proc.port)
                code = (await b.register()).error_code
            except (ClientError, OSError):
                code = None
            finally:
                await b.close()
            if code != ErrorCode.none:
                return acked, b.broker_id
            acked.append(b.broker_id)
        return acked, None
    acked, refused = run(body())
    assert refused is not None  # the full disk refused one: never acknowledged
    assert proc.proc.wait(20) == 1
    events = read_events(proc.events_path)
    halts = [e for e in events if e["event"] == "halt"]
    assert len(halts) == 1 and "metadata log" in halts[0]["reason"]
    assert "halted" in proc.stderr()
    # room again: the controller restarts (any torn tail is cut) and nothing was committed
    os.unlink(small_tmpfs / "filler")
    proc.start()
    assert sorted(run(read_metadata(proc)).image.brokers) == sorted(acked)  # the acknowledged ones, not the refused one


def test_silent_broker_is_fenced_by_the_session_timer_and_loses_leaderships(make_controller):
    proc = make_controller(broker_session_timeout_ms="1500")

    async def body():
        brokers, admin, reader, topic_id = await setup_cluster(proc, partitions=4)
        led_by_2 = {pid for pid, p in reader.image.partitions_of(topic_id).items() if p.leader == 2}
        assert led_by_2
        # broker 1 keeps heartbeating, broker 2 goes silent
        for _ in range(60):
            await brokers[0].heartbeat(reader.next_offset - 1)
            await reader.fetch_once(0)
            if reader.image.brokers[2].fenced:
                break
            await asyncio.sleep(0.1)
        await reader.catch_up()
        assert reader.image.brokers[2].fenced and not reader.image.brokers[1].fenced
        for pid, p in reader.image.partitions_of(topic_id).items():
            assert p.leader == 1 and 2 not in p.isr, p
        resp = await brokers[1].heartbeat(reader.next_offset - 1)  # it comes back: still registered
        assert resp.error_code == ErrorCode.none
        await close_all(brokers, admin)
        return led_by_2
    led_by_2 = run(body())
    events = read_events(proc.events_path)
    fenced = [e for e in events if e["event"] == "fenced"]
    assert fenced and fenced[0]["broker_id"] == 2 and fenced[0]["reason"] == "session_timeout"
    moved = {e["partition"] for e in events if e["event"] == "partition_change" and e["reason"] == "session_timeout"
             and e["leader"] == 1}
    assert led_by_2 <= moved


def test_alter_partition_shrinks_the_isr_over_the_wire(controller):
    async def body():
        brokers, admin, reader, topic_id = await setup_cluster(controller, partitions=2)
        part = reader.image.partition(topic_id, 0)
        leader = next(b for b in brokers if b.broker_id == part.leader)
        mod = wire.request_module(56, 3)
        req = wire.request_class(56, 3)(broker_id=leader.broker_id, broker_epoch=leader.epoch, topics=(
            mod.TopicData(topic_id=topic_id, partitions=(mod.PartitionData(
                partition_index=0, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
                new_isr_with_epochs=(mod.BrokerState(broker_id=leader.broker_id, broker_epoch=leader.epoch),),
                leader_recovery_state=0),)),))
        resp = await leader.client.request(req)
        assert resp.error_code == ErrorCode.none
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none
        await reader.catch_up()
        assert reader.image.partition(topic_id, 0).isr == (leader.broker_id,)
        stale = await leader.client.request(req)  # same partition epoch again: now stale
        assert stale.topics[0].partitions[0].error_code == ErrorCode.invalid_update_version
        await close_all(brokers, admin)
    run(body())
    changes = [e for e in read_events(controller.events_path)
               if e["event"] == "partition_change" and e["reason"] == "alter_partition"]
    assert len(changes) == 1 and changes[0]["partition"] == 0


def test_an_idle_active_controller_writes_noop_records(make_controller):
    proc = make_controller(metadata_max_idle_interval_ms="100")

    async def body():
        admin = await KafkaClient.connect("127.0.0.1", proc.port)
        reader = MetadataReader(admin)
        await reader.catch_up()
        first = reader.next_offset
        await asyncio.sleep(1.0)
        await reader.catch_up()
        await admin.close()
        return first, reader
    first, reader = run(body())
    idle = [r for o, r in reader.records if o >= first]
    assert len(idle) >= 3 and all(type(r).__name__ == "NoOpRecord" for r in idle)
