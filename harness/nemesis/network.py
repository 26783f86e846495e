"""Network faults inside a node's namespace: ``partition`` (from one peer), ``isolate``, ``delay``
(netem delay and jitter) and ``loss`` (netem loss), each one infra handle the heal removes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.history.model import fault_injected_event
from harness.nemesis.protocol import ActiveFault, NemesisHost
from harness.scenario.faults import NetworkFault

__all__ = ["NetworkNemesis"]

# action -> (host, fault, node name, peer's node name) -> the infra handle, not yet injected
_HANDLES: dict[str, Callable[[NemesisHost, NetworkFault, str, str | None], Any]] = {
    "partition": lambda host, f, name, peer: host.lab.partition(name, peer),
    "isolate": lambda host, f, name, peer: host.lab.isolate(name),
    "delay": lambda host, f, name, peer: host.lab.netem(name, delay_ms=float(f.delay_ms or 0),
                                                        jitter_ms=float(f.jitter_ms or 0)),
    "loss": lambda host, f, name, peer: host.lab.netem(name, loss_pct=float(f.loss_pct or 0)),
}


class NetworkNemesis:
    def inject(self, host: NemesisHost, index: int, fault: NetworkFault) -> ActiveFault:
        node_id = host.node_of(fault.node)
        act = ActiveFault(index, fault, node_id)
        name = host.svc.nodes[node_id].name
        peer_id = host.node_of(fault.peer) if fault.peer else None
        peer = host.svc.nodes[peer_id].name if fault.action == "partition" else None
        h = _HANDLES.get(fault.action, _HANDLES["loss"])(host, fault, name, peer)
        host.ledger.write(fault_injected_event(fault, index, ts_ns=time.time_ns(), node_id=node_id,
                                               peer_id=peer_id, backend="net"))
        h.inject()
        act.handles.append(h)
        host.say(f"f{index}: network {fault.action} on {name}" + (f" <-> {host.svc.nodes[peer_id].name}"
                                                                  if peer_id else ""))
        return act

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        """Nothing beyond the handle: the namespace's rules are gone."""

    def describe(self, fault: NetworkFault) -> str:
        return f"{fault.label()} {fault.node}" + (f" <-> {fault.peer}" if fault.peer else "")
