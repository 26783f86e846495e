"""S12–S14: the controller quorum under KIP-858 failures. The active controller is killed, loses
its metadata disk or is cut off while a broker reports a failed dir; another controller takes
over and commits the report. They need a quorum (the default topology's three controllers).
"""

from __future__ import annotations

from harness.scenario.faults import DiskFault, NetworkFault, ProcessFault
from harness.scenario.model import Scenario
from harness.scenario.sections import Expect

__all__ = ["active_controller_killed_during_report", "active_controller_metadata_disk_fails",
           "active_controller_partitioned_during_report", "CONTROLLER_SCENARIOS", "QUORUM_SCENARIOS"]

FAULT_AT_MS = 11000            # = harness.catalog.catalog.FAULT_AT_MS (1 s warm-up + 10 s baseline)
ACTIVE_CONTROLLER = "controller:active"
LEADER = "leader:t1/0"
REPLICA_DIR = "replica:t1/0"


def active_controller_killed_during_report(*, seed: int = 0) -> Scenario:
    """S12: kill -9 of the active controller while t1-0's leader reports a failed dir."""
    return Scenario(
        id="S12", name="active-controller-killed-during-report", seed=seed,
        description="fail the dir of t1-0's leader replica; kill -9 the active controller 50 ms later",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="error"),
                ProcessFault(at_ms=FAULT_AT_MS + 50, action="kill", node=ACTIVE_CONTROLLER, signal="SIGKILL",
                             duration_ms=10000)),
        checks=("durability", "failover", "liveness", "metadata_invariants", "quorum_logs", "service"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=20000,
                      service_recovery_within_ms=20000,
                      must_show="another controller takes over and commits the report (the broker retries it "
                                "there); no committed record lost; no broker fenced by the failover"))


def active_controller_metadata_disk_fails(*, seed: int = 0) -> Scenario:
    """S13: the active controller's metadata disk fails at the block layer → it halts, the
    others elect a leader, and a broker's dir failure afterwards is committed by it."""
    return Scenario(
        id="S13", name="active-controller-metadata-disk-fails", seed=seed,
        description="fail the metadata disk of the active controller; 4 s later fail t1-0's leader's dir",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=ACTIVE_CONTROLLER, dir="metadata", mode="error"),
                DiskFault(at_ms=FAULT_AT_MS + 4000, node=LEADER, dir=REPLICA_DIR, mode="error")),
        checks=("durability", "failover", "liveness", "metadata_invariants", "quorum_logs", "service"),
        expect=Expect(outcomes={ACTIVE_CONTROLLER: "halted", LEADER: "alive"}, leader_moves=True,
                      failover_within_ms=20000, service_recovery_within_ms=20000,
                      must_show="the controller halts with a one-line reason; a new one leads and commits the "
                                "broker's dir failure"))


def active_controller_partitioned_during_report(*, seed: int = 0) -> Scenario:
    """S14: the active controller is cut off from everyone while t1-0's leader reports a
    failed dir: it resigns (check-quorum), the majority elects another, which commits it."""
    return Scenario(
        id="S14", name="active-controller-partitioned-during-report", seed=seed,
        description="isolate the active controller, fail t1-0's leader's dir 200 ms later, heal after 10 s",
        faults=(NetworkFault(at_ms=FAULT_AT_MS, action="isolate", node=ACTIVE_CONTROLLER, duration_ms=10000),
                DiskFault(at_ms=FAULT_AT_MS + 200, node=LEADER, dir=REPLICA_DIR, mode="error")),
        checks=("durability", "failover", "liveness", "metadata_invariants", "quorum_logs", "service"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=25000,
                      service_recovery_within_ms=25000,
                      must_show="the cut-off controller commits nothing (a minority); the majority side "
                                "elects a leader that commits the report; logs agree after the heal"))


QUORUM_SCENARIOS = {"S12": active_controller_killed_during_report, "S13": active_controller_metadata_disk_fails,
                    "S14": active_controller_partitioned_during_report}
CONTROLLER_SCENARIOS = ("active-controller-killed-during-report", "active-controller-metadata-disk-fails",
                        "active-controller-partitioned-during-report")
