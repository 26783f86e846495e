"""Idempotent-producer state of one partition (pure): Kafka's sequence rules, duplicates
answered with their original offsets, epochs, rebuild from batch headers (truncation), ids."""

from __future__ import annotations

import pytest

from broker_impl.state.producers import (DUPLICATE_WINDOW, MAX_SEQUENCE, Outcome, ProducerIdAllocator,
                                         ProducerState, SequencedBatch, last_sequence, next_sequence)
from kafka_common.batch_header import CONTROL_FLAG, BatchHeader

pytestmark = pytest.mark.unit


def append(state, pid, epoch, first, count, offset):
    """Leader path: check, then record what the log wrote."""
    last = last_sequence(first, count - 1)
    verdict = state.check(pid, epoch, first, last)
    if verdict.outcome is Outcome.APPEND:
        state.record(pid, epoch, first, last, offset, offset + count - 1)
    return verdict


def header(pid, epoch, first_seq, count, base_offset, attributes=0) -> BatchHeader:
    return BatchHeader(base_offset=base_offset, batch_length=100, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=count - 1, base_timestamp=0, max_timestamp=0,
                       producer_id=pid, producer_epoch=epoch, base_sequence=first_seq, record_count=count)


def test_in_order_batches_append_and_gaps_are_out_of_order():
    s = ProducerState()
    assert append(s, 7, 0, 0, 3, 0).outcome is Outcome.APPEND
    assert append(s, 7, 0, 3, 2, 3).outcome is Outcome.APPEND
    v = append(s, 7, 0, 6, 1, 5)
    assert v.outcome is Outcome.OUT_OF_ORDER and "expected sequence 5" in v.message
    assert append(s, 7, 0, 5, 1, 5).outcome is Outcome.APPEND
    assert s.entry(7).last_seq == 5 and s.entry(7).epoch == 0


def test_duplicates_within_the_last_5_batches_answer_the_original_offsets():
    s = ProducerState()
    for i in range(DUPLICATE_WINDOW + 1):          # batches seq 0-1 @100, 2-3 @102, … 10-11 @110
        append(s, 1, 0, i * 2, 2, 100 + i * 2)
    for i in range(1, DUPLICATE_WINDOW + 1):       # each of the last 5 → its own offsets
        v = s.check(1, 0, i * 2, i * 2 + 1)
        assert v.outcome is Outcome.DUPLICATE
        assert (v.duplicate_of.first_offset, v.duplicate_of.last_offset) == (100 + i * 2, 101 + i * 2)
        rv = s.check_batches([SequencedBatch(1, 0, i * 2, i * 2 + 1)])
        assert (rv.outcome, rv.first_offset, rv.last_offset) == (Outcome.DUPLICATE, 100 + i * 2, 101 + i * 2)
    # the oldest batch fell out of the window: no longer recognised, and not next → out of order
    assert s.check(1, 0, 0, 1).outcome is Outcome.OUT_OF_ORDER
    # a batch with the same first but another last sequence is not a duplicate
    assert s.check(1, 0, 2, 4).outcome is Outcome.OUT_OF_ORDER


def test_unknown_producer_is_accepted_at_any_sequence_and_non_idempotent_never_checked():
    s = ProducerState()
    assert s.check(9, 0, 42, 50).outcome is Outcome.APPEND   # e.g. its batches are older than the scanned tail
    assert s.check(-1, -1, -1, -1).outcome is Outcome.APPEND
    s.record(-1, -1, -1, -1, 0, 0)
    s.record_header(header(-1, -1, -1, 3, 0))
    assert len(s) == 0


def test_epoch_bump_restarts_at_zero_and_old_epochs_are_fenced():
    s = ProducerState()
    append(s, 3, 1, 0, 5, 0)
    assert s.check(3, 0, 5, 5).outcome is Outcome.FENCED_EPOCH
    v = s.check(3, 2, 5, 5)
    assert v.outcome is Outcome.OUT_OF_ORDER and "new epoch 2 must start at sequence 0" in v.message
    assert append(s, 3, 2, 0, 1, 5).outcome is Outcome.APPEND
    assert s.entry(3).epoch == 2 and [b.first_offset for b in s.entry(3).batches] == [5]  # old epoch's window gone
    assert s.check(3, 2, 1, 1).outcome is Outcome.APPEND
    assert s.check(3, 1, 5, 5).outcome is Outcome.FENCED_EPOCH
    # a replicated batch of the older epoch (a zombie write) does not roll the state back
    s.record(3, 1, 5, 5, 6, 6)
    assert s.entry(3).epoch == 2 and s.entry(3).last_seq == 0


def test_values_appended_one_by_one_cannot_come_again_as_one_batch_in_the_same_epoch():
    """The lab's S15 duplicates (tests/system/test_system.py DUPLICATES): 12 values of one producer
    appended as 12 one-record batches, then the same 12 as ONE batch. In the same epoch that
    batch matches no remembered batch and does not continue the sequence, so it is refused
    (never appended twice); only a bumped epoch starting at 0 — a new producer to the broker —
    appends it, which is what librdkafka sends after its drain-and-bump on a message timeout."""
    s = ProducerState()
    append(s, 7, 0, 0, 20, 0)
    for i in range(12):
        assert append(s, 7, 0, 20 + i, 1, 20 + i).outcome is Outcome.APPEND
    assert append(s, 7, 0, 20, 12, 32).outcome is Outcome.OUT_OF_ORDER
    assert append(s, 7, 1, 0, 12, 32).outcome is Outcome.APPEND


def test_sequence_wraps_around_int32():
    assert next_sequence(MAX_SEQUENCE) == 0
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 1
    s = ProducerState()
    append(s, 4, 0, MAX_SEQUENCE - 1, 2, 0)
    assert s.check(4, 0, 0, 0).outcome is Outcome.APPEND


def test_check_batches_of_one_request():
    s = ProducerState()
    append(s, 5, 0, 0, 2, 0)                       # seq 0-1 at offsets 0-1
    # consecutive batches of one producer in one request continue each other
    assert s.check_batches([SequencedBatch(5, 0, 2, 2), SequencedBatch(5, 0, 3, 4)]).outcome is Outcome.APPEND
    # a gap inside the request
    v = s.check_batches([SequencedBatch(5, 0, 2, 2), SequencedBatch(5, 0, 9, 9)])
    assert v.outcome is Outcome.OUT_OF_ORDER and "expected sequence 3, got 9" in v.message
    # a duplicate mixed with a new batch cannot come from a correct producer
    v = s.check_batches([SequencedBatch(5, 0, 0, 1), SequencedBatch(5, 0, 2, 2)])
    assert v.outcome is Outcome.OUT_OF_ORDER and "mixes" in v.message
    assert s.check_batches([SequencedBatch(5, 1, 0, 0)]).outcome is Outcome.APPEND     # epoch bump
    assert s.check_batches([SequencedBatch(5, 0, 2, 2)]).outcome is Outcome.APPEND  # same epoch 0 → next
    assert s.check_batches([SequencedBatch(-1, -1, -1, -1)] * 2).outcome is Outcome.APPEND
    assert s.check_batches([]).outcome is Outcome.APPEND


def test_follower_headers_feed_the_state_so_a_new_leader_knows_the_producer():
    """What a follower records from replicated batches is what the leader recorded: after a
    leader change the retried batch is a duplicate with its original offsets."""
    leader, follower = ProducerState(), ProducerState()
    offset = 0
    for seq in range(0, 12, 3):
        append(leader, 77, 2, seq, 3, offset)
        follower.record_header(header(77, 2, seq, 3, offset))
        offset += 3
    assert follower.entry(77) == leader.entry(77)
    v = follower.check_batches([SequencedBatch(77, 2, 9, 11)])
    assert (v.outcome, v.first_offset, v.last_offset) == (Outcome.DUPLICATE, 9, 11)
    assert follower.check(77, 2, 12, 12).outcome is Outcome.APPEND
    assert follower.check(77, 2, 13, 13).outcome is Outcome.OUT_OF_ORDER   # known: no longer lenient
    follower.record_header(header(77, 2, 12, 1, 12, attributes=CONTROL_FLAG))   # control batches are not sequences
    assert follower.entry(77).last_seq == 11


def test_truncation_rebuild_forgets_batches_above_the_truncation_point():
    """The log truncated at offset 6 rebuilds the state from the headers that remain: the
    batch at 6.. is no longer a duplicate (it must be appended again), the producer that only
    wrote above the point is unknown again."""
    log = [header(1, 0, 0, 3, 0), header(1, 0, 3, 3, 3), header(2, 0, 0, 1, 6), header(1, 0, 6, 3, 7)]
    s = ProducerState()
    s.rebuild(log)
    assert s.check_batches([SequencedBatch(1, 0, 6, 8)]).first_offset == 7
    s.rebuild([h for h in log if h.last_offset < 6])
    assert s.check(1, 0, 6, 8).outcome is Outcome.APPEND                 # no longer a duplicate
    assert s.entry(1).last_seq == 5 and s.entry(2) is None
    assert s.check(2, 0, 17, 17).outcome is Outcome.APPEND               # unknown again: lenient
    s.rebuild([])
    assert len(s) == 0


def test_rebuild_of_a_long_history_keeps_the_last_5_and_the_same_batch_twice_is_recorded_once():
    s = ProducerState()
    s.rebuild(header(4, 0, i, 1, i) for i in range(20))
    assert [b.first_seq for b in s.entry(4).batches] == [15, 16, 17, 18, 19]
    s.record_header(header(4, 0, 19, 1, 19))
    assert [b.first_seq for b in s.entry(4).batches] == [15, 16, 17, 18, 19]


def test_eviction_is_bounded():
    s = ProducerState(max_producers=2)
    s.record(1, 0, 0, 0, 0, 0)
    s.record(2, 0, 0, 0, 1, 1)
    s.record(1, 0, 1, 1, 2, 2)        # 1 written most recently
    s.record(3, 0, 0, 0, 3, 3)        # evicts 2
    assert len(s) == 2 and s.entry(2) is None and s.entry(1) is not None
    with pytest.raises(ValueError):
        ProducerState(max_producers=0)


def test_producer_id_allocator_bumps_known_epochs_and_hands_out_fresh_ids():
    a = ProducerIdAllocator(1 << 32, block_size=2)
    first = a.init()
    assert (first.producer_id, first.epoch) == (1 << 32, 0)
    bumped = a.init(first.producer_id, 0)
    assert (bumped.producer_id, bumped.epoch) == (1 << 32, 1)
    stale = a.init(first.producer_id, 0)            # not the current epoch → a new id
    assert stale.producer_id == (1 << 32) + 1
    with pytest.raises(OverflowError):
        a.init()
