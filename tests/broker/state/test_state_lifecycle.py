"""Lifecycle: registration, heartbeats (BLMT), immediate + coalesced sends (KAFKA-15950),
back-off, want_fence (D4), controlled shutdown."""
import pytest

from broker_impl.state.effects import SendHeartbeat, SendRegistration, Shutdown
from broker_impl.state.lifecycle import Lifecycle, LifecycleConfig, State, backoff_ms
from broker_state_helpers import D1, D2, D3, FixedRng, events, of, seeded

pytestmark = pytest.mark.unit
NONE = 0


def lc(dirs=(D1, D2, D3), rng=None, **cfg):
    return Lifecycle(tuple(dirs), LifecycleConfig(**cfg), rng or FixedRng())


def registered(l: Lifecycle, now=0, epoch=10):
    l.start(now)
    out = l.on_registration_response(NONE, epoch, now)
    return out


def test_registration_includes_dirs_and_heartbeat_follows():
    l = lc()
    assert l.start(0) == [SendRegistration((D1, D2, D3))]
    assert l.tick(5) == []  # one in flight
    out = l.on_registration_response(NONE, 42, 3)
    assert events(out, "registered")
    hb = of(out, SendHeartbeat)[0]
    assert hb.broker_epoch == 42 and hb.want_fence and not hb.want_shut_down and hb.offline_log_dirs == ()


def test_heartbeat_cadence_starting_then_interval():
    l = lc()
    registered(l)
    out, _ = l.on_heartbeat_response(NONE, 0, is_caught_up=False)
    assert out == [] and l.next_deadline_ms() == 10
    assert of(l.tick(10), SendHeartbeat)
    l.on_heartbeat_response(NONE, 12, is_caught_up=True)
    assert l.state == State.RECOVERY
    assert l.next_deadline_ms() == 12 + 2000
    assert l.tick(2011) == [] and of(l.tick(2012), SendHeartbeat)


def test_always_sends_accumulated_offline_dirs():
    l = lc()
    registered(l)
    l.on_heartbeat_response(NONE, 1, is_caught_up=True)
    for i, d in enumerate((D1, D2, D3)):
        out = l.on_dir_failure(d, 100 * (i + 1))
        hb = of(out, SendHeartbeat)[0]
        assert hb.offline_log_dirs == (D1, D2, D3)[: i + 1]
        l.on_heartbeat_response(NONE, 100 * (i + 1) + 1, is_caught_up=True)
    hb = of(l.tick(10_000), SendHeartbeat)[0]
    assert hb.offline_log_dirs == (D1, D2, D3)


def test_dir_failure_is_immediate_and_coalesced_never_two_in_flight():
    l = lc()
    registered(l, epoch=5)  # heartbeat now in flight
    assert l.in_flight == "heartbeat"
    assert l.on_dir_failure(D2, 1) == []            # coalesced
    assert l.on_dir_failure(D3, 2) == []
    assert l.tick(3) == []
    out, acked = l.on_heartbeat_response(NONE, 4, is_caught_up=True)
    assert acked == ()  # the in-flight heartbeat did not carry them
    hb = of(out, SendHeartbeat)
    assert len(hb) == 1 and hb[0].offline_log_dirs == (D2, D3)   # sent at once, after the response
    assert events(out, "dir_failure_reported")
    out, acked = l.on_heartbeat_response(NONE, 5, is_caught_up=True)
    assert set(acked) == {D2, D3} and events(out, "dir_failure_acked")
    assert l.is_acknowledged(D2) and l.is_acknowledged(D3)


def test_dir_failure_before_registration_rides_first_heartbeat():
    l = lc()
    l.start(0)
    assert l.on_dir_failure(D1, 1) == []
    out = l.on_registration_response(NONE, 7, 2)
    assert of(out, SendHeartbeat)[0].offline_log_dirs == (D1,)


def test_error_response_acknowledges_nothing_and_backs_off():
    l = lc()
    registered(l)
    l.on_heartbeat_response(NONE, 0, is_caught_up=True)
    l.on_dir_failure(D1, 100)
    out, acked = l.on_heartbeat_response(77, 101)   # STALE_BROKER_EPOCH
    assert acked == () and not l.is_acknowledged(D1)
    assert l.next_deadline_ms() == 101 + 100
    of(l.tick(201), SendHeartbeat)
    l.on_request_failed(202)                         # timeout
    assert l.next_deadline_ms() == 202 + 200
    l.tick(402)
    l.on_heartbeat_response(NONE, 403, is_caught_up=True)
    assert l.is_acknowledged(D1)


def test_failed_response_clears_immediate_flag():
    l = lc()
    registered(l)              # heartbeat in flight
    l.on_dir_failure(D1, 1)    # coalesced
    out, _ = l.on_heartbeat_response(13, 2)
    assert not of(out, SendHeartbeat)
    assert l.next_deadline_ms() == 2 + 100


def test_backoff_doubles_caps_at_session_timeout_with_jitter():
    assert [backoff_ms(n, 100, 9000, 0.0, None) for n in range(9)] == \
        [100, 200, 400, 800, 1600, 3200, 6400, 9000, 9000]
    rng = seeded(3)
    for n in range(10):
        v = backoff_ms(n, 100, 9000, 0.02, rng)
        base = min(100 * 2 ** n, 9000)
        assert base * 0.98 - 1 <= v <= base * 1.02


def test_registration_retry_and_timeout():
    l = lc(initial_registration_timeout_ms=1000)
    l.start(0)
    l.on_registration_response(42, -1, 10)
    assert l.next_deadline_ms() == 110
    assert of(l.tick(110), SendRegistration)
    l.on_request_failed(120)
    assert l.next_deadline_ms() == 320
    out = l.tick(1000)
    assert of(out, Shutdown) and "unable to register" in of(out, Shutdown)[0].reason
    assert "last error code -1" in of(out, Shutdown)[0].reason and not of(out, Shutdown)[0].clean
    assert l.state == State.SHUTTING_DOWN and l.tick(5000) == []


def test_want_fence_until_ready_and_queue_empty_D4():
    l = lc()
    registered(l)
    l.on_heartbeat_response(NONE, 0, is_caught_up=True)
    assert of(l.tick(2000), SendHeartbeat)[0].want_fence
    l.on_heartbeat_response(NONE, 2001, is_caught_up=True)
    l.set_queued_assignments(3, 2002)
    out = l.set_ready_to_unfence(2003)            # immediate, but the queue is non-empty
    assert of(out, SendHeartbeat)[0].want_fence
    l.on_heartbeat_response(NONE, 2004, is_caught_up=True, is_fenced=True)
    out = l.set_queued_assignments(0, 2005)       # drained: immediate heartbeat, unfence wish
    hb = of(out, SendHeartbeat)[0]
    assert not hb.want_fence
    out, _ = l.on_heartbeat_response(NONE, 2006, is_caught_up=True, is_fenced=False)
    assert events(out, "unfenced") and l.state == State.RUNNING
    # §6: once unfenced, new UNASSIGNED replicas do not make it ask to be fenced again
    l.set_queued_assignments(5, 2007)
    assert not of(l.tick(4006), SendHeartbeat)[0].want_fence


def test_controlled_shutdown():
    l = lc()
    registered(l)
    l.on_heartbeat_response(NONE, 0, is_caught_up=True)
    l.set_ready_to_unfence(1)
    l.on_heartbeat_response(NONE, 2, is_caught_up=True, is_fenced=False)
    assert l.state == State.RUNNING
    out = l.begin_controlled_shutdown(3)
    hb = of(out, SendHeartbeat)[0]
    assert hb.want_shut_down and l.state == State.PENDING_CONTROLLED_SHUTDOWN
    out, _ = l.on_heartbeat_response(NONE, 4, is_caught_up=True, is_fenced=False)
    assert l.next_deadline_ms() == 4 + 50
    of(l.tick(54), SendHeartbeat)
    out, _ = l.on_heartbeat_response(NONE, 55, is_caught_up=True, is_fenced=True, should_shut_down=True)
    assert of(out, Shutdown)[0].reason == "controlled shutdown approved by the controller"
    assert l.state == State.SHUTTING_DOWN


def test_controlled_shutdown_times_out_when_controller_unreachable():
    l = lc(controlled_shutdown_timeout_ms=500)
    registered(l)
    l.on_heartbeat_response(NONE, 0, is_caught_up=True)
    l.begin_controlled_shutdown(10)
    for t in range(11, 600, 50):
        if l.in_flight:
            l.on_request_failed(t)
        l.tick(t)
    assert l.state == State.SHUTTING_DOWN


def test_shutdown_before_registration_is_immediate():
    l = lc()
    l.start(0)
    assert of(l.begin_controlled_shutdown(1), Shutdown)
