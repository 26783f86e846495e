"""Each checker on hand-built histories: true, false and unknown."""

import pytest

from harness.checkers import CHECKERS, UNKNOWN, merge_valid, run_checks
from harness.checkers.base import CheckResult, check_safe
from harness.checkers.durability import check_durability
from harness.checkers.failover import check_failover
from harness.checkers.fencing import check_fencing
from harness.checkers.liveness import check_liveness
from harness.checkers.metadata import check_metadata_invariants
from harness.checkers.timeout import check_timeout_accuracy
from harness.catalog import catalog
from harness.checkers.replay import LOST as LOST_B64
from tests.harness.builders import DIRS, H

pytestmark = pytest.mark.unit

S1 = catalog.leader_dir_fails()
S2 = catalog.follower_dir_fails()
S4 = catalog.failure_timeout_shutdown()
S5 = catalog.timeout_not_leader()


def workload(h: H, n: int = 6, start_ms: float = 100, partition: int = 0, consume: bool = True,
             drain_to: int | None = None) -> H:
    for i in range(n):
        t = start_ms + i * 1000
        h.produce(t, t + 5, f"v{partition}-{i}", partition, offset=i)
        if consume:
            h.consume(20_000 + i, f"v{partition}-{i}", partition, i)
    h.drained(21_000, partition, n if drain_to is None else drain_to)
    return h


def s1_history(*, failover_ms: float = 100, leader_after: int = 2, touch_healthy: bool = False) -> H:
    h = H().register_all(0).layout(1)
    workload(h)
    h.disk_fault(5000, 1, 0, node_ref="leader:t1/0", dir_ref="replica:t1/0")
    h.node(5050, 1, "broker", "dir_offline", dir_id=DIRS[1][0], path="/d1", errno=5, op="fsync")
    h.partition(5000 + failover_ms, 0, leader_after, [2, 3], reason="log_dir_offline")
    h.ctl(5000 + failover_ms + 1, "broker_log_dirs_changed", broker_id=1, log_dirs=DIRS[1][1:],
          removed=DIRS[1][:1], reason="log_dir_offline")
    if touch_healthy:
        h.partition(6000, 1, 2, [2, 3], reason="dir_offline")
    for b in (1, 2, 3):
        h.status(25_000, b, True)
    return h


# ---------------------------------------------------------------- composition

def test_merge_priority_false_over_unknown_over_true():
    assert merge_valid([True, True]) is True
    assert merge_valid([True, UNKNOWN, True]) == UNKNOWN
    assert merge_valid([UNKNOWN, False, True]) is False
    assert merge_valid([]) is True


def test_check_safe_turns_a_crash_into_unknown():
    def boom(scenario, history):
        raise KeyError("partition")
    r = check_safe("x", boom, S1, H().build())
    assert r.valid == UNKNOWN and "KeyError" in r.summary


def test_run_checks_composes_scenario_checks():
    report = run_checks(S1, s1_history().build())
    assert [r.name for r in report.results] == list(S1.checks)
    verdicts = {r.name: r.valid for r in report.results}
    assert verdicts.pop("service") == UNKNOWN          # 4 produces before the fault: too few samples
    assert all(v is True for v in verdicts.values()) and report.valid == UNKNOWN, report.to_dict()
    assert run_checks(S1, s1_history().build(), names=list(verdicts)).valid is True
    bad = run_checks(S1, s1_history(failover_ms=20_000).build())
    assert bad.valid is False
    assert set(CHECKERS) == {"durability", "failover", "liveness", "timeout_accuracy", "fencing",
                             "metadata_invariants", "quorum_logs", "service",
                             "group_consumption", "no_corrupt_consumed", "topic_admin", "reassignment_complete",
                             "preferred_leaders"}


# ---------------------------------------------------------------- durability

def test_durability_true_when_every_ack_is_read_at_its_offset():
    r = check_durability(S1, workload(H()).build())
    assert r.valid is True and r.details["acked"] == 6


def test_durability_false_on_a_lost_ack():
    h = workload(H(), consume=False)
    for i in range(5):
        h.consume(20_000 + i, f"v0-{i}", 0, i)
    r = check_durability(S1, h.build())
    assert r.valid is False and r.details["lost_count"] == 1
    assert r.details["examples"]["lost"][0]["value_id"] == "v0-5"


def test_durability_unknown_when_the_drain_did_not_reach_the_ack():
    h = workload(H(), consume=False, drain_to=5)
    for i in range(5):
        h.consume(20_000 + i, f"v0-{i}", 0, i)
    r = check_durability(S1, h.build())
    assert r.valid == UNKNOWN and r.details["not_reached"] == 1


def test_durability_acks_without_offset_are_checked_by_value():
    """librdkafka's implicit ack (delivered, offset None): durable when the value was read
    on its partition; lost when it was not but a later ack of that producer was."""
    h = workload(H(), n=4)
    h.produce(5_000, 9_000, "implicit-a", 0, offset=None).consume(20_100, "implicit-a", 0, 4)
    h.produce(5_010, 9_000, "implicit-b", 0, offset=None).consume(20_101, "implicit-b", 0, 5)
    h.produce(5_020, 9_000, "later", 0, offset=6).consume(20_102, "later", 0, 6).drained(21_000, 0, 7)
    r = check_durability(S1, h.build())
    assert r.valid is True and r.details["ack_without_offset"] == 2, r

    h = workload(H(), n=4)
    h.produce(5_000, 9_000, "implicit-a", 0, offset=None)          # never read
    h.produce(5_020, 9_000, "later", 0, offset=4).consume(20_102, "later", 0, 4).drained(21_000, 0, 5)
    r = check_durability(S1, h.build())
    assert r.valid is False and r.details["lost_count"] == 1
    assert r.details["examples"]["lost"][0]["value_id"] == "implicit-a"

    h = workload(H(), n=4)
    h.produce(5_000, 9_000, "implicit-a", 0, offset=None)          # nothing later read: not reached
    r = check_durability(S1, h.build())
    assert r.valid == UNKNOWN and r.details["not_reached"] == 1


def test_durability_false_on_duplicates_mismatch_and_divergence():
    h = workload(H())
    h.consume(20_100, "v0-2", 0, 7)            # duplicate of v0-2 elsewhere
    h.consume(20_101, "ghost", 0, 8)           # never produced
    h.consume(20_102, "v0-1-again", 0, 1)      # a second value at offset 1
    r = check_durability(S1, h.build())
    assert r.valid is False
    assert r.details["duplicates_count"] == 1 and r.details["phantom_count"] == 2
    assert r.details["inconsistent_offsets_count"] == 1


def test_durability_false_on_reordering_within_a_producer():
    h = H()
    h.produce(0, 10, "a", 0, offset=5).produce(20, 30, "b", 0, offset=4)  # b invoked after a acked
    h.consume(100, "a", 0, 5).consume(101, "b", 0, 4).drained(200, 0, 6)
    r = check_durability(S1, h.build())
    assert r.valid is False and r.details["reordered_count"] == 1


def test_durability_ignores_failed_and_indeterminate_writes():
    h = workload(H())
    h.produce(7000, 9000, "lost-maybe", 0, outcome="info").produce(7100, 7200, "failed", 0, outcome="fail")
    h.produce(7300, 0, "never-completed", 0, outcome="never")
    r = check_durability(S1, h.build())
    assert r.valid is True and r.details["indeterminate"] == 3


def test_durability_unknown_without_acks():
    assert check_durability(S1, H().build()).valid == UNKNOWN


# ---------------------------------------------------------------- failover

def test_failover_true_when_replica_leaves_isr_and_leader_moves_in_bound():
    r = check_failover(S1, s1_history().build())
    assert r.valid is True, r.details
    f = r.details["faults"][0]
    assert f["affected"] == ["t1-0"] and f["healthy"] == ["t1-1"] and f["left_isr_ms"]["t1-0"] == 100


def test_failover_false_when_too_slow():
    r = check_failover(S1, s1_history(failover_ms=16_000).build())
    assert r.valid is False and "16000 ms > 15000 ms" in r.summary


def test_failover_false_when_a_healthy_dir_partition_is_touched():
    r = check_failover(S1, s1_history(touch_healthy=True).build())
    assert r.valid is False and "healthy dir" in r.summary


def test_failover_false_when_follower_fault_moves_the_leader():
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 2, 0, node_ref="follower:t1/0")
    h.node(5050, 2, "broker", "dir_offline", dir_id=DIRS[2][0])
    h.partition(5100, 0, 3, [1, 3], reason="dir_offline")   # leader 1 → 3: wrong for S2
    h.status(30_000, 2, True)
    assert check_failover(S2, h.build()).valid is False
    h2 = H().register_all(0).layout(1)
    h2.disk_fault(5000, 2, 0, node_ref="follower:t1/0")
    h2.partition(5100, 0, 1, [1, 3], reason="dir_offline")
    h2.status(30_000, 2, True)
    assert check_failover(S2, h2.build()).valid is True


def test_failover_unknown_when_history_ends_before_the_bound():
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 1, 0)
    h.status(6000, 1, True)
    r = check_failover(S1, h.build())
    assert r.valid == UNKNOWN


def test_failover_unknown_without_placement_or_fault():
    assert check_failover(S1, H().build()).valid == UNKNOWN
    h = H().disk_fault(5000, 1, 0)
    assert check_failover(S1, h.build()).valid == UNKNOWN


def test_failover_delay_fault_must_not_take_the_dir_offline():
    s10 = catalog.flaky_and_slow()
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 2, 1, mode="delay", dir_ref="d2")
    h.status(30_000, 2, True)
    assert check_failover(s10, h.build()).valid is True
    h.node(5200, 2, "broker", "dir_offline", dir_id=DIRS[2][1])
    assert check_failover(s10, h.build()).valid is False


def test_failover_isr_recovers_after_replace_disk():
    s8 = catalog.replace_disk()
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 2, 0, node_ref="follower:t1/0")
    h.partition(5100, 0, 1, [1, 3], reason="dir_offline")
    h.ctl(5101, "registration_change", broker_id=2, dirs=DIRS[2][1:])
    new_dir = "NEWdiraaaaaaaaaaaaaaaa"
    h.harness(12_900, "fault_injected", 2, fault_id="f1", kind="replace-disk", node_ref="follower:t1/0",
              dir_ref="replica:t1/0", dir_ids=[DIRS[2][0]])
    h.ctl(12_950, "registered", broker_id=2, dirs=DIRS[2], fenced=True)
    assert "never registered a new dir id" in check_failover(s8, h.build()).summary
    h.ctl(13_000, "registered", broker_id=2, dirs=[new_dir] + DIRS[2][1:], fenced=True)
    h.partition(13_100, 0, 1, [1, 3], dirs=[DIRS[1][0], new_dir, DIRS[3][0]], reason="assignment")
    h.status(40_000, 2, True)
    r = check_failover(s8, h.build())
    assert r.valid is False and "not back in ISR" in r.summary
    h.partition(15_000, 0, 1, [1, 3, 2], reason="isr_expand")
    r = check_failover(s8, h.build())
    assert r.valid is True and r.details["replaced"][0]["new_dir_ids"] == [new_dir]


def test_failover_moved_replica_lost_dir():
    s9 = catalog.move_replica(fail="source")
    h = H().register_all(0).layout(1)
    h.harness(5000, "fault_injected", 2, fault_id="f0", kind="move-replica", node_ref="follower:t1/0",
              topic="t1", partition=0)
    h.disk_fault(5300, 2, 0, node_ref="follower:t1/0")
    h.status(40_000, 2, True)
    assert check_failover(s9, h.build()).valid is False
    h.partition(5400, 0, 1, [1, 3], dirs=[DIRS[1][0], "AAAAAAAAAAAAAAAAAAAAAQ", DIRS[3][0]],
                reason="assign_replicas_to_dirs")
    r = check_failover(s9, h.build())
    assert r.valid is True and r.details["moves"][0]["lost_dir_recorded"] is True
    assert check_failover(catalog.move_replica(fail="target"), h.build()).valid is False


def _target_move(*, accepted: bool = False, done_before_fault: bool = False) -> H:
    h = H().register_all(0).layout(1)
    h.harness(5000, "fault_injected", 2, fault_id="f0", kind="move-replica", node_ref="follower:t1/0",
              topic="t1", partition=0)
    h.node(5020, 2, "broker", "dir_move_started", topic="t1", partition=0)
    if accepted:
        h.node(5250, 2, "broker", "dir_move_accepted", topic="t1", partition=0)
    if done_before_fault:
        h.node(5200, 2, "broker", "dir_move_done", topic="t1", partition=0)
    h.disk_fault(5300, 2, 1, node_ref="follower:t1/0")
    h.status(40_000, 2, True)
    return h


def test_failover_move_target_fails_cancel_and_revert():
    """Target dir fails mid-move: b stays in the ISR — or, when the controller had already
    accepted the target (assignment acked before the failure), leaves it at the dir failure
    and is back within the bound once the broker reverted the assignment (behaviour §4.3)."""
    s9 = catalog.move_replica(fail="target")
    assert check_failover(s9, _target_move().build()).details["moves"][0]["valid"] is True
    h = _target_move()
    h.partition(5350, 0, 1, [1, 3], reason="log_dir_offline")
    h.partition(5550, 0, 1, [1, 3, 2], reason="alter_partition")
    move = check_failover(s9, h.build()).details["moves"][0]
    assert move["valid"] is False and "should cancel" in move["problem"]     # not accepted: must not leave
    h = _target_move(accepted=True)
    h.partition(5350, 0, 1, [1, 3], reason="log_dir_offline")
    assert check_failover(s9, h.build()).details["moves"][0]["valid"] is False   # never back
    h.partition(5550, 0, 1, [1, 3, 2], reason="alter_partition")
    move = check_failover(s9, h.build()).details["moves"][0]
    assert move["valid"] is True and move["reverted"] is True and move["out_of_isr_ms"] == pytest.approx(200)


def test_failover_source_fails_as_the_swap_lands():
    """The swap installs the future in the target, then its delete of the old log fails the
    source: the replica lives in a healthy dir and must stay in the ISR (campaign S9 seed 2:
    the broker marked it offline and its leader dropped it 5.3 s later)."""
    s9 = catalog.move_replica(fail="source")
    h = H().register_all(0).layout(1)
    h.harness(5000, "fault_injected", 2, fault_id="f0", kind="move-replica", node_ref="follower:t1/0",
              topic="t1", partition=0)
    h.node(5020, 2, "broker", "dir_move_started", topic="t1", partition=0)
    h.node(5250, 2, "broker", "dir_move_accepted", topic="t1", partition=0)
    h.disk_fault(5300, 2, 0, node_ref="follower:t1/0")
    h.node(5310, 2, "broker", "dir_move_done", topic="t1", partition=0)
    h.status(40_000, 2, True)
    move = check_failover(s9, h.build()).details["moves"][0]
    assert move["valid"] is True and move["swap_landed_ms"] == pytest.approx(10)
    h.partition(10_600, 0, 1, [1, 3], reason="alter_partition")
    move = check_failover(s9, h.build()).details["moves"][0]
    assert move["valid"] is False and "the swap landed in the target, yet broker 2 left the ISR" in move["problem"]


def test_failover_move_finished_before_the_fault_is_unknown():
    """A dir fault after the swap tests nothing mid-move: neither a pass nor a fail."""
    for fail in ("source", "target"):
        h = _target_move(done_before_fault=True)
        h.partition(5350, 0, 1, [1, 3], reason="log_dir_offline")
        move = check_failover(catalog.move_replica(fail=fail), h.build()).details["moves"][0]
        assert move["valid"] == UNKNOWN and "nothing mid-move" in move["problem"]


# ---------------------------------------------------------------- liveness

def test_liveness_true_false_unknown():
    assert check_liveness(S1, s1_history().build()).valid is True
    h = s1_history()
    h.node(9000, 1, "broker", "halt", reason="last dir")
    r = check_liveness(S1, h.build())
    assert r.valid is False and "expected alive, observed halted" in r.summary
    h = H().disk_fault(5000, 1, 0, node_ref="leader:t1/0")
    assert check_liveness(S1, h.build()).valid == UNKNOWN


def test_liveness_resolves_refs_and_ignores_harness_kills():
    s6 = catalog.last_dir_fails()
    h = H().disk_fault(5000, 3, 0, node_ref="leader:t1/0", dir_ref="all")
    h.node(5100, 3, "broker", "halt", reason="all log dirs failed")
    h.harness(5101, "node_exited", 3, exit_code=1, expected=False)
    h.harness(7000, "node_exited", 1, exit_code=-9, expected=True).harness(9000, "node_started", 1)
    for b in (1, 2):
        h.status(30_000, b, True)
    h.status(30_000, 3, False)
    r = check_liveness(s6, h.build())
    assert r.valid is False and "never fenced" in r.summary
    h.ctl(8000, "fenced", broker_id=3, reason="session_timeout")
    r = check_liveness(s6, h.build())
    assert r.valid is True, r.details
    assert r.details["brokers"]["3"]["expected"] == "halted"


# ---------------------------------------------------------------- timeout accuracy

def s4_history(shutdown_after_ms: float | None, end_ms: float = 30_000, broker: int = 1) -> H:
    h = H().register_all(0).layout(1)
    h.harness(5000, "fault_injected", broker, fault_id="f0", kind="network", action="partition",
              node_ref="leader:t1/0", peer_id=3001)
    h.disk_fault(5500, broker, 0, node_ref="leader:t1/0", fault_id="f1")
    h.node(5600, broker, "broker", "dir_offline", dir_id=DIRS[broker][0])
    if shutdown_after_ms is not None:
        h.node(5600 + shutdown_after_ms, broker, "broker", "failure_timeout_shutdown", dir_id=DIRS[broker][0])
    h.status(end_ms, 2, True)
    return h


def test_timeout_accuracy_shutdown_expected():
    assert S4.configs.log_dir_failure_timeout_ms == 5000 and S4.configs.heartbeat_interval_ms == 500
    assert check_timeout_accuracy(S4, s4_history(5300).build()).valid is True
    r = check_timeout_accuracy(S4, s4_history(7000).build())
    assert r.valid is False and "expected 5000 ± 500" in r.summary
    assert check_timeout_accuracy(S4, s4_history(None).build()).valid is False
    assert check_timeout_accuracy(S4, s4_history(None, end_ms=8000).build()).valid == UNKNOWN


def test_timeout_accuracy_no_shutdown_when_not_leading():
    assert check_timeout_accuracy(S5, s4_history(None, broker=2).build()).valid is True
    assert check_timeout_accuracy(S5, s4_history(5000, broker=2).build()).valid is False
    assert check_timeout_accuracy(S5, s4_history(None, end_ms=9000, broker=2).build()).valid == UNKNOWN


def test_timeout_accuracy_ignores_delay_faults():
    """A slow dir never goes offline by design: the soak's delay faults made its verdict
    unknown ("timer start unknown") in every run of the campaign."""
    h = s4_history(None, broker=2)
    h.disk_fault(9000, 3, 1, mode="delay", fault_id="f9")
    assert check_timeout_accuracy(S5, h.build()).valid is True
    only_delay = H().register_all(0).layout(1).disk_fault(5500, 3, 1, mode="delay")
    r = check_timeout_accuracy(S5, only_delay.status(30_000, 3, True).build())
    assert r.valid == UNKNOWN and "delay faults are not failures" in r.summary


# ---------------------------------------------------------------- fencing (D4)

def s7_history(assign_first: bool, queued_until_ms: float | None = None) -> H:
    s7 = H().register_all(0).layout(1)
    s7.ctl(5000, "fenced", broker_id=3)
    s7.partition(8000, 0, 1, [1, 2, 3], [1, 2, 3], [DIRS[1][0], DIRS[2][0], "AAAAAAAAAAAAAAAAAAAAAA"],
                 topic="t2", reason="create")
    s7.ctl(13_000, "registered", broker_id=3, dirs=DIRS[3], fenced=True)
    s7.node(13_050, 3, "broker", "assignment_queued", queued=1)
    if assign_first:
        s7.partition(13_200, 0, 1, [1, 2, 3], dirs=[DIRS[1][0], DIRS[2][0], DIRS[3][2]], topic="t2",
                     reason="assignment")
        s7.node(13_210, 3, "broker", "assignment_acked", queued=0)
    if queued_until_ms is not None:
        s7.node(queued_until_ms, 3, "broker", "assignment_queued", queued=2)
    s7.ctl(14_000, "unfenced", broker_id=3)
    return s7


def test_fencing_true_false_unknown():
    s7 = catalog.restart_fenced_until_assigned()
    assert check_fencing(s7, s7_history(True).build()).valid is True
    r = check_fencing(s7, s7_history(False).build())
    assert r.valid is False and "UNASSIGNED" in r.summary
    r = check_fencing(s7, s7_history(True, queued_until_ms=13_300).build())
    assert r.valid is False and "queued" in r.summary
    assert check_fencing(s7, s7_history(True, queued_until_ms=13_900).build()).valid is True  # within a heartbeat
    assert check_fencing(s7, H().register_all(0, fenced=True).build()).valid == UNKNOWN


# ---------------------------------------------------------------- metadata invariants

def test_metadata_invariants_true_false_unknown():
    assert check_metadata_invariants(S1, s1_history().build()).valid is True
    h = s1_history()
    h.partition(7000, 1, 1, [1, 2, 3], reason="election")   # broker 1 leads t1-1 on d2: fine
    h.partition(8000, 0, 1, [1, 2], reason="election")       # leader 1 on offline d1: violation
    r = check_metadata_invariants(S1, h.build())
    assert r.valid is False and "offline dir" in r.summary
    h = H().register_all(0)
    h.partition(1, 0, 1, [1, 2], [1, 2, 3], [DIRS[1][0], DIRS[2][0]])
    r = check_metadata_invariants(S1, h.build())
    assert r.valid is False and "2 directories for 3 replicas" in r.summary
    assert check_metadata_invariants(S1, H().build()).valid == UNKNOWN
    h = H().register_all(0).partition(1, 0, 1, [1, 2])      # no replicas in events
    assert check_metadata_invariants(S1, h.build()).valid == UNKNOWN


def test_metadata_invariants_tolerate_a_transient_within_one_commit():
    h = H().register_all(0).layout(1)
    # the registration change is logged before the partition change of the same commit
    h.ctl(5000, "registration_change", broker_id=1, dirs=DIRS[1][1:], reason="dir_offline")
    h.partition(5001, 0, 2, [2, 3], reason="dir_offline")
    assert check_metadata_invariants(S1, h.build()).valid is True


def test_leader_in_isr_and_empty_isr_are_violations():
    h = H().register_all(0)
    h.partition(1, 0, 1, [2, 3], [1, 2, 3], [DIRS[1][0], DIRS[2][0], DIRS[3][0]])
    assert check_metadata_invariants(S1, h.build()).valid is False
    h = H().register_all(0)
    h.partition(1, 0, -1, [], [1, 2, 3], [DIRS[1][0], DIRS[2][0], DIRS[3][0]])
    assert "empty ISR" in check_metadata_invariants(S1, h.build()).summary


def test_check_result_serializes():
    r = CheckResult("x", UNKNOWN, "why", {"a": {1, 2} and [1]})
    assert r.to_dict()["valid"] == "unknown"


def test_failover_false_when_replica_rejoins_isr_on_the_failed_dir():
    s3 = catalog.bounce_after_failure(role="leader")
    h = s1_history()
    h.harness(13_000, "fault_injected", 1, fault_id="f9", kind="process", action="restart", node_ref="leader:t1/0")
    h.ctl(14_000, "registered", broker_id=1, log_dirs=DIRS[1], fenced=True)   # d1 listed, then reported
    h.ctl(14_200, "broker_log_dirs_changed", broker_id=1, log_dirs=DIRS[1][1:], reason="log_dir_offline")
    h.ctl(14_500, "unfenced", broker_id=1)
    h.partition(15_000, 1, 2, [2, 3, 1], reason="alter_partition")       # healthy dir: back, good
    r = check_failover(s3, h.build())
    assert r.valid is True, r.summary
    h.partition(15_500, 0, 2, [2, 3, 1], reason="alter_partition")       # failed dir: must stay out
    r = check_failover(s3, h.build())
    assert r.valid is False and "still on the failed dir" in r.summary


def test_liveness_fence_after_halt_late_or_unknown():
    s6 = catalog.last_dir_fails()      # session 3000 + heartbeat 500 ms
    def run(fence_at, end_at):
        h = H().disk_fault(5000, 3, 0, node_ref="leader:t1/0", dir_ref="all")
        h.node(5100, 3, "broker", "halt", reason="all log dirs failed")
        if fence_at is not None:
            h.ctl(fence_at, "fenced", broker_id=3)
        for b in (1, 2):
            h.status(end_at, b, True)
        return check_liveness(s6, h.build())
    late = run(9000, 30_000)
    assert late.valid is False and "fenced only 3900 ms" in late.summary
    assert run(None, 7000).valid == UNKNOWN
    assert run(8600, 30_000).valid is True


def test_a_replica_reassigned_out_of_its_failed_dir_is_a_violation_KAFKA_16234():
    """Issue 41: the bounce variants' bug as the lab sees it — broker 1 restarted with d1 dead
    registers d2, d3 and assigns t1-0 to d2 (re-created there)."""
    h = s1_history()
    h.ctl(7000, "registered", broker_id=1, log_dirs=DIRS[1][1:], fenced=True, broker_epoch=20)
    h.partition(7200, 0, 2, [2, 3], [1, 2, 3], [DIRS[1][1], DIRS[2][0], DIRS[3][0]], reason="assign_replicas_to_dirs")
    r = check_metadata_invariants(S1, h.build())
    assert r.valid is False and "moved from its failed dir" in r.summary
    assert r.details["violations"][0]["invariant"] == "offline_replica_kept"


def test_a_replaced_disk_or_a_lost_dir_or_a_requested_move_is_not_a_violation():
    # the disk replaced: the replica is re-created in another dir afterwards
    h = s1_history()
    h.harness(6000, "fault_injected", 1, fault_id="f9", kind="replace-disk", dir_ids=[DIRS[1][0]])
    h.partition(7200, 0, 2, [2, 3], [1, 2, 3], [DIRS[1][1], DIRS[2][0], DIRS[3][0]], reason="assign_replicas_to_dirs")
    assert check_metadata_invariants(S1, h.build()).valid is True
    # LOST (a move's source failed, D6)
    h = s1_history()
    h.partition(7200, 0, 2, [2, 3], [1, 2, 3], [LOST_B64, DIRS[2][0], DIRS[3][0]], reason="lost")
    assert check_metadata_invariants(S1, h.build()).valid is True
    # a move the scenario asked for (its swap may land just as the source fails)
    h = s1_history()
    h.harness(4990, "fault_injected", 1, fault_id="f8", kind="move-replica", topic="t1", partition=0,
              dir_ids=[DIRS[1][1]])
    h.partition(5200, 0, 2, [2, 3], [1, 2, 3], [DIRS[1][1], DIRS[2][0], DIRS[3][0]], reason="assign_replicas_to_dirs")
    assert check_metadata_invariants(S1, h.build()).valid is True
    # a slow disk takes no dir away
    h = H().register_all(0).layout(1)
    h.disk_fault(5000, 1, 0, mode="delay")
    h.partition(7200, 0, 1, [1, 2, 3], [1, 2, 3], [DIRS[1][1], DIRS[2][0], DIRS[3][0]], reason="assign_replicas_to_dirs")
    assert check_metadata_invariants(S1, h.build()).valid is True
