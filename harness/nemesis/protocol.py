"""The one shape of every fault kind, and what the executor hands it.

A fault kind (disk, network, process, replace-disk, move-replica, admin) is a :class:`Nemesis`:

- ``inject(host, index, fault) -> ActiveFault`` does fault ``index`` of the schedule to the
  live cluster and records it (``fault_injected`` and what the kind observes);
- ``heal(host, act)`` undoes what the kind itself holds once the executor has healed the
  fault's infra handles (``act.handles``: what a disk or network fault put in place); a kind
  whose faults are over when injected (``act.healed``) is never asked;
- ``describe(fault) -> str`` names the fault as the chaos session lists it.

The executor (:class:`~harness.nemesis.executor.FaultExecutor`) is the :class:`NemesisHost`:
the services, the lab, the ledger, the ref bindings and the faults in force.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.cluster.services import Services
from harness.results.ledger import LedgerWriter
from harness.scenario.faults import RefBindings

Say = Callable[[str], None]
__all__ = ["ActiveFault", "Nemesis", "NemesisHost", "Say"]


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


class NemesisHost(Protocol):
    svc: Services
    lab: Any
    ledger: LedgerWriter
    seed: int
    say: Say
    bindings: RefBindings
    active: dict[int, ActiveFault]
    errors: list[str]
    admin_topics: dict[str, int]
    repaired: set[tuple[int, str]]

    def node_of(self, ref: str) -> int:
        """The node a ref names, bound at its first use."""

    def dirs_of(self, node_id: int, ref: str) -> tuple[str, ...]:
        """The dir names a dir ref names on ``node_id``, bound at its first use."""

    def dir_names(self, node_id: int) -> dict[str, str]:
        """{dir name: directory id} of a broker."""

    def heal(self, index: int) -> None:
        """Heal fault ``index`` (no-op when healed or unknown)."""


class Nemesis(Protocol):
    def inject(self, host: NemesisHost, index: int, fault: Any) -> ActiveFault: ...

    def heal(self, host: NemesisHost, act: ActiveFault) -> None: ...

    def describe(self, fault: Any) -> str: ...
