"""AssignmentsManager (AMT, AMDFT, AT; KAFKA-16886, KAFKA-17190)."""
import pytest

from broker_impl.state.assignments import AssignmentsManager
from broker_impl.state.effects import SendAssignments
from broker_state_helpers import D1, D2, T1, T2, FixedRng, events, of, seeded

pytestmark = pytest.mark.unit
NONE = 0


def valid(t, p):
    return True


def send(am, now, epoch=9, is_valid=valid):
    return of(am.tick(now, broker_epoch=epoch, is_valid=is_valid), SendAssignments)


def test_successful_assignment():
    am = AssignmentsManager(FixedRng())
    a = am.queue(T1, 0, D1, "r", 0)
    assert am.queued == 1 and am.next_deadline_ms() == 100
    assert send(am, 99) == []
    [req] = send(am, 100)
    assert req.broker_epoch == 9 and req.assignments == (a,)
    assert am.queued == 1 and am.next_deadline_ms() is None   # in flight counts
    out, acked = am.on_response(NONE, {(T1, 0): NONE}, 120)
    assert acked == (a,) and am.queued == 0 and am.previous_global_failures == 0
    assert events(out, "assignment_acked")


def test_window_is_set_by_first_item_and_never_postponed():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    am.queue(T1, 1, D1, "r", 60)
    am.queue(T1, 2, D1, "r", 90)
    assert am.next_deadline_ms() == 100
    [req] = send(am, 100)
    assert [a.partition for a in req.assignments] == [0, 1, 2]


def test_last_writer_wins():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "first", 0)
    b = am.queue(T1, 0, D2, "second", 10)
    [req] = send(am, 100)
    assert req.assignments == (b,)
    _, acked = am.on_response(NONE, {(T1, 0): NONE}, 110)
    assert [a.reason for a in acked] == ["second"]


def test_one_in_flight_then_next_batch():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    send(am, 100)
    am.queue(T1, 1, D1, "r", 101)
    assert send(am, 500) == []            # nothing while one is in flight
    assert am.queued == 2
    am.on_response(NONE, {(T1, 0): NONE}, 510)
    [req] = send(am, am.next_deadline_ms())
    assert [a.partition for a in req.assignments] == [1]


def test_at_most_2250_per_request_and_overflow_sends_now():
    am = AssignmentsManager(FixedRng())
    for p in range(2251):
        am.queue(T1, p, D1, "r", 0)
    assert am.next_deadline_ms() == 0      # > 2250 ready, nothing in flight → now
    [req] = send(am, 0)
    assert len(req.assignments) == 2250 and am.queued == 2251
    am.on_response(NONE, {a.key: NONE for a in req.assignments}, 5)
    [req2] = send(am, am.next_deadline_ms())
    assert len(req2.assignments) == 1 and am.queued == 1


def test_build_request_grouping_by_dir_then_topic():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    am.queue(T2, 3, D1, "r", 0)
    am.queue(T1, 1, D2, "r", 0)
    am.queue(T1, 2, D1, "r", 0)
    [req] = send(am, 100)
    assert req.by_directory() == {D1: {T1: [0, 2], T2: [3]}, D2: {T1: [1]}}


def test_global_error_backoff_200_doubling_to_10s_and_reset():
    am = AssignmentsManager(FixedRng())   # 0.5 → no jitter
    am.queue(T1, 0, D1, "r", 0)
    now = 100
    delays = []
    for _ in range(8):
        send(am, now)
        am.on_response(77, {}, now)        # STALE_BROKER_EPOCH: response-level error
        assert am.queued == 1
        delays.append(am.next_deadline_ms() - now)
        now = am.next_deadline_ms()
    assert delays == [200, 400, 800, 1600, 3200, 6400, 10000, 10000]
    send(am, now)
    _, acked = am.on_response(NONE, {(T1, 0): NONE}, now)
    assert len(acked) == 1 and am.previous_global_failures == 0


def test_backoff_jitter_within_2_percent():
    am = AssignmentsManager(seeded(11))
    am.queue(T1, 0, D1, "r", 0)
    send(am, 100)
    am.on_response(-1, {}, 100)            # timeout
    assert 196 <= am.next_deadline_ms() - 100 <= 204


def test_global_error_keeps_newer_queued_write():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "old", 0)
    send(am, 100)
    newer = am.queue(T1, 0, D2, "new", 150)
    am.on_response(13, {}, 160)
    assert am.ready[(T1, 0)] is newer and am.queued == 1


def test_partition_error_retried_after_window_not_backoff():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    am.queue(T1, 1, D1, "r", 0)
    send(am, 100)
    out, acked = am.on_response(NONE, {(T1, 0): NONE, (T1, 1): 6}, 110)   # NOT_LEADER_OR_FOLLOWER
    assert [a.partition for a in acked] == [0]
    assert am.previous_global_failures == 0 and am.queued == 1
    assert am.next_deadline_ms() == 210
    [req] = send(am, 210)
    assert [a.partition for a in req.assignments] == [1]


def test_missing_result_is_retried():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    am.queue(T1, 1, D1, "r", 0)
    send(am, 100)
    _, acked = am.on_response(NONE, {(T1, 0): NONE}, 110)
    assert len(acked) == 1 and am.queued == 1


def test_invalid_assignments_dropped_before_sending():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)    # topic deleted (KAFKA-17190)
    am.queue(T1, 1, D1, "r", 0)    # no longer a replica (KAFKA-16886)
    am.queue(T2, 0, D1, "r", 0)
    out = am.tick(100, broker_epoch=1, is_valid=lambda t, p: t == T2)
    [req] = of(out, SendAssignments)
    assert [(a.topic_id, a.partition) for a in req.assignments] == [(T2, 0)]
    assert events(out, "assignment_dropped")[0].as_dict()["count"] == 2
    assert am.queued == 1 and am.dropped == 2


def test_per_partition_error_dropped_once_no_longer_replica():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    send(am, 100)
    am.on_response(NONE, {(T1, 0): 6}, 110)
    still_replica = [True]
    assert send(am, 210, is_valid=lambda t, p: still_replica[0])
    am.on_response(NONE, {(T1, 0): 100}, 220)   # UNKNOWN_TOPIC_ID
    still_replica[0] = False
    assert send(am, 320, is_valid=lambda t, p: still_replica[0]) == []
    assert am.queued == 0 and am.next_deadline_ms() is None


def test_response_without_request_is_an_error():
    with pytest.raises(RuntimeError):
        AssignmentsManager(FixedRng()).on_response(NONE, {}, 0)


def test_overload_does_not_send_immediately_while_in_flight_AMDFT():
    am = AssignmentsManager(FixedRng())
    am.queue(T1, 0, D1, "r", 0)
    send(am, 100)
    for p in range(1, 2252):
        am.queue(T1, p, D1, "r", 150)
    assert am.deadline_ms == 250                 # window, not "now": one is in flight
    am.on_response(NONE, {(T1, 0): NONE}, 160)
    assert am.next_deadline_ms() == 160          # overloaded, nothing in flight: send now


def test_overload_does_not_bypass_backoff_after_global_failure_AMDFT():
    am = AssignmentsManager(FixedRng())
    for p in range(2251):
        am.queue(T1, p, D1, "r", 0)
    send(am, 0)
    am.on_response(77, {}, 10)
    assert am.next_deadline_ms() == 10 + 200
