"""reassignment_complete and leader_rebalance_ms (harness.checkers.operator) on synthetic
timelines with known answers."""

import pytest

from harness.checkers.operator import check_reassignment_complete
from harness.checkers.metrics import compute_metrics
from tests.harness.builders import H

pytestmark = pytest.mark.unit


def moved(final_isr, final_replicas=(4, 2, 3), result="none") -> H:
    h = H().register_all(0).layout(1)
    h.harness(3000, "fault_injected", 1, fault_id="f1", kind="admin", action="reassign", fault_kind="reassign",
              plan={"t1/0": [4, 2, 3]}, result=result)
    h.partition(3100, 0, 1, [1, 2, 3], replicas=[4, 2, 3, 1])
    h.partition(3900, 0, 2, list(final_isr), replicas=list(final_replicas))
    return h


def test_reassignment_complete_true_when_every_target_is_fully_replicated():
    r = check_reassignment_complete(None, moved([2, 3, 4]).build())
    assert r.valid is True and r.details["partitions"] == 1


@pytest.mark.parametrize("isr,replicas,result,why", [
    ([2, 3], (4, 2, 3), "none", "ISR"),
    ([2, 3, 4, 1], (4, 2, 3, 1), "none", "replicas"),
    ([2, 3, 4], (4, 2, 3), {"t1/0": "INVALID_REPLICA_ASSIGNMENT"}, "answered"),
])
def test_reassignment_complete_false_with_the_reason(isr, replicas, result, why):
    r = check_reassignment_complete(None, moved(isr, replicas, result).build())
    assert r.valid is False and why in r.summary


def test_reassignment_complete_unknown_without_a_reassign_action():
    assert check_reassignment_complete(None, H().register_all(0).layout(1).build()).valid not in (True, False)


def test_leader_rebalance_ms_from_the_restart_to_every_preferred_leadership_back():
    h = H().register_all(0).layout(1)            # broker 1 prefers t1-0 (replicas [1,2,3])
    h.partition(5000, 0, 2, [2, 3], reason="dir_offline")                  # t1-0 moves away
    h.harness(8000, "fault_injected", 1, fault_id="f1", kind="process", action="restart", mode="restart",
              fault_kind="restart")
    h.partition(9000, 0, 2, [2, 3, 1], reason="alter_partition")
    h.partition(12_500, 0, 1, [2, 3, 1], reason="leader_rebalance")         # back: 4500 ms after the restart
    rows = [r for r in compute_metrics(h.build()) if r["metric"] == "leader_rebalance_ms"]
    assert [(r["value"], r["node_id"], r["fault_id"]) for r in rows] == [(4500.0, 1, "f1")]


def test_no_leader_rebalance_row_when_leadership_never_comes_back():
    h = H().register_all(0).layout(1)
    h.partition(5000, 0, 2, [2, 3], reason="dir_offline")
    h.harness(8000, "fault_injected", 1, fault_id="f1", kind="process", action="restart", mode="restart",
              fault_kind="restart")
    assert not [r for r in compute_metrics(h.build()) if r["metric"] == "leader_rebalance_ms"]
