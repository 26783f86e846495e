"""Metadata invariants, replayed from the controller's committed changes.

After every controller event (see :mod:`harness.checkers.replay`):
- **aligned**: ``len(directories) == len(replicas)`` for every partition;
- **leader_online**: a partition's leader has its replica on a dir that is online for that
  broker (UNASSIGNED/MIGRATING count as online, LOST as offline — behaviour §2);
- **leader_in_isr**: the leader (if any) is in the ISR;
- **isr_nonempty**: no partition's ISR becomes empty;
- **offline_replica_kept**: a replica whose dir a disk fault took away is never re-assigned
  to another dir of the same broker while that dir is not replaced — not during the run, and
  not after a restart with the disk still dead (KIP-858: "an offline partition is never
  re-created while its dir is offline"; KAFKA-16234). A move the scenario asked for
  (AlterReplicaLogDirs of that partition on that broker) and a LOST assignment are not
  re-assignments; the fault's window ends when the dir is replaced (``replace-disk``).
The controller logs a batch's records one by one, so a state may be inconsistent between two
events of one commit; a violation counts when it persists longer than ``SETTLE_MS`` or is
still there at the end of the history.
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult
from harness.checkers.common import injected_faults, partition_timelines
from harness.checkers.replay import LOST, MIGRATING, UNASSIGNED, MetadataView, PartitionView, replay
from harness.scenario.faults import DIR_LOSING_MODES
from harness.history.model import History

__all__ = ["check_metadata_invariants", "offline_replica_moves", "SETTLE_MS"]

SETTLE_MS = 50
RESERVED_DIRS = (UNASSIGNED, LOST, MIGRATING)


def offline_replica_moves(history: History) -> list[dict]:
    """Re-assignments of a replica out of a dir a disk fault took away, to another dir of the
    same broker, before that dir was replaced (each one a ``violations`` entry)."""
    faults = injected_faults(history)
    lost: list[tuple[int, str, int, int | None]] = []    # (broker, dir id, from ns, replaced ns)
    moves = {(f.node_id, str(f.attrs.get("topic")), int(f.attrs.get("partition", -1)))
             for f in faults if f.kind == "move-replica"}
    for f in faults:
        if f.kind != "disk" or f.mode not in DIR_LOSING_MODES or f.node_id is None:
            continue
        for d in f.dir_ids:
            if not d:
                continue
            replaced = min((r.ts_ns for r in faults if r.kind == "replace-disk" and r.node_id == f.node_id
                            and d in r.dir_ids and r.ts_ns >= f.ts_ns), default=None)
            lost.append((f.node_id, d, f.ts_ns, replaced))
    if not lost:
        return []
    out = []
    for (topic, partition), states in partition_timelines(history).items():
        prev = None
        for st in states:
            if prev is not None and st.replicas is not None and st.directories is not None \
                    and prev.replicas is not None and prev.directories is not None:
                for broker, dead, since, until in lost:
                    if not (since <= st.ts_ns and (until is None or st.ts_ns < until)):
                        continue
                    if broker not in st.replicas or broker not in prev.replicas or (broker, topic, partition) in moves:
                        continue
                    was = prev.directories[prev.replicas.index(broker)]
                    now = st.directories[st.replicas.index(broker)]
                    if was == dead and now != dead and now not in RESERVED_DIRS:
                        out.append({"invariant": "offline_replica_kept", "ts_ns": st.ts_ns, "lasted_ms": None,
                                    "detail": f"{topic}-{partition}: broker {broker}'s replica moved from its "
                                              f"failed dir {dead} to {now}"})
            prev = st
    return out


def _violations(p: PartitionView, view: MetadataView) -> dict[str, str]:
    out = {}
    name = f"{p.topic}-{p.partition}"
    if p.replicas is not None and p.directories is not None and len(p.replicas) != len(p.directories):
        out["aligned"] = f"{name}: {len(p.directories)} directories for {len(p.replicas)} replicas"
    if p.replicas is not None and not p.isr:
        out["isr_nonempty"] = f"{name}: empty ISR"
    if p.leader >= 0:
        if p.leader not in p.isr:
            out["leader_in_isr"] = f"{name}: leader {p.leader} not in ISR {p.isr}"
        broker = view.brokers.get(p.leader)
        d = p.dir_of(p.leader)
        if broker is not None and broker.dirs and not broker.dir_online(d):
            out["leader_online"] = f"{name}: leader {p.leader} on offline dir {d}"
    return out


def check_metadata_invariants(scenario, history: History) -> CheckResult:
    open_: dict[tuple, tuple[int, str]] = {}
    confirmed: list[dict] = []
    events = 0
    missing_replicas = set()
    settle_ns = SETTLE_MS * 1_000_000
    for e, view in replay(history):
        events += 1
        if e.event == "partition_change":
            key = (str(e.get("topic")), int(e.get("partition", -1)))
            parts = [view.partitions[key]] if key in view.partitions else []
            if parts and parts[0].replicas is None:
                missing_replicas.add(f"{key[0]}-{key[1]}")
        else:
            b = e.get("broker_id")
            parts = [p for p in view.partitions.values() if b is not None and p.leader == int(b)]
        for p in parts:
            now = _violations(p, view)
            for kind in ("aligned", "isr_nonempty", "leader_in_isr", "leader_online"):
                k = (kind, p.topic, p.partition)
                if kind in now and k not in open_:
                    open_[k] = (e.ts_ns, now[kind])
                elif kind not in now and k in open_:
                    since, msg = open_.pop(k)
                    if e.ts_ns - since > settle_ns:
                        confirmed.append({"invariant": kind, "detail": msg, "ts_ns": since,
                                          "lasted_ms": (e.ts_ns - since) / 1e6})
    for (kind, _, _), (since, msg) in open_.items():
        confirmed.append({"invariant": kind, "detail": msg, "ts_ns": since, "lasted_ms": None})
    confirmed += offline_replica_moves(history)
    details = {"controller_events": events, "violations": confirmed[:50], "violation_count": len(confirmed),
               "partitions_without_replicas": sorted(missing_replicas)[:20]}
    if confirmed:
        return CheckResult("metadata_invariants", False,
                           "; ".join(sorted({v['detail'] for v in confirmed})[:5]), details)
    if events == 0:
        return CheckResult("metadata_invariants", UNKNOWN, "no controller events in the history", details)
    if missing_replicas:
        return CheckResult("metadata_invariants", UNKNOWN,
                           "partition_change events without replicas: alignment cannot be judged", details)
    return CheckResult("metadata_invariants", True, f"{events} controller events replayed, invariants held", details)
