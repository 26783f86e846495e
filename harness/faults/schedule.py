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
  ``metadata.log.dir``), ``all`` (every data dir), ``replica:<topic>/<p>`` (the dir holding that
  partition's replica on the target broker), ``spare:<topic>/<p>`` (the first online data dir
  of the target broker that does not hold that replica: a move target).

Refs are bound once, at first use, and stay bound for the run (kafkatest picks "the leader"
once): ``leader:t1/0`` in a later restart or in ``expect.outcomes`` means the same broker the
first fault hit. The runner records each binding in the ``fault_injected`` action
(``node_ref``/``node_id``, ``dir_ref``/``dir_id``/``path``).

Fault kinds (``kind`` field in files):

==============  ===============================================================  ==========
kind            fields                                                           heal
==============  ===============================================================  ==========
disk            node, dir, mode (error, error-reads, error-writes, flaky[p],     after
                delay[delay_ms], enospc, remove)                                 duration
network         action (partition[node, peer], isolate[node], delay[node,        after
                delay_ms, jitter_ms], loss[node, loss_pct])                      duration
process         action (kill[signal], pause, restart[clean]), node               kill: start
                                                                                 again after
                                                                                 duration;
                                                                                 pause: resume
replace-disk    node, dir: swap in a freshly formatted disk (new directory.id)   —
move-replica    node, topic, partition, to_dir: AlterReplicaLogDirs              —
==============  ===============================================================  ==========

``duration_ms`` ``None`` means the fault stays until the final heal (which always runs).
:func:`soak_schedule` builds a seeded random mix (scenario S11), deterministic per seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Union

from harness.fields import Fields, Problems, join, one_of

__all__ = [
    "DISK_MODES", "NETWORK_ACTIONS", "PROCESS_ACTIONS", "FAULT_KINDS",
    "DiskFault", "NetworkFault", "ProcessFault", "ReplaceDisk", "MoveReplica", "Fault",
    "NodeRef", "ACTIVE_CONTROLLER", "parse_node_ref", "parse_dir_ref", "fault_from_dict", "fault_to_dict",
    "soak_schedule", "end_ms", "fault_label", "RefBindings", "fault_seed",
]

# the kinds infra.faults.DiskFaultHandle injects (error-writes fails writes and fsync)
DISK_MODES = ("error", "error-reads", "error-writes", "flaky", "delay", "enospc", "remove")
NETWORK_ACTIONS = ("partition", "isolate", "delay", "loss")
PROCESS_ACTIONS = ("kill", "pause", "restart")
SIGNALS = ("SIGKILL", "SIGTERM")
FAULT_KINDS = ("disk", "network", "process", "replace-disk", "move-replica")

_NODE_RE = re.compile(r"^(broker|controller):(\d+)$|^(leader|follower):([A-Za-z0-9._-]+)/(\d+)$|^controller:(active)$")
_DIR_RE = re.compile(r"^d([1-9]\d*)$|^(metadata|all)$|^(replica|spare):([A-Za-z0-9._-]+)/(\d+)$")


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


def parse_dir_ref(text: str) -> tuple[str, Any] | None:
    """``("index", 1)`` for d1, ``("metadata", None)``, ``("all", None)``,
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
    p: float | None = None          # flaky: probability an I/O fails
    delay_ms: int | None = None     # delay: added latency per I/O
    duration_ms: int | None = None


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaceDisk:
    """Give the broker a freshly formatted disk in place of ``dir`` (restarting it)."""

    kind: ClassVar[str] = "replace-disk"
    at_ms: int
    node: str
    dir: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveReplica:
    """AlterReplicaLogDirs: move ``topic``/``partition`` on ``node`` to ``to_dir``."""

    kind: ClassVar[str] = "move-replica"
    at_ms: int
    node: str
    topic: str
    partition: int
    to_dir: str


Fault = Union[DiskFault, NetworkFault, ProcessFault, ReplaceDisk, MoveReplica]
_CLASSES: dict[str, type] = {c.kind: c for c in (DiskFault, NetworkFault, ProcessFault, ReplaceDisk, MoveReplica)}


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


def fault_label(fault: Fault) -> str:
    """The ``fault_kind`` label of results tables: ``error``, ``flaky(0.05)``, ``delay(50ms)``,
    ``partition``, ``kill(SIGKILL)``, ``restart``, ``replace-disk``, ``move-replica``."""
    if isinstance(fault, DiskFault):
        if fault.mode == "flaky":
            return f"flaky({fault.p})"
        if fault.mode == "delay":
            return f"delay({fault.delay_ms}ms)"
        return fault.mode
    if isinstance(fault, NetworkFault):
        if fault.action == "delay":
            return f"net-delay({fault.delay_ms}ms)"
        if fault.action == "loss":
            return f"loss({fault.loss_pct}%)"
        return fault.action
    if isinstance(fault, ProcessFault):
        return f"kill({fault.signal})" if fault.action == "kill" else fault.action
    return fault.kind


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


class TargetCheck:
    """What a fault may refer to: node ids, dirs per broker, topic partitions."""

    def __init__(self, broker_ids: set[int], controller_ids: set[int], dirs_per_broker: int,
                 partitions: dict[str, int]) -> None:
        self.broker_ids = broker_ids
        self.controller_ids = controller_ids
        self.dirs_per_broker = dirs_per_broker
        self.partitions = partitions

    def topic_partition(self, topic: str, partition: int, path: str, problems: Problems) -> None:
        if topic not in self.partitions:
            problems.add(path, one_of(topic, sorted(self.partitions)) + " (topics of the workload)"
                         if self.partitions else f"no topic {topic!r}: the workload has no valid topics")
        elif not 0 <= partition < self.partitions[topic]:
            problems.add(path, f"topic {topic!r} has partitions 0..{self.partitions[topic] - 1}, not {partition}")

    def node(self, text: Any, path: str, problems: Problems, *, broker_only: bool = False) -> None:
        if text is None:
            return
        ref = parse_node_ref(text)
        if ref is None:
            problems.add(path, f"{text!r} is not a node ref (broker:<id>, controller:<id>, controller:active, "
                               "leader:<topic>/<p>, follower:<topic>/<p>)")
            return
        if ref.kind == "broker" and ref.node_id not in self.broker_ids:
            problems.add(path, f"no broker {ref.node_id} (brokers are {sorted(self.broker_ids)})")
        elif ref.kind in ("controller", ACTIVE_CONTROLLER):
            if broker_only:
                problems.add(path, "must name a broker, not a controller")
            elif ref.kind == "controller" and ref.node_id not in self.controller_ids:
                problems.add(path, f"no controller {ref.node_id} (controllers are {sorted(self.controller_ids)})")
        elif ref.topic is not None:
            self.topic_partition(ref.topic, ref.partition or 0, path, problems)

    def dir(self, text: Any, path: str, problems: Problems, *, single: bool = False) -> None:
        if text is None:
            return
        ref = parse_dir_ref(text)
        if ref is None:
            problems.add(path, f"{text!r} is not a dir ref (d1..d{self.dirs_per_broker}, metadata, all, "
                               "replica:<topic>/<p>, spare:<topic>/<p>)")
        elif ref[0] == "index" and ref[1] > self.dirs_per_broker:
            problems.add(path, f"{text!r}: brokers have {self.dirs_per_broker} data dirs (d1..d{self.dirs_per_broker})")
        elif ref[0] == "all" and single:
            problems.add(path, "'all' is not allowed here: name one dir")
        elif ref[0] in ("replica", "spare"):
            self.topic_partition(ref[1][0], ref[1][1], path, problems)


def fault_from_dict(data: Any, path: str, problems: Problems, targets: TargetCheck) -> Fault | None:
    """Validate one fault table; problems are recorded with ``path``-prefixed field names."""
    f = Fields(data, path, problems)
    kind = f.str("kind", choices=FAULT_KINDS)
    if kind not in _CLASSES:
        return None
    at_ms = f.int("at_ms", lo=0)
    node = f.str("node")
    value: Fault | None = None
    if kind == "disk":
        mode = f.str("mode", "error", choices=DISK_MODES)
        dir_ = f.str("dir")
        p = f.float("p", None, lo=0.0, hi=1.0)
        delay_ms = f.int("delay_ms", None, lo=1)
        duration = f.int("duration_ms", None, lo=1)
        # a controller has one disk: its metadata dir
        on_controller = isinstance(node, str) and node.startswith("controller:")
        targets.node(node, join(path, "node"), problems, broker_only=not on_controller)
        if on_controller and dir_ != "metadata":
            problems.add(join(path, "dir"), f"a controller has only its metadata dir, not {dir_!r}")
        targets.dir(dir_, join(path, "dir"), problems)
        if mode == "flaky" and p is None:
            problems.add(join(path, "p"), "mode 'flaky' needs p (probability 0..1)")
        if mode == "delay" and delay_ms is None:
            problems.add(join(path, "delay_ms"), "mode 'delay' needs delay_ms")
        if p is not None and mode != "flaky":
            problems.add(join(path, "p"), f"only for mode 'flaky', not {mode!r}")
        if delay_ms is not None and mode != "delay":
            problems.add(join(path, "delay_ms"), f"only for mode 'delay', not {mode!r}")
        value = DiskFault(at_ms=at_ms, node=node, dir=dir_, mode=mode, p=p, delay_ms=delay_ms, duration_ms=duration)
    elif kind == "network":
        action = f.str("action", choices=NETWORK_ACTIONS)
        peer = f.str("peer", None)
        delay_ms = f.int("delay_ms", None, lo=1)
        jitter_ms = f.int("jitter_ms", None, lo=0)
        loss_pct = f.float("loss_pct", None, lo=0.0, hi=100.0)
        duration = f.int("duration_ms", None, lo=1)
        targets.node(node, join(path, "node"), problems)
        targets.node(peer, join(path, "peer"), problems)
        if action == "partition" and peer is None:
            problems.add(join(path, "peer"), "action 'partition' needs peer (the other side)")
        if action != "partition" and peer is not None:
            problems.add(join(path, "peer"), f"only for action 'partition', not {action!r}")
        if action == "partition" and peer is not None and peer == node:
            problems.add(join(path, "peer"), "must differ from node")
        if action == "delay" and delay_ms is None:
            problems.add(join(path, "delay_ms"), "action 'delay' needs delay_ms")
        if action == "loss" and loss_pct is None:
            problems.add(join(path, "loss_pct"), "action 'loss' needs loss_pct")
        value = NetworkFault(at_ms=at_ms, action=action, node=node, peer=peer, delay_ms=delay_ms,
                             jitter_ms=jitter_ms, loss_pct=loss_pct, duration_ms=duration)
    elif kind == "process":
        action = f.str("action", choices=PROCESS_ACTIONS)
        signal = f.str("signal", "SIGKILL", choices=SIGNALS)
        clean = f.bool("clean", True)
        duration = f.int("duration_ms", None, lo=1)
        targets.node(node, join(path, "node"), problems)
        if action == "restart" and duration is not None:
            problems.add(join(path, "duration_ms"), "a restart is instantaneous: no duration")
        value = ProcessFault(at_ms=at_ms, action=action, node=node, signal=signal, clean=clean, duration_ms=duration)
    elif kind == "replace-disk":
        dir_ = f.str("dir")
        targets.node(node, join(path, "node"), problems, broker_only=True)
        targets.dir(dir_, join(path, "dir"), problems, single=True)
        value = ReplaceDisk(at_ms=at_ms, node=node, dir=dir_)
    elif kind == "move-replica":
        topic = f.str("topic")
        partition = f.int("partition", lo=0)
        to_dir = f.str("to_dir")
        targets.node(node, join(path, "node"), problems, broker_only=True)
        if topic is not None and partition is not None:
            targets.topic_partition(topic, partition, join(path, "topic"), problems)
        targets.dir(to_dir, join(path, "to_dir"), problems, single=True)
        if to_dir is not None and to_dir.startswith(("metadata", "replica:")):
            problems.add(join(path, "to_dir"), "must be a data dir (d1..dN or spare:<topic>/<p>)")
        value = MoveReplica(at_ms=at_ms, node=node, topic=topic, partition=partition, to_dir=to_dir)
    f.finish()
    return value


def soak_schedule(seed: int, *, duration_ms: int, broker_ids: list[int], dirs_per_broker: int,
                  controller_id: int, mean_gap_ms: int = 8000, fault_ms: int = 4000) -> tuple[Fault, ...]:
    """A seeded random mix of faults (S11): one fault window at a time, each healed after
    ``fault_ms``, gaps drawn around ``mean_gap_ms``; never fails a broker's last data dir, so
    every window is survivable and every check must hold across all of them."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = mean_gap_ms // 2
    while t + fault_ms < duration_ms - mean_gap_ms // 2 and len(faults) < 1000:
        broker = rng.choice(broker_ids)
        node = f"broker:{broker}"
        choice = rng.choice(("disk-error", "disk-flaky", "disk-delay", "isolate", "pause", "kill"))
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
