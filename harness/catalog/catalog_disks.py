"""S20–S23: the faults real disks have — partial, silent, lost — and Kafka's own chmod test.

- S20 ``segment-blocks-fail``: the blocks of t1-0's oldest segment on its leader go bad
  (dm-dust-like ``bad-blocks``, file target ``t1-0:oldest-segment``, the segment's cached
  pages evicted) 11 s in; a reader starts 1 s later from t1-0's beginning. Only that read
  meets the bad blocks: the leader's dir goes offline (KIP-858), leadership moves, the reader
  goes on from the new leader. The active segment and the other dirs work throughout.
- S21 ``silent-corruption``: corrupt reads (one bit flipped in every 4 KiB block) of t1-0's
  active segment on a follower, which is then killed and started again: its recovery reads
  the segment, finds the CRC mismatch and truncates the log there (Kafka's path), and the
  follower re-replicates from the leader. Then corrupt reads of t1-0's segments on the leader
  while a reader reads them from the beginning: the leader's read meets a batch whose CRC
  fails, and instead of serving it the dir goes offline and leadership moves. No corrupt
  value reaches any consumer (``no_corrupt_consumed``); ``corruption_detect_ms`` measures both.
- S22 ``power-cut``: t1-0's leader's every disk becomes a drive with a volatile cache
  (``lose-unsynced``), then the broker loses power (killed, what its disks never flushed is
  dropped) and comes back 3 s later: it recovers to what was synced and catches up. Then the
  same for a controller's metadata disk. acks=all, RF 3, min.insync 2: no acked record lost,
  and the controllers' logs agree (``quorum_logs``).
- S23 ``permission-denied``: Kafka's ``log_dir_failure_test`` — ``chmod a-w -R`` of the dir
  holding t1-0's leader replica; the broker runs as an unprivileged user, so its next create
  there (the health probe, a roll, a checkpoint) gets EACCES and the dir goes offline.

Each keeps the catalog's baseline: the first fault after 1 s of warm-up and 10 s of service.
"""

from __future__ import annotations

from harness.scenario.faults import DiskFault, ProcessFault
from harness.scenario.model import Scenario
from broker_impl.storage.partition_log import FLUSH_NEVER
from harness.scenario.sections import Expect, ReaderSpec, ServerConfigs, Workload

__all__ = ["segment_blocks_fail", "silent_corruption", "power_cut", "permission_denied", "DISK_SCENARIOS"]

FAULT_AT_MS = 11000            # = harness.catalog.catalog.FAULT_AT_MS (1 s warm-up + 10 s baseline)
LEADER = "leader:t1/0"
FOLLOWER = "follower:t1/0"
REPLICA_DIR = "replica:t1/0"
READER_AFTER_MS = 1000         # the reader starts behind: after the fault is in place
AFTER_FENCING_MS = 10000       # a killed broker is fenced after the session timeout (harness.catalog.catalog)
CHECKS = ("durability", "failover", "liveness", "metadata_invariants", "service", "no_corrupt_consumed")


def segment_blocks_fail(*, seed: int = 0) -> Scenario:
    """S20: bad blocks under the oldest segment of t1-0's leader replica, met by a reader."""
    return Scenario(
        id="S20", name="segment-blocks-fail", seed=seed,
        description="the blocks of t1-0's oldest segment on its leader go bad; a reader starts from t1-0's "
                    "beginning 1 s later",
        workload=Workload(duration_ms=FAULT_AT_MS + 11000,
                          readers=(ReaderSpec(topic="t1", partition=0, start_at_ms=FAULT_AT_MS + READER_AFTER_MS),)),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="bad-blocks",
                          file="t1-0:oldest-segment"),),
        checks=CHECKS,
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=15000,
                      must_show="only the read of the old segment fails; the dir goes offline when the reader "
                                "meets it, leadership moves, the reader goes on from the new leader; the active "
                                "segment and the other dirs keep serving; no acked record lost"))


def silent_corruption(*, seed: int = 0) -> Scenario:
    """S21: corrupt reads on a follower's dir (found at its recovery), then on the leader's
    (found on a read, never served)."""
    leader_at = FAULT_AT_MS + 6000
    return Scenario(
        id="S21", name="silent-corruption", seed=seed,
        description="corrupt reads of t1-0's active segment on a follower, killed and restarted (recovery finds "
                    "it); then corrupt reads of t1-0's segments on the leader while a reader reads them",
        workload=Workload(duration_ms=leader_at + 12000,
                          readers=(ReaderSpec(topic="t1", partition=0, start_at_ms=leader_at + READER_AFTER_MS),)),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=FOLLOWER, dir=REPLICA_DIR, mode="corrupt-reads", p=1.0,
                          file="t1-0:active-segment", duration_ms=5000),
                ProcessFault(at_ms=FAULT_AT_MS + 200, action="kill", node=FOLLOWER, signal="SIGKILL",
                             duration_ms=1500),
                DiskFault(at_ms=leader_at, node=LEADER, dir=REPLICA_DIR, mode="corrupt-reads", p=1.0,
                          file="t1-0:segments")),
        checks=CHECKS,
        expect=Expect(outcomes={LEADER: "alive", FOLLOWER: "alive"}, leader_moves=True, failover_within_ms=15000,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="the follower's recovery truncates its log at the corrupt batch and re-replicates; "
                                "the leader never serves a batch whose CRC fails: its dir goes offline and "
                                "leadership moves; no corrupt value consumed; no acked record lost"))


def power_cut(*, seed: int = 0) -> Scenario:
    """S22: a broker (t1-0's leader) and then a controller lose power with unsynced writes."""
    controller = "controller:3001"
    return Scenario(
        id="S22", name="power-cut", seed=seed,
        description="t1-0's leader's disks keep unsynced writes in a volatile cache; the broker loses power and "
                    "comes back 3 s later; then the same for controller 3001's metadata disk",
        # Kafka's flush policy (no flush by count, log.flush.interval.messages' default): acked
        # records sit in the page cache and a drive cache on every replica, as in Kafka; a
        # flush every 5 messages (the catalog's kafkatest setting) would leave little to lose
        configs=ServerConfigs(log_flush_interval_messages=FLUSH_NEVER),
        workload=Workload(duration_ms=FAULT_AT_MS + 20000),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir="all+metadata", mode="lose-unsynced"),
                DiskFault(at_ms=FAULT_AT_MS, node=controller, dir="metadata", mode="lose-unsynced"),
                ProcessFault(at_ms=FAULT_AT_MS + 3000, action="power-cut", node=LEADER, duration_ms=3000),
                ProcessFault(at_ms=FAULT_AT_MS + 9000, action="power-cut", node=controller, duration_ms=3000)),
        checks=("durability", "failover", "liveness", "metadata_invariants", "quorum_logs", "service",
                "no_corrupt_consumed"),
        expect=Expect(outcomes={LEADER: "alive", controller: "alive"}, failover_within_ms=15000,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="the broker restarts, recovers to what its disks had synced and catches up from "
                                "the leader; no acked record lost (acks=all, RF 3, min.insync 2); the "
                                "controllers' metadata logs agree after the controller's power cut"))


def permission_denied(*, seed: int = 0) -> Scenario:
    """S23: kafkatest's log_dir_failure_test — chmod a-w -R on the leader's dir."""
    return Scenario(
        id="S23", name="permission-denied", seed=seed,
        description="chmod a-w -R the dir holding t1-0's leader replica (the broker runs unprivileged)",
        workload=Workload(duration_ms=FAULT_AT_MS + 11000),
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="permission"),),
        checks=CHECKS,
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=15000,
                      must_show="the broker's next create in the dir gets EACCES: the dir goes offline, leadership "
                                "moves, the broker stays alive serving its other dirs; no acked record lost"))


DISK_SCENARIOS = {"S20": segment_blocks_fail, "S21": silent_corruption, "S22": power_cut, "S23": permission_denied}
