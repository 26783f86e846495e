"""Idempotent-producer state (pure): Kafka's sequence rules, duplicates, epochs, ids."""

from __future__ import annotations

import pytest

from broker_impl.state.producers import (DUPLICATE_WINDOW, MAX_SEQUENCE, Outcome, ProducerIdAllocator,
                                         ProducerStateTable, last_sequence, next_sequence)

pytestmark = pytest.mark.unit
P = ("topic-id", 0)


def append(table, pid, epoch, first, count, offset):
    last = last_sequence(first, count - 1)
    verdict = table.check(P, pid, epoch, first, last)
    if verdict.outcome is Outcome.APPEND:
        table.record(P, pid, epoch, first, last, offset, offset + count - 1)
    return verdict


def test_in_order_batches_append_and_gaps_are_out_of_order():
    t = ProducerStateTable()
    assert append(t, 7, 0, 0, 3, 0).outcome is Outcome.APPEND
    assert append(t, 7, 0, 3, 2, 3).outcome is Outcome.APPEND
    v = append(t, 7, 0, 6, 1, 5)
    assert v.outcome is Outcome.OUT_OF_ORDER and "expected sequence 5" in v.message
    assert append(t, 7, 0, 5, 1, 5).outcome is Outcome.APPEND


def test_duplicates_within_the_window_answer_the_original_offsets():
    t = ProducerStateTable()
    for i in range(DUPLICATE_WINDOW + 1):
        append(t, 1, 0, i * 2, 2, 100 + i * 2)
    v = t.check(P, 1, 0, 2, 3)
    assert v.outcome is Outcome.DUPLICATE and (v.duplicate_of.first_offset, v.duplicate_of.last_offset) == (102, 103)
    # the oldest batch fell out of the window: no longer recognised, and not next → out of order
    assert t.check(P, 1, 0, 0, 1).outcome is Outcome.OUT_OF_ORDER


def test_unknown_producer_is_accepted_at_any_sequence_and_non_idempotent_never_checked():
    t = ProducerStateTable()
    assert t.check(P, 9, 0, 42, 50).outcome is Outcome.APPEND   # e.g. after a leader fail-over
    assert t.check(P, -1, -1, -1, -1).outcome is Outcome.APPEND
    t.record(P, -1, -1, -1, -1, 0, 0)
    assert len(t) == 0


def test_epochs_fence_old_and_restart_new_at_zero():
    t = ProducerStateTable()
    append(t, 3, 1, 0, 5, 0)
    assert t.check(P, 3, 0, 5, 5).outcome is Outcome.FENCED_EPOCH
    assert t.check(P, 3, 2, 5, 5).outcome is Outcome.OUT_OF_ORDER
    assert append(t, 3, 2, 0, 1, 5).outcome is Outcome.APPEND
    assert t.check(P, 3, 2, 1, 1).outcome is Outcome.APPEND


def test_sequence_wraps_around_int32():
    assert next_sequence(MAX_SEQUENCE) == 0
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 1
    t = ProducerStateTable()
    append(t, 4, 0, MAX_SEQUENCE - 1, 2, 0)
    assert t.check(P, 4, 0, 0, 0).outcome is Outcome.APPEND


def test_partitions_are_independent_and_eviction_is_bounded():
    t = ProducerStateTable(max_entries=2)
    t.record(("a", 0), 1, 0, 0, 0, 0, 0)
    t.record(("a", 1), 1, 0, 0, 4, 0, 4)
    assert t.check(("a", 0), 1, 0, 1, 1).outcome is Outcome.APPEND
    assert t.check(("a", 1), 1, 0, 1, 1).outcome is Outcome.OUT_OF_ORDER
    t.record(("b", 0), 2, 0, 0, 0, 0, 0)
    assert len(t) == 2
    t.forget_partition(("b", 0))
    assert len(t) == 1
    with pytest.raises(ValueError):
        ProducerStateTable(max_entries=0)


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
