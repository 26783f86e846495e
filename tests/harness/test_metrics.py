"""Each metric on a synthetic timeline with known answers."""

import pytest

from harness.checkers.service_windows import SERVICE_METRICS
from harness.checkers.metrics import METRIC_NAMES, compute_metrics
from tests.harness.builders import DIRS, H

pytestmark = pytest.mark.unit


def timeline() -> H:
    """Fault at 5000 ms on broker 1's d1 (t1-0 led by 1 there; t1-1 has 1 on d2):
    dir_offline +40, ISR shrink + new leader +120, registration change +121,
    produce gap on t1-0 4900 → 5700 (800 ms), t1-1 4950 → 5050 (100 ms)."""
    h = H().register_all(0).layout(1)
    h.produce(4800, 4900, "a", 0, offset=0).produce(5100, 5700, "b", 0, offset=1)
    h.produce(4900, 4950, "c", 1, offset=0).produce(5000, 5050, "d", 1, offset=1)
    h.consume(9000, "a", 0, 0).consume(9001, "b", 0, 1).consume(9002, "c", 1, 0)
    h.consume(9003, "d", 1, 1).consume(9004, "d", 1, 2)            # one duplicate
    h.drained(9500, 0, 2).drained(9500, 1, 3)
    h.disk_fault(5000, 1, 0, fault_id="f0")
    h.node(5040, 1, "broker", "dir_offline", dir_id=DIRS[1][0])
    h.partition(5120, 0, 2, [2, 3], reason="dir_offline")
    h.ctl(5121, "registration_change", broker_id=1, dirs=DIRS[1][1:], reason="dir_offline")
    # failure-timeout shutdown 5000 ms after the fault
    h.node(10_000, 1, "broker", "failure_timeout_shutdown", dir_id=DIRS[1][0])
    # broker 3 restarts: registered at 12000, queues 4 assignments, unfenced at 12750
    h.ctl(12_000, "registered", broker_id=3, dirs=DIRS[3], fenced=True)
    h.node(12_100, 3, "broker", "assignment_queued", queued=4)
    h.node(12_600, 3, "broker", "assignment_acked", queued=0)
    h.ctl(12_750, "unfenced", broker_id=3)
    return h


def by_metric(rows):
    out = {}
    for r in rows:
        out.setdefault(r["metric"], []).append(r)
    return out


def test_every_metric_has_its_known_value():
    m = by_metric(compute_metrics(timeline().build()))
    # the service metrics have their own known-answer tests (test_service.py); one controller
    expected = set(METRIC_NAMES) - set(SERVICE_METRICS) - {"controller_failover_ms", "failover_report_ms",
                                                           "corruption_detect_ms",   # its own test below
                                                           "leader_rebalance_ms"}    # tests/harness/test_operator_checks.py
    assert set(m) - set(SERVICE_METRICS) == expected
    assert set(m) <= set(METRIC_NAMES)
    assert [r["value"] for r in m["detect_ms"]] == [40.0]
    assert m["detect_ms"][0]["dir_id"] == DIRS[1][0] and m["detect_ms"][0]["fault_id"] == "f0"
    assert [r["value"] for r in m["report_ms"]] == [120.0]
    assert [(r["topic"], r["partition"], r["value"]) for r in m["isr_shrink_ms"]] == [("t1", 0, 120.0)]
    assert [(r["partition"], r["value"]) for r in m["leader_failover_ms"]] == [(0, 120.0)]
    assert sorted((r["partition"], r["value"]) for r in m["client_unavailable_ms"]) == [(0, 800.0), (1, 100.0)]
    assert [r["value"] for r in m["failure_timeout_shutdown_ms"]] == [5000.0]
    fencing = m["fencing_ms"]
    # start-up registrations (0 → 0.5 ms) and the restart of broker 3 (750 ms, 4 queued)
    assert (3, 750.0, 4) in [(r["node_id"], r["value"], r["queued_assignments"]) for r in fencing]
    assert [r["value"] for r in m["acked_lost"]] == [0.0] and [r["value"] for r in m["duplicates"]] == [1.0]
    assert all(r["unit"] == ("count" if r["metric"] in ("acked_lost", "duplicates") else "ms")
               for rows in m.values() for r in rows if r["metric"] not in SERVICE_METRICS)


def test_no_row_for_an_interval_that_never_ended():
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 1, 0)
    m = by_metric(compute_metrics(h.build()))
    assert "detect_ms" not in m and "isr_shrink_ms" not in m and "acked_lost" not in m


def test_follower_fault_has_no_leader_failover_and_delay_has_no_detect():
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 2, 0, fault_id="f0")
    h.node(5010, 2, "broker", "dir_offline", dir_id=DIRS[2][0])
    h.partition(5030, 0, 1, [1, 3], reason="dir_offline")
    h.disk_fault(6000, 3, 1, mode="delay", fault_id="f1")
    m = by_metric(compute_metrics(h.build()))
    assert [r["value"] for r in m["isr_shrink_ms"]] == [30.0]
    assert "leader_failover_ms" not in m
    assert [r["fault_id"] for r in m["detect_ms"]] == ["f0"]
    assert [r["value"] for r in m["report_ms"]] == [30.0]


def test_controller_failover_and_a_report_across_it():
    h = H().register_all(0).layout(1)
    h.node(2, 3001, "controller", "controller_active", epoch=1)
    h.disk_fault(5000, 1, 0, fault_id="f0")
    h.node(5010, 1, "broker", "dir_offline", dir_id=DIRS[1][0])
    h.harness(5040, "fault_injected", 3001, fault_id="f1", kind="process", action="kill", node_ref="controller:active")
    h.node(6540, 3002, "controller", "controller_active", epoch=2)
    h.partition(6600, 0, 2, [2, 3], reason="log_dir_offline")
    h.harness(7000, "fault_injected", 3003, fault_id="f2", kind="process", action="kill", node_ref="controller:3003")
    m = by_metric(compute_metrics(h.build()))
    assert [(r["fault_id"], r["value"]) for r in m["controller_failover_ms"]] == [("f1", 1500.0)]  # not f2: 3003 was idle
    assert [r["value"] for r in m["report_ms"]] == [1600.0]
    assert [(r["fault_id"], r["value"]) for r in m["failover_report_ms"]] == [("f0", 1600.0)]


def test_corruption_detect_runs_from_the_first_flipped_bit_to_the_dir_offline_with_ebadmsg():
    from harness.history.model import ClientOp
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 1, 0, mode="corrupt-reads", fault_id="f0")
    h.harness(5600, "fault_first_hit", 1, fault_id="f0", hits={"read": 1}, flipped_bits=3)
    h.node(5500, 1, "broker", "dir_offline", dir_id=DIRS[1][1], errno=5, op="read")      # another dir, EIO
    h.node(5650, 1, "broker", "dir_offline", dir_id=DIRS[1][0], errno=74, op="read")
    h.disk_fault(9000, 2, 0, mode="corrupt-reads", fault_id="f1")                     # never detected
    m = by_metric(compute_metrics(h.build()))
    assert [(r["fault_id"], r["value"]) for r in m["corruption_detect_ms"]] == [("f0", 50.0)]
    # a recovery that truncated the log is a detection too; without a first hit, from the fault
    h2 = H().register_all(0).layout(1)
    h2.disk_fault(5000, 2, 0, mode="corrupt-writes", fault_id="f0")
    h2.node(8000, 2, "broker", "log_truncated_at_recovery", topic="t1", partition=0, truncated_bytes=100)
    assert [r["value"] for r in by_metric(compute_metrics(h2.build()))["corruption_detect_ms"]] == [3000.0]
    from harness.checkers import run_checks
    from harness.scenario.model import Scenario
    s = Scenario(id="X", name="x", checks=("no_corrupt_consumed",))
    h.consume(9500, "v1", 0, 0)
    assert run_checks(s, h.build()).valid is True
    h.entries.append(ClientOp(ts_ns=10_000_000_000, type="ok", f="consume", process="reader-0", topic="t1",
                              partition=0, value_id="v2", offset=1, error="corrupt value: v2 differs from byte 9"))
    r = run_checks(s, h.build()).results[0]
    assert r.valid is False and r.details["corrupt_count"] == 1 and r.details["consumed_by"] == {"c0": 1, "reader-0": 1}
    assert run_checks(s, H().build()).results[0].valid == "unknown"
