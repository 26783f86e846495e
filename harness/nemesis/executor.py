"""Executes fault values against a live lab: binds refs, injects, heals, records.

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

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.scenario.faults import (ACTIVE_CONTROLLER, DIR_LOSING_MODES, P_MODES, AdminAction, DiskFault,
                                     MoveReplica, NetworkFault, OPERATOR_ACTIONS, ProcessFault, RefBindings, ReplaceDisk,
                                     fault_seed)
from harness.history.model import fault_healed_event, fault_injected_event
from harness.results.ledger import LedgerWriter
from harness.cluster.node_configs import BROKER_PORT, META_DIR
from harness.cluster.services import Services
from infra import host
from kafka_common import ids
from kafka_common.wire import ApiKey

Say = Callable[[str], None]
__all__ = ["FaultExecutor", "ActiveFault", "dir_id_on_host"]


def dir_id_on_host(path) -> str | None:
    """``directory.id`` from a log dir's meta.properties (host path), or None."""
    try:
        for line in (path / "meta.properties").read_text().splitlines():
            if line.startswith("directory.id="):
                return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


@dataclass
class ActiveFault:
    index: int
    fault: Any
    node_id: int | None
    handles: list[Any] = field(default_factory=list)   # infra fault values to heal
    dirs: list[str] = field(default_factory=list)      # disk faults: the dir of each handle
    healed: bool = False
    restart_after: bool = False                       # process kill: start again at heal
    answer: dict[str, Any] = field(default_factory=dict)   # admin actions: what was asked and answered
    result: Any = None                                # admin actions: their AdminResult


class FaultExecutor:
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

    # ---- inject / heal ----------------------------------------------------------------
    def inject(self, index: int, fault: Any) -> ActiveFault:
        if isinstance(fault, AdminAction):
            if fault.action in OPERATOR_ACTIONS:   # reassign / elect (issue 37b): harness.nemesis.operator
                from harness.nemesis.operator import run_scheduled
                node_id = self.bindings.node(fault.node, self._node_lookup) if fault.node is not None else None
                act = ActiveFault(index, fault, node_id, healed=True)
                act.answer = run_scheduled(self, index, fault, node_id)
                self.active[index] = act
                return act
            return self._admin(index, fault)
        node_id = self.bindings.node(fault.node, self._node_lookup)
        act = ActiveFault(index, fault, node_id)
        name = self.svc.nodes[node_id].name
        if isinstance(fault, DiskFault):
            self._inject_disk(act, index, fault, node_id, name)
        elif isinstance(fault, NetworkFault):
            peer_id = self.bindings.node(fault.peer, self._node_lookup) if fault.peer else None
            if fault.action == "partition":
                h = self.lab.partition(name, self.svc.nodes[peer_id].name)
            elif fault.action == "isolate":
                h = self.lab.isolate(name)
            elif fault.action == "delay":
                h = self.lab.netem(name, delay_ms=float(fault.delay_ms or 0), jitter_ms=float(fault.jitter_ms or 0))
            else:
                h = self.lab.netem(name, loss_pct=float(fault.loss_pct or 0))
            self.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                                   peer_id=peer_id, backend="net"))
            h.inject()
            act.handles.append(h)
            self.say(f"f{index}: network {fault.action} on {name}" + (f" <-> {self.svc.nodes[peer_id].name}"
                                                                      if peer_id else ""))
        elif isinstance(fault, ProcessFault):
            self.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                                   backend="process"))
            if fault.action == "kill":
                self.svc.kill(node_id, fault.signal)
                act.restart_after = fault.duration_ms is not None
            elif fault.action == "power-cut":
                self._power_cut(index, node_id, name)
                act.restart_after = fault.duration_ms is not None
            elif fault.action == "pause":
                self.svc.pause(node_id)
            else:
                self.svc.restart(node_id, clean=fault.clean, while_down=lambda: self._while_down(index, node_id))
                act.healed = True
            self.say(f"f{index}: {fault.action} {name}")
        elif isinstance(fault, ReplaceDisk):
            self._replace_disk(index, fault, node_id)
            act.healed = True
        elif isinstance(fault, MoveReplica):
            self._move_replica(index, fault, node_id)
            act.healed = True
        else:
            raise ValueError(f"unknown fault {fault!r}")
        self.active[index] = act
        return act

    def _admin(self, index: int, fault: AdminAction) -> ActiveFault:
        from harness.nemesis.admin import run_admin_action
        res = run_admin_action(index, fault, bootstrap=self.svc.bootstrap(), metadata=self.svc.metadata,
                               ledger=self.ledger, say=self.say)
        if res.result != "none":
            self.errors.append(f"f{index}: {fault.action} {fault.topic} answered {res.result}")
        elif fault.action == "create-topic":
            self.admin_topics[fault.topic] = int(fault.partitions or 0)
        else:
            self.admin_topics.pop(fault.topic, None)
        act = ActiveFault(index, fault, None, healed=True, result=res)
        self.active[index] = act
        return act

    def _while_down(self, index: int, node_id: int) -> None:
        self._cold_disks(index, node_id)
        self._repair_healed_disks(index, node_id)

    def _repair_healed_disks(self, index: int, node_id: int) -> None:
        """A restart of a node whose disk a fault took away and then gave back (the fault
        healed: the device serves I/O again) finds that disk repaired — unmounted, fsck'd,
        mounted again, with its data — as an operator does before the restart: the dir
        comes back to the broker with what it held (KIP-858: its strays are deleted then)."""
        name = self.svc.nodes[node_id].name
        for act in self.active.values():
            if act.node_id != node_id or not act.healed or not isinstance(act.fault, DiskFault) \
                    or act.fault.mode not in DIR_LOSING_MODES:
                continue
            for d in act.dirs:
                if d == META_DIR or (node_id, d) in self.repaired:
                    continue
                self.repaired.add((node_id, d))
                try:
                    summary = self.lab.repair_disk(name, d)
                except Exception as exc:  # noqa: BLE001 - the node starts with the disk as it is, said so
                    self.errors.append(f"f{index}: repair {name}/{d}: {exc}")
                    continue
                self.ledger.action(time.time_ns(), "disk_repaired", node_id, fault_id=f"f{index}", dir=d,
                                   dir_id=self.dir_names(node_id).get(d, ""), after=f"f{act.index}",
                                   fsck=str(summary)[:200])
                self.say(f"f{index}: {name}/{d} back (repaired after f{act.index} healed)")

    def _cold_disks(self, index: int, node_id: int) -> None:
        """A restart of a node whose disk a fault took away finds that disk cold (the page cache
        dropped while the node is down): its start-up reads ``meta.properties`` from the dead
        device, not from a cached copy, as it would after a reboot."""
        dead = [a for a in self.active.values() if a.node_id == node_id and not a.healed
                and isinstance(a.fault, DiskFault) and a.fault.mode in DIR_LOSING_MODES]
        if not dead:
            return
        try:
            host.drop_page_cache()
        except Exception as exc:  # noqa: BLE001 - the restart goes on with a warm cache, said so
            self.errors.append(f"f{index}: {exc}")
            return
        self.ledger.action(time.time_ns(), "page_cache_dropped", node_id, fault_id=f"f{index}",
                           dead_disk_faults=[f"f{a.index}" for a in dead])

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
        f = act.fault
        if isinstance(f, ProcessFault):
            if f.action == "pause":
                self.svc.unpause(act.node_id)
            elif act.restart_after:
                self.svc.start(act.node_id)
        self.ledger.write(fault_healed_event(f, index, ts_ns=time.time_ns(), node_id=act.node_id))
        self.say(f"f{index}: healed")

    def heal_all(self) -> None:
        for index in sorted(self.active):
            try:
                self.heal(index)
            except Exception as exc:  # noqa: BLE001 - the final heal must reach every fault
                self.errors.append(f"heal f{index}: {exc}")

    # ---- disk faults -------------------------------------------------------------------
    def _inject_disk(self, act: ActiveFault, index: int, fault: DiskFault, node_id: int, name: str) -> None:
        from harness.nemesis.file_targets import resolve
        dirs = list(self.bindings.dirs(node_id, fault.dir, lambda n, parsed: self._dir_lookup(n, parsed)))
        idmap = self.dir_names(node_id)
        kw: dict[str, Any] = {}
        if fault.mode in P_MODES:
            kw = {"p": fault.p if fault.p is not None else 1.0, "seed": fault_seed(self.seed, index)}
        elif fault.mode == "delay":
            kw = {"delay_ms": float(fault.delay_ms)}
        files: dict[str, list] = {}
        if fault.file:
            files = {d: resolve(fault.file, self.lab.disk(name, d).data_path) for d in dirs}
        handles = [self.lab.disk_fault(name, d, fault.mode, files=files.get(d, ()), **kw) for d in dirs]
        ts = time.time_ns()
        for d, h in zip(dirs, handles):
            h.inject()
            act.handles.append(h)
            act.dirs.append(d)
        ts = min((h.record.injected_ns for h in handles if h.record.injected_ns), default=ts)
        dir_ids = [idmap.get(d, "") for d in dirs]
        extra: dict[str, Any] = {}
        if fault.file:
            extra = {"file": fault.file, "files": [str(p.relative_to(self.lab.disk(name, d).mountpoint))
                                                  for d in dirs for p in files[d]],
                     "ranges": [r for h in handles for r in (h.record.ranges or [])],
                     "cache_pages": [h.record.cache_pages for h in handles]}
        event = fault_injected_event(fault, index, ts_ns=ts, node_id=node_id, dir_ids=dir_ids,
                                     paths=[f"/jbodlab/disks/{d}/data" for d in dirs], backend=self.lab.backend.name)
        self.ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event,
                                      node_id=event.node_id, attrs={**event.attrs, **extra}))
        for d, h in zip(dirs, handles):
            rec = h.record
            if rec.first_io_error_observed_ns:
                self.ledger.action(rec.first_io_error_observed_ns, "first_io_error_observed", node_id,
                                   fault_id=f"f{index}", dir_id=idmap.get(d, ""), dir=d, errno=rec.probe_errno,
                                   probe_op=rec.probe_op, flipped_bits=rec.probe_flipped_bits)
        self.say(f"f{index}: {fault.mode} on {name} {','.join(dirs)}"
                 + (f" {fault.file} ({sum(len(v) for v in files.values())} files, "
                    f"{sum(e - s for h in handles for s, e in (h.record.ranges or []))} bytes)" if fault.file else "")
                 + f" ({self.lab.backend.name})")

    def _record_first_hit(self, index: int, node_id: int | None, dir_name: str | None, handle: Any) -> None:
        rec = getattr(handle, "record", None)
        if rec is None or not getattr(rec, "first_hit_ns", None):
            return
        idmap = self.dir_names(node_id) if node_id in self.svc.nodes else {}
        self.ledger.action(rec.first_hit_ns, "fault_first_hit", node_id, fault_id=f"f{index}", dir=dir_name,
                           dir_id=idmap.get(dir_name or "", ""), kind=rec.kind, hits=rec.hits,
                           flipped_bits=rec.flipped_bits)

    def _power_cut(self, index: int, node_id: int, name: str) -> None:
        """SIGKILL, then every disk of the node loses what it had not made durable."""
        for act in self.active.values():   # date the first hits while the modes are still in force
            if act.node_id == node_id and isinstance(act.fault, DiskFault) and not act.healed:
                for h in act.handles:
                    h.observe_hits()
        self.svc.kill(node_id, "SIGKILL")
        idmap = self.dir_names(node_id)
        for cut in self.lab.power_cut(name, say=self.say):
            self.ledger.action(cut.cut_ns, "unsynced_writes_dropped", node_id, fault_id=f"f{index}", dir=cut.dir,
                               dir_id=idmap.get(cut.dir, ""), dropped_bytes=cut.dropped_bytes,
                               writeback_dropped_bytes=cut.writeback_dropped_bytes, powered_on_ns=cut.powered_on_ns)
        for act in list(self.active.values()):   # their cache is gone with the power
            if act.node_id == node_id and isinstance(act.fault, DiskFault) and act.fault.mode == "lose-unsynced":
                self.heal(act.index)

    # ---- disk replacement and replica moves ----------------------------------------------
    def _replace_disk(self, index: int, fault: ReplaceDisk, node_id: int) -> None:
        dname = self.bindings.dirs(node_id, fault.dir, lambda n, parsed: self._dir_lookup(n, parsed))[0]
        old_id = self.dir_names(node_id).get(dname, "")
        for act in self.active.values():   # the old disk's faults end with it
            if act.node_id == node_id and isinstance(act.fault, DiskFault):
                self.heal(act.index)
        self.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                               dir_ids=[old_id] if old_id else [],
                                               paths=[f"/jbodlab/disks/{dname}/data"], backend=self.lab.backend.name))
        self.svc.stop(node_id)
        name = self.svc.nodes[node_id].name
        self.lab.replace_disk(name, dname)
        for d in self.svc.nodes[node_id].disk_names:   # other dirs that saw a write error: fsck
            if d != dname:
                try:
                    from infra import fs
                    if fs.is_read_only(self.lab.disk(name, d).mountpoint):
                        self.lab.repair_disk(name, d)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"repair {name}/{d}: {exc}")
        self.svc.format(node_id, ignore_formatted=True)
        self.svc.start(node_id)
        self.say(f"f{index}: replaced {name}/{dname} (was {old_id}, now {self.dir_names(node_id).get(dname)})")

    def _move_replica(self, index: int, fault: MoveReplica, node_id: int) -> None:
        target = self.bindings.dirs(node_id, fault.to_dir, lambda n, parsed: self._dir_lookup(n, parsed))[0]
        idmap = self.dir_names(node_id)
        path = f"/jbodlab/disks/{target}/data"
        ts = time.time_ns()
        # recorded only once the broker answered: a move that was never requested is not in the history
        code = asyncio.run(alter_replica_log_dir(self.svc.ip(node_id), BROKER_PORT, path, fault.topic,
                                                 fault.partition))
        event = fault_injected_event(fault, index, ts_ns=ts, node_id=node_id, dir_ids=[idmap.get(target, "")],
                                     paths=[path], backend="admin")
        self.ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event,
                                      node_id=event.node_id, attrs={**event.attrs, "result": code}))
        self.say(f"f{index}: AlterReplicaLogDirs {fault.topic}-{fault.partition} on broker {node_id} -> "
                 f"{target}: {code}")
        if code != "none":
            self.errors.append(f"f{index}: AlterReplicaLogDirs answered {code}")


async def alter_replica_log_dir(host: str, port: int, path: str, topic: str, partition: int) -> str:
    from kafka_common import wire
    from kafka_runtime.client import KafkaClient
    client = await KafkaClient.connect(host, port, client_id="jbodlab-harness")
    try:
        version = client.pick_version(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
        mod = wire.request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
        req = wire.make(wire.request_class(ApiKey.ALTER_REPLICA_LOG_DIRS, version), dirs=(
            wire.make(mod.AlterReplicaLogDir, path=path, topics=(
                wire.make(mod.AlterReplicaLogDirTopic, name=topic, partitions=(partition,)),)),))
        resp = await client.request(req)
        codes = {p.error_code.name for r in resp.results for p in r.partitions}
        return ",".join(sorted(codes)) or "none"
    finally:
        await client.close()
