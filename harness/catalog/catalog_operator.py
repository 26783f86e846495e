"""S17–S18: the operator's tools around a disk failure, through a real admin client
(kafka-python's KafkaAdminClient: the schedule's ``admin`` actions, :mod:`harness.nemesis.operator`).

- S17 ``replace-disk-by-reassignment``: 4 brokers. The dir holding t1-0's leader replica
  fails 11 s in (it stays failed); 3 s later the operator moves every partition whose replica
  on that broker lived in the failed dir to the other brokers (AlterPartitionReassignments;
  the broker's other dirs keep theirs) while the producers go on: the new
  replicas catch up from the leaders, join the ISR, the old ones leave. Checks: no acked
  record lost, each moved partition on its target replicas fully replicated and led
  (``reassignment_complete``), service back (``service``: the partitions outside the moves
  keep their latency, the moved ones recover).
- S18 ``preferred-leaders-return``: the dir holding t1-0's leader replica fails 11 s in and
  is repaired 3 s later; the broker restarts (its dir back) at 15 s, rejoins the ISRs, and the
  controller's auto rebalance (``leader.imbalance.check.interval.seconds`` 3) moves the
  leadership of the partitions it prefers back to it; the operator's PREFERRED ElectLeaders
  at 25 s finds nothing left to do (ELECTION_NOT_NEEDED) or finishes it. ``leader_rebalance_ms``
  (restart → every preferred leadership back) is in the run's metrics; ``preferred_leaders``
  checks the end state.

Timing rule of the catalog: the first fault at :data:`FAULT_AT_MS` (1 s warm-up + 10 s of
baseline service).
"""

from __future__ import annotations

from harness.scenario.faults import AdminAction, DiskFault, ProcessFault
from harness.scenario.model import Scenario
from harness.scenario.sections import Expect, ServerConfigs, Topology, Workload

__all__ = ["replace_disk_by_reassignment", "preferred_leaders_return", "OPERATOR_SCENARIOS"]

FAULT_AT_MS = 11000            # = harness.catalog.catalog.FAULT_AT_MS
LEADER = "leader:t1/0"
REPLICA_DIR = "replica:t1/0"
REASSIGN_AFTER_MS = 3000       # the operator reacts 3 s after the dir failed
AFTER_MOVES_MS = 20000         # moves of ~9 partitions at 200 records/s, then a service window
HEAL_AFTER_MS = 3000
RESTART_AFTER_MS = 4000
ELECT_AFTER_MS = 14000
REBALANCE_INTERVAL_S = 3


def replace_disk_by_reassignment(*, seed: int = 0) -> Scenario:
    """S17: a dir fails; the operator moves its partitions to other brokers."""
    return Scenario(
        id="S17", name="replace-disk-by-reassignment", seed=seed,
        topology=Topology(brokers=4),
        description="fail the dir holding t1-0's leader replica, then move the partitions of that dir to the other "
                    "brokers (AlterPartitionReassignments) under acks=all load",
        workload=Workload(duration_ms=FAULT_AT_MS + REASSIGN_AFTER_MS + AFTER_MOVES_MS),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="error"),
                AdminAction(at_ms=FAULT_AT_MS + REASSIGN_AFTER_MS, action="reassign", node=LEADER, dir=REPLICA_DIR)),
        checks=("durability", "liveness", "metadata_invariants", "service", "reassignment_complete"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, service_recovery_within_ms=15000,
                      must_show="the failed dir's leaders move; the operator's reassignment adds the targets, "
                                "they join the ISR, the old replicas leave; every moved partition fully "
                                "replicated on its new brokers; no acked record lost"))


def preferred_leaders_return(*, seed: int = 0) -> Scenario:
    """S18: after the heal and a restart, leadership returns to the preferred replicas."""
    return Scenario(
        id="S18", name="preferred-leaders-return", seed=seed,
        description="fail the dir holding t1-0's leader replica, repair it, restart the broker; the controller's "
                    "auto rebalance (and the operator's PREFERRED ElectLeaders) bring its leaderships back",
        configs=ServerConfigs(controller_overrides={
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": str(REBALANCE_INTERVAL_S)}),
        workload=Workload(duration_ms=FAULT_AT_MS + ELECT_AFTER_MS + 8000),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="error", duration_ms=HEAL_AFTER_MS),
                ProcessFault(at_ms=FAULT_AT_MS + RESTART_AFTER_MS, action="restart", node=LEADER, clean=True),
                AdminAction(at_ms=FAULT_AT_MS + ELECT_AFTER_MS, action="elect", election="preferred")),
        checks=("durability", "liveness", "metadata_invariants", "service", "preferred_leaders"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, isr_recovers=True,
                      service_recovery_within_ms=15000,
                      must_show="leadership moves off the failed dir, the broker restarts with it repaired and "
                                "rejoins the ISRs; the auto rebalance returns its leaderships "
                                "(leader_rebalance_ms); every partition led by its preferred replica at the end"))


OPERATOR_SCENARIOS = {"S17": replace_disk_by_reassignment, "S18": preferred_leaders_return}
