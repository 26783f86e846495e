"""Leader ISR/HW bookkeeping (behaviour §3 data plane; Kafka's Partition ISR rules)."""
import pytest

from broker_impl.state.isr import (EXPAND_RETRY_BACKOFF_MS, INELIGIBLE_REPLICA, NONE, NOT_ENOUGH_REPLICAS, LeaderIsr,
                                   SendAlterPartition)
from broker_state_helpers import ME, T1, reg

pytestmark = pytest.mark.unit
LAG = 30_000


def leader(isr=(ME, 2, 3), leo=10, hw=10, now=0):
    return LeaderIsr.become_leader(ME, reg(isr=isr, leader_epoch=4, partition_epoch=7), leo=leo, high_watermark=hw,
                                   lag_time_max_ms=LAG, now_ms=now)


def test_hw_is_min_leo_of_isr():
    l = leader()
    assert l.on_leader_append(15, 1) is False          # followers at unknown LEO hold the HW
    l.on_follower_fetch(2, 15, 2)
    _, moved = l.on_follower_fetch(3, 12, 3)
    assert moved and l.high_watermark == 12
    assert l.is_replicated(11) and not l.is_replicated(12)
    _, moved = l.on_follower_fetch(3, 15, 4)
    assert moved and l.high_watermark == 15


def test_single_member_isr_commits_on_append():
    l = leader(isr=(ME,))
    assert l.on_leader_append(11, 1) and l.high_watermark == 11


def test_acks_all_needs_min_insync():
    l = leader(isr=(ME, 2))
    assert l.check_acks_all(2) == NONE and l.check_acks_all(3) == NOT_ENOUGH_REPLICAS


def test_shrink_after_lag_time_and_one_in_flight():
    l = leader()
    l.on_leader_append(20, 0)
    for t in range(0, LAG + 2, 5000):
        l.on_follower_fetch(2, 20, t)               # 2 keeps up, 3 never fetches
    assert l.tick(LAG) == []                         # not yet: > lag
    [a] = l.tick(LAG + 1)
    assert a == SendAlterPartition(T1, 0, 4, 7, (ME, 2))
    assert l.tick(LAG + 5000) == []                  # one in flight
    assert l.maximal_isr == (ME, 2, 3)               # 3 still counts for the HW until committed
    l.on_alter_partition_response(NONE, LAG + 10, reg(isr=(ME, 2), leader_epoch=4, partition_epoch=8))
    assert l.isr == (ME, 2) and l.partition_epoch == 8 and l.pending is None
    assert l.high_watermark == 20                    # no longer held back by 3


def test_follower_behind_but_reaching_previous_leo_counts_as_caught_up_then():
    l = leader(isr=(ME, 2))
    l.on_leader_append(100, 0)
    l.on_follower_fetch(2, 50, 10_000)               # leader LEO at that fetch: 100
    l.on_leader_append(200, 10_001)
    l.on_follower_fetch(2, 100, 35_000)              # reached the LEO of its previous fetch
    assert l.out_of_sync(40_000) == ()               # caught up as of 10_000 (+ 30_000 lag)
    assert l.out_of_sync(40_001) == (2,)


def test_expand_when_follower_reaches_hw():
    l = leader(isr=(ME, 2), leo=50, hw=50)
    l.on_follower_fetch(2, 50, 1)
    out, _ = l.on_follower_fetch(3, 40, 2)
    assert out == []
    out, _ = l.on_follower_fetch(3, 50, 3)
    assert out == [SendAlterPartition(T1, 0, 4, 7, (ME, 2, 3))]
    assert l.maximal_isr == (ME, 2, 3)
    # the committed metadata arrives before the response
    l.on_metadata(reg(isr=(ME, 2, 3), leader_epoch=4, partition_epoch=8))
    assert l.pending is None and l.isr == (ME, 2, 3)
    assert l.on_alter_partition_response(NONE, 5) == []


def test_expand_waits_for_leader_epoch_start_offset():
    l = leader(isr=(ME,), leo=50, hw=50)
    l.high_watermark = 30                            # HW below the epoch start offset (50)
    out, _ = l.on_follower_fetch(2, 40, 1)
    assert out == []


def test_no_expansion_to_an_ineligible_follower_and_a_refused_one_backs_off():
    """A fenced / shutting-down follower (or one whose dir is offline) is never proposed; one
    the controller refused (INELIGIBLE_REPLICA) is not proposed again on every fetch —
    each follower fetch (~every 15 ms) used to become an AlterPartition."""
    l = leader(isr=(ME, 2), leo=50, hw=50)
    for t in range(1, 200):
        out, _ = l.on_follower_fetch(3, 50, t, eligible=False)
        assert out == [] and l.pending is None
    out, _ = l.on_follower_fetch(3, 50, 200)
    assert out == [SendAlterPartition(T1, 0, 4, 7, (ME, 2, 3))]
    assert l.on_alter_partition_response(INELIGIBLE_REPLICA, 201) == []
    assert l.pending is None and l.isr == (ME, 2)
    proposals = [out for t in range(202, 201 + EXPAND_RETRY_BACKOFF_MS, 15)
                 for out in [l.on_follower_fetch(3, 50, t)[0]] if out]
    assert proposals == []
    out, _ = l.on_follower_fetch(3, 50, 201 + EXPAND_RETRY_BACKOFF_MS)
    assert out == [SendAlterPartition(T1, 0, 4, 7, (ME, 2, 3))]
    # a shrink is not delayed by the backoff (follower 2 stopped fetching)
    assert l.on_alter_partition_response(INELIGIBLE_REPLICA, 300 + EXPAND_RETRY_BACKOFF_MS) == []
    assert l.tick(LAG + 10_000) == [SendAlterPartition(T1, 0, 4, 7, (ME,))]


def test_error_response_clears_pending_and_next_tick_retries():
    l = leader()
    l.on_leader_append(20, 0)
    l.on_follower_fetch(2, 20, LAG)
    [a] = l.tick(LAG + 1)
    assert l.on_alter_partition_response(13, LAG + 2) == []     # NETWORK_EXCEPTION
    assert l.pending is None
    assert l.tick(LAG + 3) == [a]


def test_stale_metadata_ignored_and_replica_changes_tracked():
    l = leader()
    l.on_metadata(reg(isr=(ME,), leader_epoch=4, partition_epoch=6))
    assert l.isr == (ME, 2, 3)
    l.on_metadata(reg(replicas=(ME, 2, 4), isr=(ME, 2), leader_epoch=4, partition_epoch=9))
    assert l.replicas == (ME, 2, 4) and l.follower_leo(4) == -1
    with pytest.raises(KeyError):
        l.follower_leo(3)


def test_a_reassignment_completing_under_an_in_flight_expansion_drops_the_removed_replica():
    """Issue 37 (found by S17): the leader proposes ISR + the new target while the replica
    being removed is still in it; the controller completes the move (replicas without it)
    before the answer arrives. The removed replica is no follower any more: a fetch from it,
    the HW and the lag check never look it up, and the stale proposal is dropped."""
    l = leader(isr=(ME, 2, 3))
    l.on_metadata(reg(replicas=(4, ME, 2, 3), isr=(ME, 2, 3), leader_epoch=4, partition_epoch=8))
    effects, _ = l.on_follower_fetch(4, 10, 1)
    assert effects and set(l.pending) == {ME, 2, 3, 4}
    l.on_metadata(reg(replicas=(4, ME, 2), isr=(ME, 2, 4), leader_epoch=4, partition_epoch=10))
    assert l.pending is None and l.isr == (ME, 2, 4)
    assert l.on_follower_fetch(3, 10, 2) == ([], False)           # the removed replica: ignored
    l.on_leader_append(12, 3)
    l.on_follower_fetch(2, 12, 4)
    _, moved = l.on_follower_fetch(4, 12, 5)
    assert moved and l.high_watermark == 12
    assert l.out_of_sync(10 * LAG) == (2, 4)
