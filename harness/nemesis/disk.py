"""Disk faults and disk replacement, the dir-losing side of a restart.

:class:`DiskNemesis` fails dirs at the block layer (``Lab.disk_fault``: one infra handle per
dir; a file target limits it to that file's blocks), records ``fault_injected`` with the dir
ids and, per dir, ``first_io_error_observed`` from the probe. :class:`ReplaceDiskNemesis`
stops the broker, swaps in a freshly formatted disk (new ``directory.id``), repairs the
broker's other read-only dirs and starts it again. :func:`cold_disks` and
:func:`repair_healed_disks` are what a restart of a node finds of the disks faults took away.
"""

from __future__ import annotations

import time
from typing import Any

from harness.cluster.node_configs import META_DIR
from harness.history.model import fault_injected_event
from harness.nemesis.protocol import ActiveFault, NemesisHost
from harness.scenario.faults import DIR_LOSING_MODES, P_MODES, DiskFault, ReplaceDisk, fault_seed
from infra import host as host_ops

__all__ = ["DiskNemesis", "ReplaceDiskNemesis", "cold_disks", "repair_healed_disks"]


def _label(fault: Any) -> str:
    return f"{fault.label()} {fault.node} {fault.dir}"


class DiskNemesis:
    def inject(self, host: NemesisHost, index: int, fault: DiskFault) -> ActiveFault:
        from harness.nemesis.file_targets import resolve
        node_id = host.node_of(fault.node)
        act = ActiveFault(index, fault, node_id)
        name = host.svc.nodes[node_id].name
        lab = host.lab
        dirs = list(host.dirs_of(node_id, fault.dir))
        idmap = host.dir_names(node_id)
        kw: dict[str, Any] = {}
        if fault.mode in P_MODES:
            kw = {"p": fault.p if fault.p is not None else 1.0, "seed": fault_seed(host.seed, index)}
        elif fault.mode == "delay":
            kw = {"delay_ms": float(fault.delay_ms)}
        files: dict[str, list] = {}
        if fault.file:
            files = {d: resolve(fault.file, lab.disk(name, d).data_path) for d in dirs}
        handles = [lab.disk_fault(name, d, fault.mode, files=files.get(d, ()), **kw) for d in dirs]
        ts = time.time_ns()
        for d, h in zip(dirs, handles):
            h.inject()
            act.handles.append(h)
            act.dirs.append(d)
        ts = min((h.record.injected_ns for h in handles if h.record.injected_ns), default=ts)
        dir_ids = [idmap.get(d, "") for d in dirs]
        extra: dict[str, Any] = {}
        if fault.file:
            extra = {"file": fault.file, "files": [str(p.relative_to(lab.disk(name, d).mountpoint))
                                                  for d in dirs for p in files[d]],
                     "ranges": [r for h in handles for r in (h.record.ranges or [])],
                     "cache_pages": [h.record.cache_pages for h in handles]}
            moved = [h.record.params["seed"] for h in handles if "seed_asked" in h.record.params]
            if moved:   # a corrupt-reads of a short file: the seed whose flips meet its bytes
                extra["corruption_seeds"] = moved
        event = fault_injected_event(fault, index, ts_ns=ts, node_id=node_id, dir_ids=dir_ids,
                                     paths=[f"/jbodlab/disks/{d}/data" for d in dirs], backend=lab.backend.name)
        host.ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event,
                                      node_id=event.node_id, attrs={**event.attrs, **extra}))
        for d, h in zip(dirs, handles):
            rec = h.record
            if rec.first_io_error_observed_ns:
                host.ledger.action(rec.first_io_error_observed_ns, "first_io_error_observed", node_id,
                                   fault_id=f"f{index}", dir_id=idmap.get(d, ""), dir=d, errno=rec.probe_errno,
                                   probe_op=rec.probe_op, flipped_bits=rec.probe_flipped_bits)
        host.say(f"f{index}: {fault.mode} on {name} {','.join(dirs)}"
                 + (f" {fault.file} ({sum(len(v) for v in files.values())} files, "
                    f"{sum(e - s for h in handles for s, e in (h.record.ranges or []))} bytes)" if fault.file else "")
                 + f" ({lab.backend.name})")
        return act

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        """Nothing beyond the handles: the device serves I/O again."""

    def describe(self, fault: DiskFault) -> str:
        return _label(fault)


class ReplaceDiskNemesis:
    def inject(self, host: NemesisHost, index: int, fault: ReplaceDisk) -> ActiveFault:
        node_id = host.node_of(fault.node)
        svc, lab = host.svc, host.lab
        dname = host.dirs_of(node_id, fault.dir)[0]
        old_id = host.dir_names(node_id).get(dname, "")
        for act in host.active.values():   # the old disk's faults end with it
            if act.node_id == node_id and isinstance(act.fault, DiskFault):
                host.heal(act.index)
        host.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                               dir_ids=[old_id] if old_id else [],
                                               paths=[f"/jbodlab/disks/{dname}/data"], backend=lab.backend.name))
        svc.stop(node_id)
        name = svc.nodes[node_id].name
        lab.replace_disk(name, dname)
        for d in svc.nodes[node_id].disk_names:   # other dirs that saw a write error: fsck
            if d != dname:
                try:
                    from infra import fs
                    if fs.is_read_only(lab.disk(name, d).mountpoint):
                        lab.repair_disk(name, d)
                except Exception as exc:  # noqa: BLE001
                    host.errors.append(f"repair {name}/{d}: {exc}")
        svc.format(node_id, ignore_formatted=True)
        svc.start(node_id)
        host.say(f"f{index}: replaced {name}/{dname} (was {old_id}, now {host.dir_names(node_id).get(dname)})")
        return ActiveFault(index, fault, node_id, healed=True)

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        """Over when injected."""

    def describe(self, fault: ReplaceDisk) -> str:
        return _label(fault)


def repair_healed_disks(host: NemesisHost, index: int, node_id: int) -> None:
    """A restart of a node whose disk a fault took away and then gave back (the fault
    healed: the device serves I/O again) finds that disk repaired — unmounted, fsck'd,
    mounted again, with its data — as an operator does before the restart: the dir
    comes back to the broker with what it held (KIP-858: its strays are deleted then)."""
    name = host.svc.nodes[node_id].name
    for act in host.active.values():
        if act.node_id != node_id or not act.healed or not isinstance(act.fault, DiskFault) \
                or act.fault.mode not in DIR_LOSING_MODES:
            continue
        for d in act.dirs:
            if d == META_DIR or (node_id, d) in host.repaired:
                continue
            host.repaired.add((node_id, d))
            try:
                summary = host.lab.repair_disk(name, d)
            except Exception as exc:  # noqa: BLE001 - the node starts with the disk as it is, said so
                host.errors.append(f"f{index}: repair {name}/{d}: {exc}")
                continue
            host.ledger.action(time.time_ns(), "disk_repaired", node_id, fault_id=f"f{index}", dir=d,
                               dir_id=host.dir_names(node_id).get(d, ""), after=f"f{act.index}",
                               fsck=str(summary)[:200])
            host.say(f"f{index}: {name}/{d} back (repaired after f{act.index} healed)")


def cold_disks(host: NemesisHost, index: int, node_id: int) -> None:
    """A restart of a node whose disk a fault took away finds that disk cold (the page cache
    dropped while the node is down): its start-up reads ``meta.properties`` from the dead
    device, not from a cached copy, as it would after a reboot."""
    dead = [a for a in host.active.values() if a.node_id == node_id and not a.healed
            and isinstance(a.fault, DiskFault) and a.fault.mode in DIR_LOSING_MODES]
    if not dead:
        return
    try:
        host_ops.drop_page_cache()
    except Exception as exc:  # noqa: BLE001 - the restart goes on with a warm cache, said so
        host.errors.append(f"f{index}: {exc}")
        return
    host.ledger.action(time.time_ns(), "page_cache_dropped", node_id, fault_id=f"f{index}",
                       dead_disk_faults=[f"f{a.index}" for a in dead])
