"""Process faults: ``kill`` (a signal; started again at the heal when it has a duration),
``power-cut`` (SIGKILL, then every disk of the node loses what it had not made durable),
``pause`` (the cgroup freezer; resumed at the heal) and ``restart`` (over when injected: a
node whose disks faults took away comes back to them cold, or repaired once healed)."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.history.model import fault_injected_event
from harness.nemesis.disk import cold_disks, repair_healed_disks
from harness.nemesis.protocol import ActiveFault, NemesisHost
from harness.scenario.faults import DiskFault, ProcessFault

__all__ = ["ProcessNemesis", "power_cut"]


def _kill(host: NemesisHost, act: ActiveFault, name: str) -> None:
    host.svc.kill(act.node_id, act.fault.signal)
    act.restart_after = act.fault.duration_ms is not None


def _power_cut(host: NemesisHost, act: ActiveFault, name: str) -> None:
    power_cut(host, act.index, act.node_id, name)
    act.restart_after = act.fault.duration_ms is not None


def _pause(host: NemesisHost, act: ActiveFault, name: str) -> None:
    host.svc.pause(act.node_id)


def _restart(host: NemesisHost, act: ActiveFault, name: str) -> None:
    index, node_id = act.index, act.node_id

    def while_down() -> None:
        cold_disks(host, index, node_id)
        repair_healed_disks(host, index, node_id)
    host.svc.restart(node_id, clean=act.fault.clean, while_down=while_down)
    act.healed = True


_ACTIONS: dict[str, Callable[[NemesisHost, ActiveFault, str], None]] = {
    "kill": _kill, "power-cut": _power_cut, "pause": _pause, "restart": _restart}


class ProcessNemesis:
    def inject(self, host: NemesisHost, index: int, fault: ProcessFault) -> ActiveFault:
        node_id = host.node_of(fault.node)
        act = ActiveFault(index, fault, node_id)
        name = host.svc.nodes[node_id].name
        host.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                               backend="process"))
        _ACTIONS.get(fault.action, _restart)(host, act, name)
        host.say(f"f{index}: {fault.action} {name}")
        return act

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        if act.fault.action == "pause":
            host.svc.unpause(act.node_id)
        elif act.restart_after:
            host.svc.start(act.node_id)

    def describe(self, fault: ProcessFault) -> str:
        return f"{fault.label()} {fault.node}"


def power_cut(host: NemesisHost, index: int, node_id: int, name: str) -> None:
    """SIGKILL, then every disk of the node loses what it had not made durable."""
    for act in host.active.values():   # date the first hits while the modes are still in force
        if act.node_id == node_id and isinstance(act.fault, DiskFault) and not act.healed:
            for h in act.handles:
                h.observe_hits()
    host.svc.kill(node_id, "SIGKILL")
    idmap = host.dir_names(node_id)
    for cut in host.lab.power_cut(name, say=host.say):
        host.ledger.action(cut.cut_ns, "unsynced_writes_dropped", node_id, fault_id=f"f{index}", dir=cut.dir,
                           dir_id=idmap.get(cut.dir, ""), dropped_bytes=cut.dropped_bytes,
                           writeback_dropped_bytes=cut.writeback_dropped_bytes, powered_on_ns=cut.powered_on_ns)
    for act in list(host.active.values()):   # their cache is gone with the power
        if act.node_id == node_id and isinstance(act.fault, DiskFault) and act.fault.mode == "lose-unsynced":
            host.heal(act.index)
