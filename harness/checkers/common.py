"""Shared readings of a history for checkers and metrics: injected faults, per-partition
timelines of committed (leader, ISR) states, node exits. Pure."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.checkers.replay import MetadataView, TP, controller_events
from harness.history.model import Event, History

__all__ = ["InjectedFault", "injected_faults", "partition_timelines", "PartitionState", "first_after",
           "MUST_DETECT_MODES", "NOT_A_FAILURE_MODES", "WHOLE_NODE_DIRS", "must_detect", "dir_offline_events",
           "node_actions"]

# disk modes that every busy broker must notice (writes + fsync + the health probe)
MUST_DETECT_MODES = ("error", "error-writes", "enospc", "remove", "permission")   # on a whole dir
# modes that are no failure at all: the dir must stay online (a slow dir; a volatile cache that
# loses nothing until a power cut)
NOT_A_FAILURE_MODES = ("delay", "lose-unsynced")
# dir refs that name a broker's dirs as a whole (every data dir, the metadata dir, both)
WHOLE_NODE_DIRS = ("metadata", "all", "all+metadata")


def must_detect(f) -> bool:
    """A busy broker must notice this disk fault: a whole-dir mode it cannot miss. A fault on
    one file's blocks is met only when the broker touches that file, so, like flaky or
    error-reads, it is judged only if the broker noticed it."""
    return f.mode in MUST_DETECT_MODES and not f.attrs.get("file")


@dataclass(frozen=True)
class InjectedFault:
    """A ``fault_injected`` harness action with its resolved targets.

    Attributes read from the action: ``fault_id``, ``kind`` (disk, network, process,
    replace-disk, move-replica), ``mode`` (disk) or ``action``, ``fault_kind`` (label),
    ``node_ref``, ``dir_ref``, ``dir_ids`` (or ``dir_id``), ``peer_id``, ``topic``, ``partition``.
    """

    fault_id: str
    kind: str
    ts_ns: int
    node_id: int | None
    mode: str | None
    dir_ids: tuple[str, ...]
    dir_ref: str | None
    healed_ns: int | None
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.attrs.get("fault_kind") or self.mode or self.attrs.get("action") or self.kind)


def injected_faults(history: History) -> list[InjectedFault]:
    healed: dict[str, int] = {}
    for e in history.events("fault_healed", source="harness"):
        fid = str(e.get("fault_id"))
        healed.setdefault(fid, e.ts_ns)
    out = []
    for i, e in enumerate(history.faults()):
        fid = str(e.get("fault_id", f"f{i}"))
        dirs = e.get("dir_ids")
        if dirs is None:
            dirs = [e.get("dir_id")] if e.get("dir_id") is not None else []
        out.append(InjectedFault(fault_id=fid, kind=str(e.get("kind", "disk")), ts_ns=e.ts_ns, node_id=e.node_id,
                                 mode=e.get("mode", e.get("action")), dir_ids=tuple(str(d) for d in dirs),
                                 dir_ref=e.get("dir_ref"), healed_ns=healed.get(fid), attrs=dict(e.attrs)))
    return out


@dataclass(frozen=True)
class PartitionState:
    ts_ns: int
    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...] | None
    directories: tuple[str, ...] | None
    reason: str | None


def partition_timelines(history: History) -> dict[TP, list[PartitionState]]:
    """Every committed state of every partition, in order (one per ``partition_change``)."""
    view = MetadataView()
    out: dict[TP, list[PartitionState]] = defaultdict(list)
    for e in controller_events(history):
        view.apply(e)
        if e.event == "partition_change" and e.get("topic") is not None and e.get("partition") is not None:
            key = (str(e.get("topic")), int(e.get("partition")))
            p = view.partitions[key]
            out[key].append(PartitionState(e.ts_ns, p.leader, tuple(p.isr),
                                           None if p.replicas is None else tuple(p.replicas),
                                           None if p.directories is None else tuple(p.directories),
                                           e.get("reason")))
    return dict(out)


def first_after(states: list[PartitionState], ts_ns: int, pred) -> PartitionState | None:
    for s in states:
        if s.ts_ns >= ts_ns and pred(s):
            return s
    return None


def dir_offline_events(history: History, broker_id: int, dir_ids: tuple[str, ...], after_ns: int) -> list[Event]:
    """The broker's own ``dir_offline`` events for one of ``dir_ids`` at or after a time."""
    return [e for e in history.events("dir_offline", source="node", node_id=broker_id)
            if e.ts_ns >= after_ns and (not dir_ids or str(e.get("dir_id")) in dir_ids)]


def node_actions(history: History, node_id: int, after_ns: int) -> list[Event]:
    """Harness actions that disturb a node on purpose (process/network faults, exits, starts)."""
    out = []
    for e in history.events(source="harness"):
        if e.ts_ns < after_ns:
            continue
        if e.event == "fault_injected" and e.get("kind") in ("process", "network", "replace-disk") and \
                (e.node_id == node_id or e.get("peer_id") == node_id):
            out.append(e)
        elif e.event in ("node_exited", "node_started") and e.node_id == node_id:
            out.append(e)
    return out
