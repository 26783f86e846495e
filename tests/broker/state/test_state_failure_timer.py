"""log.dir.failure.timeout.ms under D5 (LDFT.testLogDirNotificationTimeout, the KIP's condition)."""
import pytest

from broker_impl.state.effects import Shutdown
from broker_impl.state.failure_timer import FailureTimer
from broker_state_helpers import D1, D2, events, of

pytestmark = pytest.mark.unit


def fire(t, now, acked=(), leads=(D1, D2)):
    return t.tick(now, is_acknowledged=lambda d: d in acked, leads_partition_in=lambda d: d in leads,
                  path_of=lambda d: f"/path/{d.int & 0xff}")


def test_fires_and_shuts_down_when_unacked_and_leading():
    t = FailureTimer(5000)
    t.arm(D1, 1000)
    assert t.next_deadline_ms() == 6000
    assert fire(t, 5999) == []
    out = fire(t, 6000)
    [s] = of(out, Shutdown)
    assert "/path/1" in s.reason and "5000 ms" in s.reason and not s.clean
    assert events(out, "failure_timeout_shutdown")
    assert t.next_deadline_ms() is None


def test_no_shutdown_when_not_leading_in_dir():
    t = FailureTimer(5000)
    t.arm(D1, 0)
    out = fire(t, 5000, leads=(D2,))
    assert not of(out, Shutdown) and events(out, "failure_timeout_expired")


def test_no_shutdown_when_acknowledged():
    t = FailureTimer(5000)
    t.arm(D1, 0)
    assert fire(t, 5000, acked=(D1,)) == []


def test_ack_clears_pending_check():
    t = FailureTimer(5000)
    t.arm(D1, 0)
    t.on_acked([D2])
    assert t.next_deadline_ms() == 5000
    t.on_acked([D1])
    assert t.next_deadline_ms() is None and fire(t, 10_000) == []


def test_newer_failure_replaces_pending_check():
    t = FailureTimer(5000)
    t.arm(D1, 0)
    t.arm(D2, 3000)
    assert t.next_deadline_ms() == 8000
    assert fire(t, 5000) == []                 # D1's check is gone
    out = fire(t, 8000, leads=(D2,))
    assert "/path/2" in of(out, Shutdown)[0].reason


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="log.dir.failure.timeout.ms"):
        FailureTimer(0)
