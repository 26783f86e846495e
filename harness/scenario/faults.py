"""Fault schedule values: what happens when, as frozen data (no I/O here).

A schedule is a tuple of timed fault values; ``at_ms`` counts from the start of the workload.
The runner resolves the symbolic targets at injection time and records the resolved facts
(node id, dir id, path) in the history's ``fault_injected`` action, so checkers never need
to resolve anything themselves.

Targets (strings, validated against the topology and the workload's topics):

- node refs: ``broker:<id>``, ``controller:<id>``, ``controller:active`` (the active
  controller — the Raft leader — when the fault fires), ``leader:<topic>/<p>`` (the leader of
  that partition when the fault fires), ``follower:<topic>/<p>`` (its first ISR member that is
  not the leader).
- dir refs: ``d1`` … ``dN`` (position in the broker's ``log.dirs``), ``metadata`` (the
  ``metadata.log.dir``), ``all`` (every data dir), ``all+metadata`` (every dir of the node),
  ``replica:<topic>/<p>`` (the dir holding that partition's replica on the target broker),
  ``spare:<topic>/<p>`` (the first online data dir of the target broker that does not hold
  that replica: a move target).
- file targets (``DiskFault.file``: the block-level modes then meet only that file's blocks,
  :func:`parse_file_target`): ``<topic>-<p>:oldest-segment`` / ``:active-segment`` (the
  partition's first / last ``.log``), ``<topic>-<p>:segments`` (every ``.log``),
  ``<topic>-<p>:index`` (every ``.index``), ``<topic>-<p>:leader-epoch-checkpoint``,
  ``checkpoint:<name>`` (a file of the dir: ``replication-offset-checkpoint``, …),
  ``metadata-log`` (the ``__cluster_metadata-0`` segments of a controller's metadata dir).

Refs are bound once, at first use, and stay bound for the run (kafkatest picks "the leader"
once): ``leader:t1/0`` in a later restart or in ``expect.outcomes`` means the same broker the
first fault hit. The runner records each binding in the ``fault_injected`` action
(``node_ref``/``node_id``, ``dir_ref``/``dir_id``/``path``).

Fault kinds (``kind`` field in files):

==============  ===============================================================  ==========
kind            fields                                                           heal
==============  ===============================================================  ==========
disk            node, dir, mode (error, error-reads, error-writes, flaky[p],     after
                delay[delay_ms], enospc, remove, corrupt-reads[p],               duration
                corrupt-writes[p], bad-blocks, lose-unsynced, permission),
                file (a file target)
network         action (partition[node, peer], isolate[node], delay[node,        after
                delay_ms, jitter_ms], loss[node, loss_pct])                      duration
process         action (kill[signal], pause, restart[clean], power-cut), node    kill, power-
                (power-cut: SIGKILL, then every disk of the node loses what it   cut: start
                had not made durable and comes back: ``infra.power``)            again after
                                                                                 duration;
                                                                                 pause: resume
replace-disk    node, dir: swap in a freshly formatted disk (new directory.id)   —
move-replica    node, topic, partition, to_dir: AlterReplicaLogDirs              —
admin           action (delete-topic, create-topic[partitions,                   —
                replication_factor, records]), topic: an operator's call
                through a real admin client (``AdminAction``); reassign[node,
                dir]: every replica of that broker (in that dir when given) in
                ``topic`` (all topics when unset) moves to a broker that holds
                none of the partition (AlterPartitionReassignments);
                elect[election preferred|unclean]: ElectLeaders for ``topic``'s
                partitions, all when unset (kafka-python's KafkaAdminClient,
                ``harness.nemesis.operator``)
==============  ===============================================================  ==========

``duration_ms`` ``None`` means the fault stays until the final heal (which always runs).
Each fault value names itself with ``label()``: the ``fault_kind`` label of the results tables
(``error``, ``flaky(0.05)``, ``delay(50ms)``, ``corrupt-reads(0.1)[t1-0:segments]``,
``partition``, ``net-delay(50ms)``, ``loss(5.0%)``, ``kill(SIGKILL)``, ``restart``,
``replace-disk``, ``move-replica``, ``delete-topic``, ``elect(preferred)``); the labels are
stored in Parquet, so a label never changes its spelling.
:func:`soak_schedule` builds a seeded random mix (scenario S11), deterministic per seed.
A fault table of a scenario file is validated into these values by :mod:`harness.scenario.fault_tables`.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Union


__all__ = [
    "DISK_MODES", "DIR_LOSING_MODES", "NETWORK_ACTIONS", "PROCESS_ACTIONS", "FAULT_KINDS",
    "DiskFault", "NetworkFault", "ProcessFault", "ReplaceDisk", "MoveReplica", "AdminAction", "ADMIN_ACTIONS",
    "OPERATOR_ACTIONS", "ELECTIONS", "Fault",
    "NodeRef", "ACTIVE_CONTROLLER", "parse_node_ref", "parse_dir_ref", "fault_to_dict", "FAULT_CLASSES", "SIGNALS",
    "soak_schedule", "end_ms", "RefBindings", "fault_seed", "FileTarget", "parse_file_target",
    "FILE_MODES", "P_MODES", "READ_MODES", "FILE_TARGET_KINDS",
]

# the kinds infra.faults.DiskFaultHandle injects (error-writes fails writes and fsync)
DISK_MODES = ("error", "error-reads", "error-writes", "flaky", "delay", "enospc", "remove", "corrupt-reads",
              "corrupt-writes", "bad-blocks", "lose-unsynced", "permission")
FILE_MODES = ("error", "error-reads", "error-writes", "flaky", "delay", "corrupt-reads", "corrupt-writes",
              "bad-blocks")                         # may name a file target
P_MODES = ("flaky", "corrupt-reads", "corrupt-writes")   # take p
READ_MODES = ("error", "error-reads", "flaky", "corrupt-reads", "bad-blocks")   # a read meets them
# the disk modes that can take a dir away from its broker (all but a slow disk and a cache
# that only loses what a power cut finds unsynced)
DIR_LOSING_MODES = tuple(m for m in DISK_MODES if m not in ("delay", "lose-unsynced"))
NETWORK_ACTIONS = ("partition", "isolate", "delay", "loss")
PROCESS_ACTIONS = ("kill", "pause", "restart", "power-cut")
SIGNALS = ("SIGKILL", "SIGTERM")
FAULT_KINDS = ("disk", "network", "process", "replace-disk", "move-replica", "admin")
ADMIN_ACTIONS = ("delete-topic", "create-topic", "reassign", "elect")
OPERATOR_ACTIONS = ("reassign", "elect")      # harness.nemesis.operator; the others harness.nemesis.admin
ELECTIONS = ("preferred", "unclean")

_NODE_RE = re.compile(r"^(broker|controller):(\d+)$|^(leader|follower):([A-Za-z0-9._-]+)/(\d+)$|^controller:(active)$")
_DIR_RE = re.compile(r"^d([1-9]\d*)$|^(metadata|all|all\+metadata)$|^(replica|spare):([A-Za-z0-9._-]+)/(\d+)$")
FILE_TARGET_KINDS = ("oldest-segment", "active-segment", "segments", "index", "leader-epoch-checkpoint")
_FILE_RE = re.compile(r"^([A-Za-z0-9._-]+)-(\d+):(%s)$|^checkpoint:([A-Za-z0-9._-]+)$|^(metadata-log)$"
                      % "|".join(FILE_TARGET_KINDS))


ACTIVE_CONTROLLER = "controller-active"


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A parsed node ref: ``kind`` in broker/controller (``node_id`` set) or leader/follower
    (``topic``/``partition`` set)."""

    kind: str
    node_id: int | None = None
    topic: str | None = None
    partition: int | None = None


def parse_node_ref(text: str) -> NodeRef | None:
    m = _NODE_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    if m.group(1):
        return NodeRef(m.group(1), node_id=int(m.group(2)))
    if m.group(6):
        return NodeRef(ACTIVE_CONTROLLER)
    return NodeRef(m.group(3), topic=m.group(4), partition=int(m.group(5)))


@dataclass(frozen=True, slots=True)
class FileTarget:
    """A parsed file target: ``kind`` in FILE_TARGET_KINDS (``topic``/``partition`` set),
    ``checkpoint`` (``name`` set) or ``metadata-log``."""

    kind: str
    topic: str | None = None
    partition: int | None = None
    name: str | None = None


def parse_file_target(text: str) -> FileTarget | None:
    m = _FILE_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    if m.group(3):
        return FileTarget(m.group(3), topic=m.group(1), partition=int(m.group(2)))
    if m.group(4):
        return FileTarget("checkpoint", name=m.group(4))
    return FileTarget("metadata-log")


def parse_dir_ref(text: str) -> tuple[str, Any] | None:
    """``("index", 1)`` for d1, ``("metadata", None)``, ``("all", None)``, ``("all+metadata", None)``,
    ``("replica", (topic, p))``, ``("spare", (topic, p))``; ``None`` when malformed."""
    m = _DIR_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    if m.group(1):
        return ("index", int(m.group(1)))
    if m.group(2):
        return (m.group(2), None)
    return (m.group(3), (m.group(4), int(m.group(5))))


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskFault:
    """Fail one dir (or every data dir) of a broker at the block layer."""

    kind: ClassVar[str] = "disk"
    at_ms: int
    node: str
    dir: str
    mode: str = "error"
    p: float | None = None          # flaky: probability an I/O fails; corrupt-*: share of 4 KiB blocks flipped
    delay_ms: int | None = None     # delay: added latency per I/O
    duration_ms: int | None = None
    file: str | None = None         # a file target: only that file's blocks (FILE_MODES)

    def label(self) -> str:
        if self.mode in P_MODES:
            label = f"{self.mode}({self.p})"
        elif self.mode == "delay":
            label = f"delay({self.delay_ms}ms)"
        else:
            label = self.mode
        return f"{label}[{self.file}]" if self.file else label


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkFault:
    """Cut or degrade the network of a node (inside its namespace)."""

    kind: ClassVar[str] = "network"
    at_ms: int
    action: str
    node: str
    peer: str | None = None         # partition: the other side
    delay_ms: int | None = None
    jitter_ms: int | None = None
    loss_pct: float | None = None
    duration_ms: int | None = None

    def label(self) -> str:
        if self.action == "delay":
            return f"net-delay({self.delay_ms}ms)"
        if self.action == "loss":
            return f"loss({self.loss_pct}%)"
        return self.action


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessFault:
    """Kill, pause or restart a node's process."""

    kind: ClassVar[str] = "process"
    at_ms: int
    action: str
    node: str
    signal: str = "SIGKILL"         # kill
    clean: bool = True              # restart: clean shutdown (SIGTERM, wait) before start
    duration_ms: int | None = None  # kill: start again after; pause: resume after

    def label(self) -> str:
        return f"kill({self.signal})" if self.action == "kill" else self.action


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaceDisk:
    """Give the broker a freshly formatted disk in place of ``dir`` (restarting it)."""

    kind: ClassVar[str] = "replace-disk"
    at_ms: int
    node: str
    dir: str

    def label(self) -> str:
        return self.kind


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveReplica:
    """AlterReplicaLogDirs: move ``topic``/``partition`` on ``node`` to ``to_dir``."""

    kind: ClassVar[str] = "move-replica"
    at_ms: int
    node: str
    topic: str
    partition: int
    to_dir: str

    def label(self) -> str:
        return self.kind


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminAction:
    """An operator's admin call at ``at_ms``, through a real admin client on the brokers'
    bootstrap: ``delete-topic`` (DeleteTopics) or ``create-topic`` (CreateTopics,
    ``partitions`` × ``replication_factor``; then ``records`` acks=all values produced to it
    round-robin, recorded as client ops like the workload's, and drained at the end) through
    confluent-kafka's AdminClient — they name no node: the active controller does the work;
    ``reassign`` moves every replica ``node`` holds (in ``dir`` when given; of ``topic``, or of
    every topic) to brokers that hold none of the partition; ``elect`` runs a PREFERRED or
    UNCLEAN ElectLeaders (``topic``'s partitions, all when unset) — both through kafka-python's
    KafkaAdminClient (``harness.nemesis.operator``)."""

    kind: ClassVar[str] = "admin"
    at_ms: int
    action: str
    topic: str | None = None
    partitions: int | None = None
    replication_factor: int | None = None
    records: int | None = None
    node: str | None = None     # reassign: the broker whose replicas move off
    election: str | None = None   # elect: preferred (None) or unclean
    dir: str | None = None      # reassign: only the replicas of ``node`` in this dir (a dir ref)

    def label(self) -> str:
        return f"elect({self.election or 'preferred'})" if self.action == "elect" else self.action


# every member has ``kind`` (its ``kind`` field in files) and ``label()`` (its results-table label)
Fault = Union[DiskFault, NetworkFault, ProcessFault, ReplaceDisk, MoveReplica, AdminAction]
FAULT_CLASSES: dict[str, type] = {c.kind: c for c in (DiskFault, NetworkFault, ProcessFault, ReplaceDisk, MoveReplica,
                                                     AdminAction)}


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    """The JSON form: ``{"kind": ..., <fields>}`` without fields left at ``None``."""
    out: dict[str, Any] = {"kind": fault.kind}
    out.update({k: v for k, v in asdict(fault).items() if v is not None})
    return out


def end_ms(fault: Fault) -> int | None:
    """When the fault heals by itself (``None``: at the final heal, or instantaneous)."""
    duration = getattr(fault, "duration_ms", None)
    return None if duration is None else fault.at_ms + duration


def fault_seed(scenario_seed: int, fault_index: int) -> int:
    """The seed of fault ``fault_index``'s own randomness (flaky): derived, so one scenario
    seed replays every fault's failure sequence."""
    return (scenario_seed * 1_000_003 + fault_index) % (2**31 - 1)


class RefBindings:
    """Binds each ref once, at first use, and keeps it for the run (pure: the caller supplies
    the lookups that read the live cluster).

    ``node(ref, lookup)``: ``lookup(NodeRef) -> node id``, called only the first time.
    ``dirs(node_id, ref, lookup)``: ``lookup(node_id, parsed_dir_ref) -> [dir ids]``, once per
    (node, ref).
    """

    def __init__(self) -> None:
        self.nodes: dict[str, int] = {}
        self.dir_ids: dict[tuple[int, str], tuple[str, ...]] = {}

    def node(self, ref: str, lookup) -> int:
        if ref not in self.nodes:
            parsed = parse_node_ref(ref)
            if parsed is None:
                raise ValueError(f"{ref!r} is not a node ref")
            self.nodes[ref] = parsed.node_id if parsed.node_id is not None else int(lookup(parsed))
        return self.nodes[ref]

    def dirs(self, node_id: int, ref: str, lookup) -> tuple[str, ...]:
        key = (node_id, ref)
        if key not in self.dir_ids:
            parsed = parse_dir_ref(ref)
            if parsed is None:
                raise ValueError(f"{ref!r} is not a dir ref")
            self.dir_ids[key] = tuple(lookup(node_id, parsed))
        return self.dir_ids[key]


def soak_schedule(seed: int, *, duration_ms: int, broker_ids: list[int], dirs_per_broker: int,
                  controller_id: int, mean_gap_ms: int = 8000, fault_ms: int = 4000,
                  first_at_ms: int | None = None) -> tuple[Fault, ...]:
    """A seeded random mix of faults (S11): one fault window at a time, each healed after
    ``fault_ms``, gaps drawn around ``mean_gap_ms`` (the first at ``first_at_ms``, default half a
    gap); never fails a broker's last data dir, so every window is survivable and every check
    must hold across all of them. The first window is always a dir failure (then a replaced
    disk): every soak, however short, exercises KIP-858's own path, and the checks that judge
    a dir failure (failover, timeout accuracy) have one to judge."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = mean_gap_ms // 2 if first_at_ms is None else first_at_ms
    while t + fault_ms < duration_ms - mean_gap_ms // 2 and len(faults) < 1000:
        broker = rng.choice(broker_ids)
        node = f"broker:{broker}"
        choice = rng.choice(("disk-error", "disk-flaky", "disk-delay", "isolate", "pause", "kill"))
        if not faults:
            choice = "disk-error"
        if choice == "disk-error":
            faults.append(DiskFault(at_ms=t, node=node, dir=f"d{rng.randint(1, dirs_per_broker)}", mode="error"))
        elif choice == "disk-flaky":
            faults.append(DiskFault(at_ms=t, node=node, dir=f"d{rng.randint(1, dirs_per_broker)}", mode="flaky",
                                    p=round(rng.uniform(0.01, 0.2), 3), duration_ms=fault_ms))
        elif choice == "disk-delay":
            faults.append(DiskFault(at_ms=t, node=node, dir=f"d{rng.randint(1, dirs_per_broker)}", mode="delay",
                                    delay_ms=rng.choice((5, 20, 50)), duration_ms=fault_ms))
        elif choice == "isolate":
            faults.append(NetworkFault(at_ms=t, action="partition", node=node, peer=f"controller:{controller_id}",
                                       duration_ms=fault_ms))
        elif choice == "pause":
            faults.append(ProcessFault(at_ms=t, action="pause", node=node, duration_ms=fault_ms))
        else:
            faults.append(ProcessFault(at_ms=t, action="kill", node=node, duration_ms=fault_ms))
        if choice == "disk-error":
            # a failed dir stays failed: bring the broker back whole with a fresh disk
            faults.append(ReplaceDisk(at_ms=t + fault_ms, node=node, dir=faults[-1].dir))
        t += fault_ms + max(1000, int(rng.expovariate(1.0 / mean_gap_ms)))
    return tuple(faults)
