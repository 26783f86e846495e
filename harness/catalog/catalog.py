"""S1–S11 of ``scenarios.md``, S12–S14 (the controller quorum under KIP-858 failures:
:mod:`harness.catalog.catalog_quorum`), S15
(S1 at 300 partitions), S16 (a group coordinator's offsets dir fails) and S20–S23 (partial,
silent and lost-write disk faults, chmod: :mod:`harness.catalog.catalog_disks`) as functions
returning :class:`~harness.scenario.model.Scenario` values.

Each function takes ``bounce`` (where kafkatest's ``bounce_broker`` matrix applies: the
faulted broker gets a clean restart 1 s after the fault, with the dir still failed) and
``seed``. :func:`all_scenarios` is the full matrix (pytest parametrizes over it);
:func:`by_name` finds one by name (``leader-dir-fails``, ``leader-dir-fails-bounce``) or id
(``S1``). The "must show" column of the table is encoded as the checks plus ``expect``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from harness.scenario.faults import (
    DiskFault, MoveReplica, NetworkFault, ProcessFault, ReplaceDisk, soak_schedule,
)
from broker_impl.groups.state.records import partition_for
from broker_impl.storage.partition_log import FLUSH_NEVER
from harness.scenario.model import CHECK_NAMES, Scenario
from harness.scenario.sections import Expect, ServerConfigs, Topology, TopicSpec, Workload
from harness.catalog.catalog_disks import DISK_SCENARIOS, FAULT_AT_MS as _DISK_FAULT_AT_MS
from harness.catalog.catalog_admin import ADMIN_SCENARIOS, FAULT_AT_MS as _ADMIN_FAULT_AT_MS
from harness.catalog.catalog_operator import OPERATOR_SCENARIOS, FAULT_AT_MS as _OPERATOR_FAULT_AT_MS
from harness.catalog.catalog_quorum import (CONTROLLER_SCENARIOS, QUORUM_SCENARIOS, FAULT_AT_MS as _QUORUM_FAULT_AT_MS,
                                      active_controller_killed_during_report, active_controller_metadata_disk_fails,
                                      active_controller_partitioned_during_report)

__all__ = [
    "leader_dir_fails", "follower_dir_fails", "bounce_after_failure", "failure_timeout_shutdown",
    "timeout_not_leader", "last_dir_fails", "metadata_dir_fails", "restart_fenced_until_assigned",
    "replace_disk", "move_replica", "flaky_and_slow", "many_partitions", "soak", "all_scenarios", "by_name",
    "BOUNCE_APPLIES", "active_controller_killed_during_report", "active_controller_metadata_disk_fails",
    "active_controller_partitioned_during_report", "CONTROLLER_SCENARIOS", "offsets_dir_fails",
]

# the first fault comes after 1 s of warm-up and a 10 s baseline (the service check's
# "before" window): 10 s of each partition's own latency before anything fails
BASELINE_MS = 10000
FAULT_AT_MS = 1000 + BASELINE_MS
assert FAULT_AT_MS == _DISK_FAULT_AT_MS == _ADMIN_FAULT_AT_MS == _OPERATOR_FAULT_AT_MS == _QUORUM_FAULT_AT_MS
MANY_PARTITIONS = 300
MANY_RATE_PER_S = 300          # 1 record/s per partition (S15's docstring: the lab's capacity)
MANY_FAULT_AT_MS = 23000       # 1 s warm-up + 22 baseline ops per partition (the check needs 20)
MANY_AFTER_FAULT_MS = 22000    # a recovery plus one more 10-op window (10 s at 1/s), then some
KAFKA_ROLL_MS = 7 * 24 * 3600 * 1000   # log.roll.ms' default (log.roll.hours 168)
BOUNCE_AFTER_MS = 1000
CONTROLLER = "controller:3001"
LEADER = "leader:t1/0"
FOLLOWER = "follower:t1/0"
REPLICA_DIR = "replica:t1/0"
ONE_PARTITION = Workload(topics=(TopicSpec(name="t1", partitions=1),))
# service recovery bounds (expect.service_recovery_within_ms) where the KIP makes clients wait on
# purpose: a broker that stops heartbeating is fenced only after the session timeout (3 s), a
# follower that stops fetching leaves the ISR after replica.lag.time.max.ms (5 s)
AFTER_FENCING_MS = 10000
# S4: clients keep producing to the leader cut off from the controller until it exits at the
# failure timeout (5 s after its dir failed), then find the new leader: ~7.5 s measured
AFTER_FAILURE_TIMEOUT_MS = 15000
SOAK_RECOVERY_MS = 15000
# S4/S5 cut a broker off from "the controller" with one network partition: with a quorum the
# broker would still reach the others (and rightly report there), so they keep one controller
ONE_CONTROLLER = Topology(controllers=1)

# scenario names whose broker stays alive after the fault, so a bounce variant means something
BOUNCE_APPLIES = ("leader-dir-fails", "follower-dir-fails", "flaky-and-slow")


def _bounced(s: Scenario, node: str, bounce: bool) -> Scenario:
    if not bounce:
        return s
    restart = ProcessFault(at_ms=FAULT_AT_MS + BOUNCE_AFTER_MS, action="restart", node=node, clean=True)
    return replace(s, bounce=True, faults=tuple(sorted(s.faults + (restart,), key=lambda f: f.at_ms)))


def leader_dir_fails(*, bounce: bool = False, seed: int = 0) -> Scenario:
    """S1 (kafkatest log_dir_failure_test, leader case)."""
    s = Scenario(
        id="S1", name="leader-dir-fails", seed=seed,
        description="fail the dir holding t1-0's leader replica under acks=all load",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="error"),),
        checks=("durability", "failover", "liveness", "metadata_invariants", "fencing", "service"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=15000,
                      must_show="leader moves off the broker; ISR loses it; broker stays alive and keeps "
                                "serving its other dirs; no acked record lost"))
    return _bounced(s, LEADER, bounce)


def follower_dir_fails(*, bounce: bool = False, seed: int = 0) -> Scenario:
    """S2 (kafkatest log_dir_failure_test, follower case)."""
    s = Scenario(
        id="S2", name="follower-dir-fails", seed=seed,
        description="fail the dir holding a follower replica of t1-0 under acks=all load",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=FOLLOWER, dir=REPLICA_DIR, mode="error"),),
        checks=("durability", "failover", "liveness", "metadata_invariants", "fencing", "service"),
        expect=Expect(outcomes={FOLLOWER: "alive"}, leader_moves=False, failover_within_ms=15000,
                      must_show="ISR shrinks; leader unchanged; no loss"))
    return _bounced(s, FOLLOWER, bounce)


def bounce_after_failure(*, role: str = "leader", seed: int = 0) -> Scenario:
    """S3: S1/S2, then (after failover settled) a clean restart with the dir still failed."""
    node = LEADER if role == "leader" else FOLLOWER
    return Scenario(
        id="S3", name=f"bounce-after-failure-{role}", seed=seed,
        description=f"fail the {role} replica's dir of t1-0, then restart that broker with the dir still failed",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=node, dir=REPLICA_DIR, mode="error"),
                ProcessFault(at_ms=FAULT_AT_MS + 8000, action="restart", node=node, clean=True)),
        checks=("durability", "failover", "liveness", "metadata_invariants", "fencing", "service"),
        workload=Workload(duration_ms=40000),
        expect=Expect(outcomes={node: "alive"}, leader_moves=(role == "leader"), isr_recovers=True,
                      must_show="broker starts with the dir offline, registers, partitions on it stay "
                                "offline, others recover"))


def failure_timeout_shutdown(*, seed: int = 0) -> Scenario:
    """S4: broker cut off from the controller, then a dir it leads on fails → exits at the
    failure timeout (D5), fenced after the session timeout."""
    return Scenario(
        id="S4", name="failure-timeout-shutdown", seed=seed, workload=ONE_PARTITION, topology=ONE_CONTROLLER,
        description="partition t1-0's leader from the controller, then fail the dir it leads t1-0 on",
        faults=(NetworkFault(at_ms=FAULT_AT_MS, action="partition", node=LEADER, peer=CONTROLLER),
                DiskFault(at_ms=FAULT_AT_MS + 500, node=LEADER, dir=REPLICA_DIR, mode="error")),
        checks=("durability", "liveness", "timeout_accuracy", "metadata_invariants", "service"),
        expect=Expect(outcomes={LEADER: "shutdown"}, timeout_shutdown=True, leader_moves=True,
                      service_recovery_within_ms=AFTER_FAILURE_TIMEOUT_MS,
                      must_show="broker exits after log.dir.failure.timeout.ms (± one heartbeat); controller "
                                "fences it after the session timeout; no loss"))


def timeout_not_leader(*, seed: int = 0) -> Scenario:
    """S5: as S4 but the broker only follows partitions in that dir → no shutdown (D5)."""
    return Scenario(
        id="S5", name="timeout-not-leader", seed=seed, workload=ONE_PARTITION, topology=ONE_CONTROLLER,
        description="partition a follower of t1-0 (leading nothing) from the controller, then fail its dir",
        faults=(NetworkFault(at_ms=FAULT_AT_MS, action="partition", node=FOLLOWER, peer=CONTROLLER),
                DiskFault(at_ms=FAULT_AT_MS + 500, node=FOLLOWER, dir=REPLICA_DIR, mode="error")),
        checks=("durability", "liveness", "timeout_accuracy", "metadata_invariants", "service"),
        expect=Expect(outcomes={FOLLOWER: "alive"}, timeout_shutdown=False, leader_moves=False,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="broker does NOT shut down (decision D5)"))


def last_dir_fails(*, seed: int = 0) -> Scenario:
    """S6a: every data dir of t1-0's leader fails → halt; fenced after the session timeout."""
    return Scenario(
        id="S6", name="last-dir-fails", seed=seed,
        description="fail every data dir of t1-0's leader",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir="all", mode="error"),),
        checks=("durability", "failover", "liveness", "metadata_invariants", "service"),
        expect=Expect(outcomes={LEADER: "halted"}, leader_moves=True, failover_within_ms=15000,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="broker halts; controller fences it after session timeout; leaders move"))


def metadata_dir_fails(*, seed: int = 0) -> Scenario:
    """S6b: the metadata dir of t1-0's leader fails → halt."""
    return Scenario(
        id="S6", name="metadata-dir-fails", seed=seed,
        description="fail the metadata.log.dir of t1-0's leader",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=LEADER, dir="metadata", mode="error"),),
        checks=("durability", "liveness", "metadata_invariants", "service"),
        expect=Expect(outcomes={LEADER: "halted"}, leader_moves=True, service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="broker halts; controller fences it after session timeout; leaders move"))


def restart_fenced_until_assigned(*, seed: int = 0) -> Scenario:
    """S7: broker 3 is down while topic t2 is created (its replicas there are UNASSIGNED);
    on restart it must stay fenced until its assignments are persisted (D4)."""
    return Scenario(
        id="S7", name="restart-fenced-until-assigned", seed=seed,
        description="kill broker 3, create t2 (6 partitions, RF 3) while it is down, start it again",
        workload=Workload(topics=(TopicSpec(name="t1"), TopicSpec(name="t2", partitions=6,
                                                                  create_at_ms=FAULT_AT_MS + 3000))),
        faults=(ProcessFault(at_ms=FAULT_AT_MS, action="kill", node="broker:3", signal="SIGKILL", duration_ms=8000),),
        checks=("durability", "liveness", "fencing", "metadata_invariants", "service"),
        expect=Expect(outcomes={"broker:3": "alive"}, service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="broker stays fenced until its assignments are persisted; fencing_ms measured"))


def replace_disk(*, seed: int = 0) -> Scenario:
    """S8: fail a follower's dir, then give it a freshly formatted disk."""
    return Scenario(
        id="S8", name="replace-disk", seed=seed, workload=Workload(duration_ms=40000),
        description="fail the dir of a follower replica of t1-0, then replace the disk",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node=FOLLOWER, dir=REPLICA_DIR, mode="error"),
                ReplaceDisk(at_ms=FAULT_AT_MS + 8000, node=FOLLOWER, dir=REPLICA_DIR)),
        checks=("durability", "failover", "liveness", "metadata_invariants", "fencing", "service"),
        expect=Expect(outcomes={FOLLOWER: "alive"}, leader_moves=False, isr_recovers=True,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="new directory id registered; replicas recreated there and re-replicated; "
                                "ISR expands"))


def move_replica(*, fail: str = "source", seed: int = 0) -> Scenario:
    """S9: AlterReplicaLogDirs t1-0 on a follower to another dir; fail the source or target
    mid-move. Source → LOST_DIR (D6), replica leaves ISR; target → move cancelled."""
    if fail not in ("source", "target"):
        raise ValueError(f"fail: {fail!r} is not one of source, target")
    failed = REPLICA_DIR if fail == "source" else "spare:t1/0"
    return Scenario(
        id="S9", name=f"move-replica-{fail}-fails", seed=seed,
        description=f"move t1-0 on a follower to another dir, fail the {fail} dir right after the broker "
                    "accepted the move request (mid-move)",
        # same at_ms: the plan keeps the schedule's order, so the dir fails right after the
        # AlterReplicaLogDirs answer. 300 ms later (the first catalog) the move of a partition
        # had often finished (~170-250 ms): the fault then hit the replica's new home and the
        # check passed or failed without testing a failure mid-move (the campaign showed it)
        faults=(MoveReplica(at_ms=FAULT_AT_MS, node=FOLLOWER, topic="t1", partition=0, to_dir="spare:t1/0"),
                DiskFault(at_ms=FAULT_AT_MS, node=FOLLOWER, dir=failed, mode="error")),
        checks=("durability", "failover", "liveness", "metadata_invariants", "service"),
        expect=Expect(outcomes={FOLLOWER: "alive"}, leader_moves=False,
                      moved_replica_survives=(fail == "target"),
                      must_show="KIP §4 outcomes, incl. LOST_DIR when the source fails"))


def flaky_and_slow(*, bounce: bool = False, seed: int = 0) -> Scenario:
    """S10: flaky(p) on one broker's dir, delay on another's; offline on the first error, and
    no false failover for the slow dir."""
    s = Scenario(
        id="S10", name="flaky-and-slow", seed=seed,
        description="flaky(p=0.05) on broker 1's dir holding t1-0; 50 ms delay on broker 2's d2",
        faults=(DiskFault(at_ms=FAULT_AT_MS, node="broker:1", dir=REPLICA_DIR, mode="flaky", p=0.05,
                          duration_ms=10000),
                DiskFault(at_ms=FAULT_AT_MS, node="broker:2", dir="d2", mode="delay", delay_ms=50,
                          duration_ms=10000)),
        checks=("durability", "failover", "liveness", "metadata_invariants", "service"),
        expect=Expect(outcomes={"broker:1": "alive", "broker:2": "alive"},
                      must_show="the broker marks the dir offline on the first error; slow dir measured, "
                                "no false failover"))
    return _bounced(s, "broker:1", bounce)


def many_partitions(*, seed: int = 0) -> Scenario:
    """S15: S1 at a real shape — 300 partitions RF 3 (each broker leads 100 and follows 200,
    100 replicas per dir), 300 records/s from 4 producers: 1/s per partition, so the fault
    comes at 23 s for each partition's baseline to hold the service check's 20 ops, and the
    workload runs 22 s past it (a rolling window is 10 ops wide: 10 s at this rate).

    The load is what the lab carries with headroom on the slowest 2-core machine it has met
    (2026-12-01: ~2.5x slower per core than 2026-11-28's). Every record is its own
    ProduceRequest (librdkafka sends one partition per request) and its own fetch round on
    both followers, ~4 ms of the brokers' CPU a record there; 300/s kept the host 70-90 % busy
    (brokers ~1.2 cores), 500/s 90 % and 1000/s saturated it before any fault (baseline p50
    0.6-1 s: the service check rightly false, and blind to the fault). Earlier S15
    offered 1000/s (3.3/s per partition, the fault at 10 s), which fitted the faster machines.

    With Kafka's storage policy, not the catalog's kafkatest-style one: no flush by count
    (``log.flush.interval.messages`` never: the kernel writes back) and no roll by age within
    the run (``log.roll.ms`` Kafka's 7 days). At this shape the catalog's values load the lab's
    FUSE-backed loop devices, and the 2 cores that serve them, before any fault:
    - the fsync every 5 messages, on every replica: ~600 fsyncs a second at 1000/s, in every
      follower round; the cluster then ran in one of two states at the same broker CPU, a fast
      one (Produce 9-29 ms) or a backlog (client p50 0.3-1 s), often entered before the fault
      (measured: `service` true in 1 of 5 quiet runs; without it 12 of 17);
    - the 3 s roll: all 900 replicas' segments reach the age together, so every ~3 s a burst of
      900 rolls (a new segment each, and a background flush of the old one: ~1 ms of the
      machine's CPU a roll, ``jbodlab bench slowdisk``). Alternating quiet runs: with
      it the before-fault p99 0.7-3.0 s and `service` true in 0 of 7; without it 0.09-0.68 s
      and 9 of 13 (docs/status.md).
    The probe (``log.dir.probe.interval.ms`` 500 ms) and the appends still meet the failed dir
    (detected in 21-467 ms without the rolls, 20-439 ms with them)."""
    return Scenario(
        id="S15", name="many-partitions-leader-dir-fails", seed=seed,
        description="300 partitions RF 3; fail the dir holding t1-0's leader replica (100 replicas) under load",
        configs=ServerConfigs(log_flush_interval_messages=FLUSH_NEVER, log_roll_ms=KAFKA_ROLL_MS),
        workload=Workload(topics=(TopicSpec(name="t1", partitions=MANY_PARTITIONS),), rate_per_s=MANY_RATE_PER_S,
                          duration_ms=MANY_FAULT_AT_MS + MANY_AFTER_FAULT_MS, drain_timeout_ms=60000),
        faults=(DiskFault(at_ms=MANY_FAULT_AT_MS, node=LEADER, dir=REPLICA_DIR, mode="error"),),
        checks=("durability", "failover", "liveness", "metadata_invariants", "fencing", "service"),
        expect=Expect(outcomes={LEADER: "alive"}, leader_moves=True, failover_within_ms=15000,
                      service_recovery_within_ms=AFTER_FENCING_MS,
                      must_show="the dir's ~33 leaders move at once, split between the other two brokers; "
                                "every partition keeps or regains its service; "
                                "no acked record lost"))


def soak(*, minutes: int = 3, seed: int = 0) -> Scenario:
    """S11: a seeded random mix of the above for ``minutes``."""
    duration_ms = minutes * 60_000
    topology = Topology()
    faults = soak_schedule(seed, duration_ms=duration_ms, broker_ids=topology.broker_ids(), first_at_ms=FAULT_AT_MS,
                           dirs_per_broker=topology.dirs_per_broker, controller_id=topology.controller_ids()[0])
    return Scenario(
        id="S11", name="soak", seed=seed, topology=topology,
        description=f"seeded random mix of disk, network and process faults for {minutes} min",
        workload=Workload(duration_ms=duration_ms, drain_timeout_ms=60000), faults=faults,
        checks=CHECK_NAMES,
        expect=Expect(service_recovery_within_ms=SOAK_RECOVERY_MS,
                      must_show="all checks hold across every fault window"))


GROUP_ID = "jbodlab-group"
OFFSETS_PARTITIONS = 5


def offsets_dir_fails(*, seed: int = 0) -> Scenario:
    """S16 (kafkatest validates log_dir_failure_test with a consumer in a group):
    two group members consume t1 and commit after processing; the dir holding the
    ``__consumer_offsets`` partition of their group on its leader — the group coordinator —
    fails. The coordinator moves to the new leader, which loads the partition; the members
    find it and go on: no committed offset lost or going backwards, every acked record
    consumed by the group."""
    p = partition_for(GROUP_ID, OFFSETS_PARTITIONS)
    node, dir_ = f"leader:__consumer_offsets/{p}", f"replica:__consumer_offsets/{p}"
    return Scenario(
        id="S16", name="offsets-dir-fails", seed=seed,
        description=f"fail the dir holding __consumer_offsets-{p} (group {GROUP_ID}) on its leader while two "
                    "group members consume and commit",
        configs=ServerConfigs(broker_overrides={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                                                "group.initial.rebalance.delay.ms": "500"}),
        workload=Workload(group_consumers=2, group_id=GROUP_ID),
        faults=(DiskFault(at_ms=FAULT_AT_MS + 3000, node=node, dir=dir_, mode="error"),),
        checks=("durability", "liveness", "metadata_invariants", "service", "group_consumption"),
        expect=Expect(outcomes={node: "alive"},
                      must_show="the group's coordinator moves with its offsets partition; members rejoin; no "
                                "committed offset lost or going backwards; every acked record consumed by the "
                                "group"))


def all_scenarios(*, seed: int = 0) -> list[Scenario]:
    """The whole matrix: each scenario, ×2 for bounce where :data:`BOUNCE_APPLIES`."""
    out: list[Scenario] = []
    for bounce in (False, True):
        out += [leader_dir_fails(bounce=bounce, seed=seed), follower_dir_fails(bounce=bounce, seed=seed),
                flaky_and_slow(bounce=bounce, seed=seed)]
    out += [bounce_after_failure(role="leader", seed=seed), bounce_after_failure(role="follower", seed=seed),
            failure_timeout_shutdown(seed=seed), timeout_not_leader(seed=seed), last_dir_fails(seed=seed),
            metadata_dir_fails(seed=seed), restart_fenced_until_assigned(seed=seed), replace_disk(seed=seed),
            move_replica(fail="source", seed=seed), move_replica(fail="target", seed=seed), soak(seed=seed),
            *(make(seed=seed) for make in QUORUM_SCENARIOS.values()), many_partitions(seed=seed),
            offsets_dir_fails(seed=seed)]
    out += [make(seed=seed) for make in DISK_SCENARIOS.values()]
    out += [make(seed=seed) for make in OPERATOR_SCENARIOS.values()]
    out += [make(seed=seed) for make in ADMIN_SCENARIOS.values()]
    return out


def by_name(name: str, *, bounce: bool = False, seed: int = 0) -> Scenario:
    """A catalog scenario by variant name (``leader-dir-fails-bounce``), name + ``bounce``, or
    id (``S1``: the first with that id). Unknown names raise ``KeyError`` listing the names."""
    every = all_scenarios(seed=seed)
    want_bounce = bounce or name.endswith("-bounce")
    base = name[: -len("-bounce")] if name.endswith("-bounce") else name
    for s in every:
        if (s.name == base or s.id == base) and s.bounce == want_bounce:
            return s
    for s in every:
        if (s.name == base or s.id == base) and not want_bounce:
            return s
    names = sorted({s.variant for s in every})
    raise KeyError(f"no scenario {name!r}; choose from {', '.join(names)}")


SCENARIO_FUNCTIONS: dict[str, Callable[..., Scenario]] = {
    "S1": leader_dir_fails, "S2": follower_dir_fails, "S3": bounce_after_failure,
    "S4": failure_timeout_shutdown, "S5": timeout_not_leader, "S6": last_dir_fails,
    "S7": restart_fenced_until_assigned, "S8": replace_disk, "S9": move_replica, "S10": flaky_and_slow,
    "S11": soak, **QUORUM_SCENARIOS, "S15": many_partitions,
    "S16": offsets_dir_fails, **DISK_SCENARIOS, **OPERATOR_SCENARIOS, **ADMIN_SCENARIOS,
}
