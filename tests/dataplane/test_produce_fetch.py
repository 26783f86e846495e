"""Produce and Fetch at the protocol level against the real listener: error codes, acks
0/1/all with the delayed-produce purgatory, idempotent sequences, long-poll, follower fetch."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from kafka_common import batch_header as bh
from kafka_common import wire
from kafka_common.metadata import records as r
from tests.dataplane.inprocess_broker import Broker
from testkit.protocol import RawConnection, fetch_request, init_producer_id_request, make_batch, produce_request

pytestmark = pytest.mark.integration


def _perr(resp):
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


@pytest.fixture
def broker3(tmp_path, loop_thread):
    """Broker 1 with registered peers 2 and 3 (their Fetch requests are sent by the test)."""
    b = Broker(tmp_path, peers=(2, 3))
    b.loop = loop_thread
    loop_thread.run(b.start())
    yield b
    loop_thread.run(b.stop())
    assert b.server.stats["handler_errors"] == 0, b.server_log


def test_produce_errors_and_success(broker):
    async def go():
        await broker.create_topic("p", 1)
        await broker.create_topic("led-elsewhere", 1)
        tid = broker.image.topic_ids["led-elsewhere"]
        c = await RawConnection.open(broker.server.port)
        try:
            batch = make_batch([b"a", b"b", b"c"])
            assert _perr(await c.call(produce_request(9, "nope", 0, batch))) == (ErrorCode.unknown_topic_or_partition, -1)
            assert _perr(await c.call(produce_request(9, "p", 7, batch)))[0] is ErrorCode.unknown_topic_or_partition
            assert _perr(await c.call(produce_request(9, "p", 0, batch, acks=2)))[0] is ErrorCode.invalid_required_acks
            legacy = make_batch([b"x"], magic=1)
            assert _perr(await c.call(produce_request(9, "p", 0, legacy)))[0] is ErrorCode.unsupported_for_message_format
            corrupt = bytearray(batch)
            corrupt[-1] ^= 0xFF
            assert _perr(await c.call(produce_request(9, "p", 0, bytes(corrupt))))[0] is ErrorCode.corrupt_message
            assert _perr(await c.call(produce_request(9, "p", 0, batch))) == (ErrorCode.none, 0)
            assert _perr(await c.call(produce_request(3, "p", 0, batch))) == (ErrorCode.none, 3)
            # leadership moves away in metadata → NOT_LEADER_OR_FOLLOWER
            broker.feed.append(r.PartitionChangeRecord(partition_id=0, topic_id=tid, leader=3, isr=(3,),
                                                       replicas=(1, 3), directories=(broker.dir_ids[0], broker.dir_ids[0])))
            assert _perr(await c.call(produce_request(9, "led-elsewhere", 0, batch)))[0] is ErrorCode.not_leader_or_follower
        finally:
            await c.close()
        log = broker.lm.get_log("p", 0)
        assert (log.log_end_offset, log.high_watermark) == (6, 6)
        data = log.read(0, 1 << 20, None)
        assert [h.base_offset for _p, h in bh.iter_batches(data)] == [0, 3]
    broker.loop.run(go())


def test_acks_zero_sends_no_response_and_connection_stays_in_order(broker):
    async def go():
        await broker.create_topic("z", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            c.send(produce_request(9, "z", 0, make_batch([b"fire-and-forget"]), acks=0))
            meta = await c.call(wire.make(wire.request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
            assert [t.name for t in meta.topics] == ["z"]  # the next answer is Metadata's: none for acks=0
        finally:
            await c.close()
        assert broker.lm.get_log("z", 0).log_end_offset == 1
    broker.loop.run(go())


def test_offline_dir_gives_storage_error_on_produce_fetch_list_offsets(broker):
    async def go():
        await broker.create_topic("off", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            assert _perr(await c.call(produce_request(9, "off", 0, make_batch([b"1"]))))[0] is ErrorCode.none
            broker.lm.mark_offline(broker.lm.dir_set.data_dirs[0].path)  # what the runtime does on EIO
            assert _perr(await c.call(produce_request(9, "off", 0, make_batch([b"2"]))))[0] is ErrorCode.kafka_storage_error
            f = await c.call(fetch_request(12, "off", 0, 0))
            assert f.responses[0].partitions[0].error_code is ErrorCode.kafka_storage_error
            for old in (2, 5):   # Kafka 3.9: Fetch ≤ 5 gets NOT_LEADER_OR_FOLLOWER (old clients retry it)
                f = await c.call(fetch_request(old, "off", 0, 0))
                assert f.responses[0].partitions[0].error_code is ErrorCode.not_leader_or_follower
            lo0 = wire.request_module(2, 0)
            lo = await c.call(wire.request_class(2, 0)(replica_id=-1, topics=(lo0.ListOffsetsTopic(
                name="off", partitions=(lo0.ListOffsetsPartition(partition_index=0, timestamp=-1,
                                                                 max_num_offsets=1),)),)))
            assert lo.topics[0].partitions[0].error_code is ErrorCode.kafka_storage_error
            lo_mod = wire.request_module(2, 7)
            lo = await c.call(wire.request_class(2, 7)(replica_id=-1, isolation_level=0, topics=(
                lo_mod.ListOffsetsTopic(name="off", partitions=(lo_mod.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)))
            assert lo.topics[0].partitions[0].error_code is ErrorCode.kafka_storage_error
        finally:
            await c.close()
    broker.loop.run(go())


def test_acks_all_waits_for_the_isr_then_completes(broker3):
    b = broker3

    async def go():
        tid = await b.create_topic("rep", 1, replicas=(1, 2))
        c = await RawConnection.open(b.server.port)
        follower = await RawConnection.open(b.server.port)
        try:
            cid = c.send(produce_request(9, "rep", 0, make_batch([b"a", b"b"]), acks=-1, timeout_ms=20_000))
            pending = asyncio.ensure_future(c.receive(wire.response_class(0, 9)))
            await asyncio.sleep(0.2)
            assert not pending.done()                       # ISR {1,2}: waits for replica 2
            consumer = await follower.call(fetch_request(12, "rep", 0, 0))
            assert consumer.responses[0].partitions[0].records in (b"", None)   # HW still 0
            f = await follower.call(fetch_request(16, tid, 0, 0, replica_id=2))
            data = f.responses[0].partitions[0].records
            assert [h.base_offset for _p, h in bh.iter_batches(data)] == [0]     # up to the LEO
            assert not pending.done()
            f2 = await follower.call(fetch_request(16, tid, 0, 2, replica_id=2))  # follower has 0..1
            assert f2.responses[0].partitions[0].high_watermark == 2
            got_cid, resp = await pending
            assert got_cid == cid and _perr(resp) == (ErrorCode.none, 0)
        finally:
            await c.close()
            await follower.close()
    b.loop.run(go())


def _set_topic_config(topic: str, name: str, value: str):
    """An IncrementalAlterConfigs request (SET) for one topic config."""
    mod = wire.request_module(44, 1)
    return wire.make(wire.request_class(44, 1), resources=(mod.AlterConfigsResource(
        resource_type=2, resource_name=topic, configs=(mod.AlterableConfig(
            name=name, config_operation=0, value=value),)),), validate_only=False)


def test_acks_all_times_out_and_min_isr_is_enforced(broker3):
    b = broker3

    async def go():
        await b.create_topic("slow", 1, replicas=(1, 2))
        await b.create_topic("alone", 1, replicas=(1,))
        c = await RawConnection.open(b.server.port)
        try:
            resp = await c.call(produce_request(9, "slow", 0, make_batch([b"x"]), acks=-1, timeout_ms=300))
            assert _perr(resp)[0] is ErrorCode.request_timed_out
            # the view caches the configs in force; a change must be seen at the next produce
            resp = await c.call(produce_request(9, "alone", 0, make_batch([b"x"]), acks=-1))
            assert _perr(resp) == (ErrorCode.none, 0)
            await b.controller.alter_configs(_set_topic_config("alone", "min.insync.replicas", "2"))
            resp = await c.call(produce_request(9, "alone", 0, make_batch([b"x"]), acks=-1))
            assert _perr(resp)[0] is ErrorCode.not_enough_replicas
            resp = await c.call(produce_request(9, "alone", 0, make_batch([b"x"]), acks=1))
            assert _perr(resp) == (ErrorCode.none, 1)   # acks=1 does not need min ISR
            await b.controller.alter_configs(_set_topic_config("alone", "min.insync.replicas", "1"))
            resp = await c.call(produce_request(9, "alone", 0, make_batch([b"x"]), acks=-1))
            assert _perr(resp) == (ErrorCode.none, 2)
        finally:
            await c.close()
    b.loop.run(go())


def test_idempotent_sequences(broker):
    async def go():
        await broker.create_topic("idem", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            init = await c.call(init_producer_id_request())
            assert init.error_code is ErrorCode.none and init.producer_id >= 0
            pid, epoch = init.producer_id, init.producer_epoch

            def batch(seq, n):
                return make_batch([b"v%d" % i for i in range(n)], producer_id=pid, epoch=epoch, base_seq=seq)

            assert _perr(await c.call(produce_request(9, "idem", 0, batch(0, 3)))) == (ErrorCode.none, 0)
            assert _perr(await c.call(produce_request(9, "idem", 0, batch(0, 3)))) == (ErrorCode.none, 0)  # dup
            assert _perr(await c.call(produce_request(9, "idem", 0, batch(5, 1))))[0] is ErrorCode.out_of_order_sequence_number
            assert _perr(await c.call(produce_request(9, "idem", 0, batch(3, 2)))) == (ErrorCode.none, 3)
            old = make_batch([b"z"], producer_id=pid, epoch=epoch - 1 if epoch > 0 else -1, base_seq=5)
            if epoch > 0:
                assert _perr(await c.call(produce_request(9, "idem", 0, old)))[0] is ErrorCode.invalid_producer_epoch
        finally:
            await c.close()
        assert broker.lm.get_log("idem", 0).log_end_offset == 5   # the duplicate was not appended
    broker.loop.run(go())


def test_fetch_long_poll_returns_data_appended_while_waiting(broker):
    async def go():
        tid = await broker.create_topic("poll", 1)
        consumer = await RawConnection.open(broker.server.port)
        producer = await RawConnection.open(broker.server.port)
        try:
            empty = await consumer.call(fetch_request(12, "poll", 0, 0, max_wait_ms=50))
            assert empty.responses[0].partitions[0].error_code is ErrorCode.none
            assert not empty.responses[0].partitions[0].records
            consumer.send(fetch_request(16, tid, 0, 0, max_wait_ms=15_000))
            waiting = asyncio.ensure_future(consumer.receive(wire.response_class(1, 16)))
            await asyncio.sleep(0.2)
            assert not waiting.done()                  # max_wait honoured: no busy answer
            assert _perr(await producer.call(produce_request(9, "poll", 0, make_batch([b"wake"]), acks=1)))[0] is ErrorCode.none
            _cid, resp = await waiting
            part = resp.responses[0].partitions[0]
            assert resp.responses[0].topic_id == tid and part.high_watermark == 1
            assert [h.record_count for _p, h in bh.iter_batches(part.records)] == [1]
            bad = await consumer.call(fetch_request(16, __import__("uuid").UUID(int=99 << 64), 0, 0))
            assert bad.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_id
            oor = await consumer.call(fetch_request(12, "poll", 0, 5))
            assert oor.responses[0].partitions[0].error_code is ErrorCode.offset_out_of_range
        finally:
            await consumer.close()
            await producer.close()
    broker.loop.run(go())


def test_fetch_returns_whole_batches_from_fetch_offset_and_respects_max_bytes(broker):
    async def go():
        await broker.create_topic("whole", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            for i in range(4):
                assert _perr(await c.call(produce_request(9, "whole", 0, make_batch([b"x" * 1000] * 3), acks=1)))[0] is ErrorCode.none
            # offset 4 is inside the second batch (3..5): whole batches from there
            f = await c.call(fetch_request(12, "whole", 0, 4))
            assert [h.base_offset for _p, h in bh.iter_batches(f.responses[0].partitions[0].records)] == [3, 6, 9]
            tiny = await c.call(fetch_request(12, "whole", 0, 0, max_bytes=10))   # at least one batch
            assert [h.base_offset for _p, h in bh.iter_batches(tiny.responses[0].partitions[0].records)] == [0]
        finally:
            await c.close()
    broker.loop.run(go())


def test_leader_epoch_checks_and_diverging_epoch_for_followers(broker3):
    b = broker3

    async def go():
        tid = await b.create_topic("ep", 1, replicas=(1, 2))
        c = await RawConnection.open(b.server.port)
        try:
            resp = await c.call(produce_request(9, "ep", 0, make_batch([b"a", b"b", b"c"]), acks=1))   # epoch 0: 0..2
            assert _perr(resp) == (ErrorCode.none, 0)
            b.feed.append(r.PartitionChangeRecord(partition_id=0, topic_id=tid, leader=1))            # epoch 1
            resp = await c.call(produce_request(9, "ep", 0, make_batch([b"d", b"e"]), acks=1))        # epoch 1: 3..4
            assert _perr(resp) == (ErrorCode.none, 3)

            async def fetch(**kw):
                f = await c.call(fetch_request(16, tid, 0, kw.pop("offset"), **kw))
                return f.responses[0].partitions[0]
            assert (await fetch(offset=0, current_leader_epoch=0)).error_code is ErrorCode.fenced_leader_epoch
            assert (await fetch(offset=0, current_leader_epoch=7)).error_code is ErrorCode.unknown_leader_epoch
            # a follower that kept epoch-0 records up to offset 5 diverged at 3: truncate there
            p = await fetch(offset=5, replica_id=2, current_leader_epoch=1, last_fetched_epoch=0)
            assert p.error_code is ErrorCode.none and not p.records
            assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 3)
            # a follower in step gets records up to the LEO
            p = await fetch(offset=3, replica_id=2, current_leader_epoch=1, last_fetched_epoch=0)
            assert p.diverging_epoch.epoch == -1
            assert [h.base_offset for _p, h in bh.iter_batches(p.records)] == [3]
            assert [h.partition_leader_epoch for _p, h in bh.iter_batches(p.records)] == [1]
        finally:
            await c.close()
    b.loop.run(go())


def test_delayed_produce_completes_on_isr_shrink_and_fails_on_leader_move(broker3):
    b = broker3

    async def go():
        tid = await b.create_topic("moving", 2, replicas=(1, 2))
        c1 = await RawConnection.open(b.server.port)
        c2 = await RawConnection.open(b.server.port)
        try:
            c1.send(produce_request(9, "moving", 0, make_batch([b"a"]), acks=-1, timeout_ms=20_000))
            c2.send(produce_request(9, "moving", 1, make_batch([b"b"]), acks=-1, timeout_ms=20_000))
            w1 = asyncio.ensure_future(c1.receive(wire.response_class(0, 9)))
            w2 = asyncio.ensure_future(c2.receive(wire.response_class(0, 9)))
            await asyncio.sleep(0.2)
            assert not w1.done() and not w2.done()
            # the controller drops lagging replica 2 from partition 0's ISR: the HW reaches the batch
            b.feed.append(r.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=(1,)))
            assert _perr((await asyncio.wait_for(w1, 10))[1]) == (ErrorCode.none, 0)
            # partition 1's leadership moves to broker 2 before the ISR had the batch
            b.feed.append(r.PartitionChangeRecord(partition_id=1, topic_id=tid, leader=2, isr=(2,)))
            assert _perr((await asyncio.wait_for(w2, 10))[1])[0] is ErrorCode.not_leader_or_follower
        finally:
            await c1.close()
            await c2.close()
    b.loop.run(go())


def test_replica_fetch_from_a_non_replica_is_refused(broker3):
    b = broker3

    async def go():
        tid = await b.create_topic("pair", 1, replicas=(1, 2))
        c = await RawConnection.open(b.server.port)
        try:
            assert _perr(await c.call(produce_request(9, "pair", 0, make_batch([b"a"]), acks=1)))[0] is ErrorCode.none
            f = await c.call(fetch_request(16, tid, 0, 0, replica_id=3))
            assert f.responses[0].partitions[0].error_code is ErrorCode.not_leader_or_follower
            assert (tid, 0, 3) not in b.view.follower_leo
            f = await c.call(fetch_request(16, tid, 0, 1, replica_id=2))
            assert f.responses[0].partitions[0].error_code is ErrorCode.none and b.view.follower_leo[(tid, 0, 2)] == 1
        finally:
            await c.close()
    b.loop.run(go())


def test_one_request_with_consecutive_batches_of_one_producer(broker):
    async def go():
        await broker.create_topic("two", 1)
        c = await RawConnection.open(broker.server.port)
        try:
            first = make_batch([b"a", b"b"], producer_id=5, epoch=0, base_seq=0)
            second = make_batch([b"c"], producer_id=5, epoch=0, base_seq=2)
            assert _perr(await c.call(produce_request(9, "two", 0, first + second))) == (ErrorCode.none, 0)
            third = make_batch([b"d"], producer_id=5, epoch=0, base_seq=3)
            assert _perr(await c.call(produce_request(9, "two", 0, third))) == (ErrorCode.none, 3)
            gap = make_batch([b"e"], producer_id=5, epoch=0, base_seq=4) + make_batch([b"f"], producer_id=5, epoch=0, base_seq=9)
            assert _perr(await c.call(produce_request(9, "two", 0, gap)))[0] is ErrorCode.out_of_order_sequence_number
        finally:
            await c.close()
        assert broker.lm.get_log("two", 0).log_end_offset == 4
    broker.loop.run(go())
