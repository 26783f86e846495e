"""Dir moves (behaviour §4; RALDTT, ARLDRT, KAFKA-16297, D6)."""
import pytest

from broker_impl.state.core import (KAFKA_STORAGE_ERROR, LOG_DIR_NOT_FOUND, NONE, REPLICA_NOT_AVAILABLE,
                                    UNKNOWN_TOPIC_OR_PARTITION, BrokerCore, CoreConfig)
from broker_impl.state.effects import (CreateFutureLog, CreateLog, DeleteFutureLog, MarkPartitionsOffline,
                                       SendAssignments, SendHeartbeat, StartDirMover, StopDirMover, StopFetcher,
                                       SwapFutureLog)
from broker_impl.state.log_dirs import LogDirInfo
from broker_impl.state.moves import REASON_LOST, REASON_PROMOTION, REASON_REVERT, MoveState
from broker_impl.state.replica_manager import ExistingLog, Hosted, PartitionChange
from broker_state_helpers import D1, D2, D3, ME, T1, FixedRng, events, of, reg, tp
from kafka_common.ids import LOST, UNASSIGNED, uuid_of

pytestmark = pytest.mark.unit
META = uuid_of(0x4444, 4)


def setup(existing=()):
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(d, f"/d{i}") for i, d in enumerate((D1, D2, D3))], META,
                   FixedRng(), existing)
    c.start(0)
    c.on_registration_response(NONE, 50, 0)
    c.on_heartbeat_response(NONE, 0, is_caught_up=True)
    c.apply_metadata([PartitionChange("t", None, reg(dir_for_me=D1))], 0)
    return c


def send_and_ack(c, now, code=NONE):
    [req] = of(c.tick(now), SendAssignments)
    c.on_assignments_response(0, {a.key: code for a in req.assignments}, now + 1)
    return req


def test_full_move_only_promotes_after_controller_accepted():
    c = setup()
    err, out = c.alter_replica_log_dir(tp(), D3, 10)
    assert err == NONE
    assert of(out, CreateFutureLog) == [CreateFutureLog(tp(), T1, D3)]
    assert of(out, StartDirMover) == [StartDirMover(tp(), D1, D3)]
    assert c.replicas.futures[tp()] == (T1, D3)
    out = c.on_future_caught_up(tp(), 20)                # None → Queued
    assert not of(out, SwapFutureLog) and c.moves.moves[tp()].state is MoveState.QUEUED
    assert not of(c.on_future_caught_up(tp(), 30), SwapFutureLog)   # still waiting for the controller
    req = send_and_ack(c, 120)
    assert [(a.dir_id, a.reason) for a in req.assignments] == [(D3, REASON_PROMOTION)]
    assert c.moves.moves[tp()].state is MoveState.ACCEPTED
    out = c.on_future_caught_up(tp(), 200)
    assert of(out, SwapFutureLog) == [SwapFutureLog(tp(), D1, D3)]
    out = c.on_swap_done(tp(), 210)
    assert events(out, "dir_move_done")
    assert c.replicas.logs[tp()] == (T1, D3) and c.replicas.partitions[tp()].dir_id == D3
    assert tp() not in c.moves.moves and tp() not in c.replicas.futures
    # the metadata now names D3: no correction
    out = c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1), reg(dir_for_me=D3))], 300)
    assert c.queued_replica_to_dir_assignments == 0


def test_target_failure_while_queued_reverts_assignment():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    out = c.on_storage_error(D3, 5, "append", 30)
    assert of(out, StopDirMover) == [StopDirMover(tp())]
    assert tp() not in c.moves.moves
    req = send_and_ack(c, 130)  # last writer wins: the revert replaced the promotion
    assert [(a.dir_id, a.reason) for a in req.assignments] == [(D1, REASON_REVERT)]


def test_target_failure_while_copying_sends_nothing():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    out = c.on_storage_error(D3, 5, "append", 30)
    assert of(out, StopDirMover) and c.queued_replica_to_dir_assignments == 0


def test_source_failure_after_assignment_sent_assigns_lost_D6():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    [req] = of(c.tick(120), SendAssignments)             # promotion in flight
    out = c.on_storage_error(D1, 5, "read", 130)
    assert of(out, StopDirMover) and of(out, SendHeartbeat)
    c.on_assignments_response(0, {req.assignments[0].key: NONE}, 140)
    req2 = send_and_ack(c, 240)
    assert [(a.dir_id, a.reason) for a in req2.assignments] == [(LOST, REASON_LOST)]


def swapping_follower():
    """A follower of t-0 (leader 2) whose move D1 → D3 the controller accepted: the swap runs."""
    c = setup()
    c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1), reg(dir_for_me=D1, leader=2, leader_epoch=1))], 5)
    assert c.replicas.partitions[tp()].fetching
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    send_and_ack(c, 120)
    assert of(c.on_future_caught_up(tp(), 200), SwapFutureLog) == [SwapFutureLog(tp(), D1, D3)]
    return c


def test_source_failing_in_the_swaps_own_delete_leaves_the_replica_in_the_target():
    # the swap installed the future log in D3, then its delete of the old log in D1 hit EIO:
    # D1's failure is reported before the swap's end; the replica must stay online, fetching
    # (campaign S9 seed 2: it went offline for good and its leader waited 5 s to shrink the ISR)
    c = swapping_follower()
    out = c.on_storage_error(D1, 5, "delete_log", 210)
    assert all(tp() not in e.partitions for e in of(out, StopFetcher))
    assert all(tp() not in e.partitions for e in of(out, MarkPartitionsOffline))
    lr = c.replicas.partitions[tp()]
    assert lr.hosted is Hosted.ONLINE and lr.fetching
    out = c.on_swap_done(tp(), 215)
    assert events(out, "dir_move_done")
    assert lr.hosted is Hosted.ONLINE and lr.fetching and lr.dir_id == D3
    assert c.replicas.logs[tp()] == (T1, D3) and tp() not in c.moves.moves
    assert c.queued_replica_to_dir_assignments == 0    # the controller already names D3


def test_a_swap_the_metadata_started_is_spared_too_KAFKA_16082():
    # the controller's record naming D3 reaches the broker first and starts the swap (the
    # future is there): the move is still ACCEPTED here, and the swap's delete fails D1
    # (S9 seed 1 after the first fix: the move was cancelled and D3's good replica went LOST)
    c = setup()
    c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1), reg(dir_for_me=D1, leader=2, leader_epoch=1))], 5)
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    send_and_ack(c, 120)
    out = c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1, leader=2, leader_epoch=1),
                                            reg(dir_for_me=D3, leader=2, leader_epoch=1))], 125)
    assert of(out, SwapFutureLog) == [SwapFutureLog(tp(), D1, D3)]
    assert not of(c.on_future_caught_up(tp(), 130), SwapFutureLog)   # one swap, not two
    out = c.on_storage_error(D1, 5, "delete_log", 140)
    assert not events(out, "dir_move_cancelled")
    assert all(tp() not in e.partitions for e in of(out, MarkPartitionsOffline))
    c.on_swap_done(tp(), 145)
    lr = c.replicas.partitions[tp()]
    assert lr.hosted is Hosted.ONLINE and lr.fetching and lr.dir_id == D3
    assert c.queued_replica_to_dir_assignments == 0


def test_a_swap_that_found_no_future_is_forgotten():
    c = swapping_follower()
    c.on_swap_skipped(tp())
    assert tp() not in c.swaps
    out = c.on_storage_error(D1, 5, "append", 210)   # no swap runs: the replica goes with its dir
    assert of(out, MarkPartitionsOffline) == [MarkPartitionsOffline(D1, (tp(),))]


def test_a_swap_failing_with_its_source_offline_assigns_lost():
    c = swapping_follower()
    c.on_storage_error(D1, 5, "read", 210)               # the swap's last copy step read D1
    out = c.on_swap_failed(tp(), 215)
    assert of(out, StopFetcher) == [StopFetcher((tp(),))]
    assert of(out, MarkPartitionsOffline) == [MarkPartitionsOffline(D1, (tp(),))]
    assert events(out, "dir_move_cancelled") and tp() not in c.moves.moves
    assert c.replicas.partitions[tp()].hosted is Hosted.OFFLINE and tp() not in c.replicas.futures
    req = send_and_ack(c, 320)
    assert [(a.dir_id, a.reason) for a in req.assignments] == [(LOST, REASON_LOST)]


def test_a_swap_failing_with_its_source_online_reverts_to_it():
    c = swapping_follower()
    c.on_storage_error(D3, 5, "roll", 210)               # the target failed in the swap's rename
    out = c.on_swap_failed(tp(), 215)
    assert not of(out, StopFetcher) and not of(out, MarkPartitionsOffline)
    lr = c.replicas.partitions[tp()]
    assert lr.hosted is Hosted.ONLINE and lr.fetching and lr.dir_id == D1
    req = send_and_ack(c, 320)
    assert [(a.dir_id, a.reason) for a in req.assignments] == [(D1, REASON_REVERT)]


def test_cancel_after_accepted_reverts_KAFKA_16297():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    send_and_ack(c, 120)
    err, out = c.alter_replica_log_dir(tp(), D1, 200)    # back to the current dir: cancel
    assert err == NONE and of(out, DeleteFutureLog) == [DeleteFutureLog(tp(), D3)]
    req = send_and_ack(c, 300)
    assert [(a.dir_id, a.reason) for a in req.assignments] == [(D1, REASON_REVERT)]
    assert tp() not in c.replicas.futures


def test_new_destination_cancels_previous_move():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    err, out = c.alter_replica_log_dir(tp(), D2, 20)
    assert err == NONE
    assert of(out, DeleteFutureLog) == [DeleteFutureLog(tp(), D3)]
    assert of(out, CreateFutureLog) == [CreateFutureLog(tp(), T1, D2)]
    assert c.replicas.futures[tp()] == (T1, D2)


def test_partition_removed_cancels_move():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    out = c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1), None)], 20)
    assert of(out, StopDirMover) and tp() not in c.moves.moves


def test_no_correction_flip_while_promotion_accepted():
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    c.on_future_caught_up(tp(), 20)
    send_and_ack(c, 120)
    # the controller's record (dir = D3) arrives before the swap: no assignment back to D1 (§5.5)
    c.apply_metadata([PartitionChange("t", reg(dir_for_me=D1), reg(dir_for_me=D3))], 130)
    assert c.queued_replica_to_dir_assignments == 0


def test_alter_errors_ARLDRT():
    c = setup()
    assert c.alter_replica_log_dir(tp(), None, 1)[0] == LOG_DIR_NOT_FOUND
    assert c.alter_replica_log_dir(tp(), uuid_of(9, 900), 1)[0] == LOG_DIR_NOT_FOUND
    err, _ = c.alter_replica_log_dir(tp("new"), D2, 1)
    assert err == UNKNOWN_TOPIC_OR_PARTITION
    out = c.apply_metadata([PartitionChange("new", None, reg(topic_id=uuid_of(5, 500), dir_for_me=UNASSIGNED))], 2)
    assert of(out, CreateLog)[0].dir_id == D2            # the preferred dir is used at creation
    c.on_storage_error(D3, 5, "x", 3)
    assert c.alter_replica_log_dir(tp(), D3, 4)[0] == KAFKA_STORAGE_ERROR     # offline destination
    assert c.alter_replica_log_dir(tp(), D2, 4)[0] == KAFKA_STORAGE_ERROR     # any dir offline


def test_alter_partition_in_offline_dir_and_pending_replica():
    c = setup()
    c.on_storage_error(D1, 5, "x", 3)
    assert c.alter_replica_log_dir(tp(), D2, 4)[0] == KAFKA_STORAGE_ERROR
    c.apply_metadata([PartitionChange("u", None, reg(topic_id=uuid_of(6, 600), dir_for_me=LOST))], 5)
    assert c.alter_replica_log_dir(tp("u"), D2, 6)[0] == REPLICA_NOT_AVAILABLE


def test_future_log_found_at_start_resumes_and_completes():
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(d, f"/d{i}") for i, d in enumerate((D1, D2, D3))], META,
                   FixedRng(), [ExistingLog(tp(), T1, D1), ExistingLog(tp(), T1, D2, future=True)])
    c.start(0)
    c.on_registration_response(NONE, 50, 0)
    out = c.apply_metadata([PartitionChange("t", None, reg(dir_for_me=D1))], 1)
    assert of(out, StartDirMover) == [StartDirMover(tp(), D1, D2)] and not of(out, CreateFutureLog)
    c.on_future_caught_up(tp(), 2)
    send_and_ack(c, 102)
    assert of(c.on_future_caught_up(tp(), 200), SwapFutureLog)


def test_abandoned_future_in_metadata_dir_promoted_at_start_KAFKA_16082():
    c = BrokerCore(CoreConfig(broker_id=ME), [LogDirInfo(d, f"/d{i}") for i, d in enumerate((D1, D2, D3))], META,
                   FixedRng(), [ExistingLog(tp(), T1, D1), ExistingLog(tp(), T1, D2, future=True)])
    c.start(0)
    c.on_registration_response(NONE, 50, 0)
    out = c.apply_metadata([PartitionChange("t", None, reg(dir_for_me=D2))], 1)
    assert of(out, SwapFutureLog) == [SwapFutureLog(tp(), D1, D2)]
    c.on_swap_done(tp(), 2)
    assert c.replicas.logs[tp()] == (T1, D2) and c.queued_replica_to_dir_assignments == 0


def test_revert_only_for_queued_or_accepted_RALDTT():
    """shouldRevertAnyScheduledAssignmentRequestIfAssignmentIsCancelled /
    shouldRevertReassignmentsForIncompleteFutureReplicaPromotions (KAFKA-16297)."""
    c = setup()
    c.alter_replica_log_dir(tp(), D3, 10)
    c.alter_replica_log_dir(tp(), D1, 11)              # cancel in None (copying): nothing to revert
    assert c.queued_replica_to_dir_assignments == 0
    c.alter_replica_log_dir(tp(), D3, 12)
    c.on_future_caught_up(tp(), 13)                    # Queued
    c.alter_replica_log_dir(tp(), D1, 14)              # cancel in Queued: revert replaces the promotion
    [a] = c.assignments.ready.values()
    assert (a.dir_id, a.reason) == (D1, REASON_REVERT)
    send_and_ack(c, 200)
    c.alter_replica_log_dir(tp(), D2, 300)
    c.on_future_caught_up(tp(), 301)
    send_and_ack(c, 401)
    c.on_future_caught_up(tp(), 402)                   # Swapping
    c.on_swap_done(tp(), 403)                          # Effective: the move is over
    err, out = c.alter_replica_log_dir(tp(), D2, 404)  # already there: no-op, nothing to revert
    assert err == NONE and out == [] and c.queued_replica_to_dir_assignments == 0
