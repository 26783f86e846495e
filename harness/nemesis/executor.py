"""Executes fault values against a live lab: binds refs, hands each fault to its kind's
:class:`~harness.nemesis.protocol.Nemesis` (one per fault class, :data:`NEMESES`), heals, records.

Used by the runner (timed schedule) and by chaos sessions (one command at a time). Every
injection writes ``fault_injected`` (resolved node id, dir ids in Kafka's base64, container
paths, backend; a file target's files and image ranges) and, for disk faults,
``first_io_error_observed`` from the probe (an O_DIRECT I/O that failed, flipped bits the
probe read back, a write held unsynced, EACCES for a probe as the node's user); every heal
writes ``fault_healed`` and, when the backend dated one, ``fault_first_hit`` — the first I/O of
the node that met the fault at the device after the probe (with the counts of injected ops
and flipped bits). A ``power-cut`` kills the node, cuts every disk's power
(``Lab.power_cut``: ``unsynced_writes_dropped`` per disk) and ends the node's
``lose-unsynced`` faults. ``heal_all()`` is idempotent and never raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.cluster.node_configs import META_DIR
from harness.cluster.services import Services
from harness.history.model import fault_healed_event
from harness.nemesis.admin import AdminNemesis
from harness.nemesis.disk import DiskNemesis, ReplaceDiskNemesis
from harness.nemesis.network import NetworkNemesis
from harness.nemesis.process import ProcessNemesis
from harness.nemesis.protocol import ActiveFault, Nemesis
from harness.nemesis.replica import MoveReplicaNemesis
from harness.results.ledger import LedgerWriter
from harness.scenario.faults import (ACTIVE_CONTROLLER, AdminAction, DiskFault, MoveReplica, NetworkFault,
                                     ProcessFault, RefBindings, ReplaceDisk)
from kafka_common import ids

Say = Callable[[str], None]
__all__ = ["FaultExecutor", "ActiveFault", "NEMESES", "dir_id_on_host"]

# each fault class's kind: the one place a fault value meets what acts on the cluster
NEMESES: dict[type, Nemesis] = {
    DiskFault: DiskNemesis(), NetworkFault: NetworkNemesis(), ProcessFault: ProcessNemesis(),
    ReplaceDisk: ReplaceDiskNemesis(), MoveReplica: MoveReplicaNemesis(), AdminAction: AdminNemesis(),
}


def dir_id_on_host(path) -> str | None:
    """``directory.id`` from a log dir's meta.properties (host path), or None."""
    try:
        for line in (path / "meta.properties").read_text().splitlines():
            if line.startswith("directory.id="):
                return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


class FaultExecutor:
    """The :class:`~harness.nemesis.protocol.NemesisHost` of a run or a chaos session."""

    def __init__(self, services: Services, ledger: LedgerWriter, *, seed: int, say: Say = lambda _m: None) -> None:
        self.svc = services
        self.lab = services.lab
        self.ledger = ledger
        self.seed = seed
        self.say = say
        self.bindings = RefBindings()
        self.active: dict[int, ActiveFault] = {}
        self.errors: list[str] = []
        self.admin_topics: dict[str, int] = {}   # topics admin actions created (and did not delete)
        self.repaired: set[tuple[int, str]] = set()   # (node, dir): repaired after its fault healed

    # ---- lookups of the live cluster --------------------------------------------------
    def dir_names(self, node_id: int) -> dict[str, str]:
        """{dir name: directory id} of a broker, read from the disks' meta.properties."""
        node = self.svc.nodes[node_id]
        out = {}
        for d in node.disk_names:
            did = dir_id_on_host(self.lab.disk(node.name, d).data_path)
            if did is not None:
                out[d] = did
        return out

    def _partition(self, topic: str, partition: int):
        image = self.svc.metadata()
        tid = image.topic_ids.get(topic)
        if tid is None:
            raise ValueError(f"topic {topic!r} does not exist")
        reg = image.partition(tid, partition)
        if reg is None:
            raise ValueError(f"partition {topic}-{partition} does not exist")
        return reg

    def _node_lookup(self, ref) -> int:
        if ref.kind == ACTIVE_CONTROLLER:
            return self.svc.active_controller()
        reg = self._partition(ref.topic, ref.partition)
        if ref.kind == "leader":
            if reg.leader < 0:
                raise ValueError(f"{ref.topic}-{ref.partition} has no leader")
            return reg.leader
        followers = [b for b in reg.isr if b != reg.leader]
        if not followers:
            raise ValueError(f"{ref.topic}-{ref.partition} has no follower in its ISR {reg.isr}")
        return followers[0]

    def _dir_lookup(self, node_id: int, parsed) -> list[str]:
        kind, arg = parsed
        node = self.svc.nodes[node_id]
        if kind == "index":
            return [node.data_dirs[arg - 1]]
        if kind == "metadata":
            return [META_DIR]
        if kind == "all":
            return list(node.data_dirs)
        if kind == "all+metadata":
            return [*node.data_dirs, META_DIR]
        topic, p = arg
        holder = self._replica_dir(node_id, topic, p)
        if kind == "replica":
            if holder is None:
                raise ValueError(f"broker {node_id} holds no replica of {topic}-{p} in a known dir")
            return [holder]
        spare = [d for d in node.data_dirs if d != holder]
        if not spare:
            raise ValueError(f"broker {node_id} has no spare dir for {topic}-{p}")
        return [spare[0]]

    def _replica_dir(self, node_id: int, topic: str, p: int) -> str | None:
        names = {v: k for k, v in self.dir_names(node_id).items()}
        try:
            reg = self._partition(topic, p)
            did = reg.directory(node_id) if node_id in reg.replicas else None
        except ValueError:
            did = None
        if did is not None and not ids.is_reserved(did) and ids.to_base64(did) in names:
            return names[ids.to_base64(did)]
        node = self.svc.nodes[node_id]   # UNASSIGNED: find the partition's log dir on the disks
        for d in node.data_dirs:
            if (self.lab.disk(node.name, d).data_path / f"{topic}-{p}").is_dir():
                return d
        return None

    def node_of(self, ref: str) -> int:
        return self.bindings.node(ref, self._node_lookup)

    def dirs_of(self, node_id: int, ref: str) -> tuple[str, ...]:
        return self.bindings.dirs(node_id, ref, lambda n, parsed: self._dir_lookup(n, parsed))

    # ---- inject / heal ----------------------------------------------------------------
    @staticmethod
    def nemesis(fault: Any) -> Nemesis:
        kind = NEMESES.get(type(fault))
        if kind is None:
            raise ValueError(f"unknown fault {fault!r}")
        return kind

    def describe(self, fault: Any) -> str:
        return self.nemesis(fault).describe(fault)

    def inject(self, index: int, fault: Any) -> ActiveFault:
        act = self.nemesis(fault).inject(self, index, fault)
        self.active[index] = act
        return act

    def heal(self, index: int) -> None:
        act = self.active.get(index)
        if act is None or act.healed:
            return
        act.healed = True
        for d, h in zip(act.dirs or [None] * len(act.handles), act.handles):
            try:
                h.heal()
            except Exception as exc:  # noqa: BLE001 - keep healing the rest
                self.errors.append(f"heal f{index}: {exc}")
            self._record_first_hit(index, act.node_id, d, h)
        self.nemesis(act.fault).heal(self, act)
        self.ledger.write(fault_healed_event(act.fault, index, ts_ns=time.time_ns(), node_id=act.node_id))
        self.say(f"f{index}: healed")

    def heal_all(self) -> None:
        for index in sorted(self.active):
            try:
                self.heal(index)
            except Exception as exc:  # noqa: BLE001 - the final heal must reach every fault
                self.errors.append(f"heal f{index}: {exc}")

    def _record_first_hit(self, index: int, node_id: int | None, dir_name: str | None, handle: Any) -> None:
        rec = getattr(handle, "record", None)
        if rec is None or not getattr(rec, "first_hit_ns", None):
            return
        idmap = self.dir_names(node_id) if node_id in self.svc.nodes else {}
        self.ledger.action(rec.first_hit_ns, "fault_first_hit", node_id, fault_id=f"f{index}", dir=dir_name,
                           dir_id=idmap.get(dir_name or "", ""), kind=rec.kind, hits=rec.hits,
                           flipped_bits=rec.flipped_bits)
