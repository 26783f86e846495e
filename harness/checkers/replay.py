"""Replay the controller's committed changes (its node events) into a metadata view.

The controller logs ``registered``, ``registration_change``, ``fenced``, ``unfenced`` and
``partition_change`` events (interfaces.md) as it commits the matching records. Fields read:

- ``registered``: ``broker_id``, ``dirs`` (online dir ids, Kafka base64), ``fenced``
  (default true: a new incarnation starts fenced), ``broker_epoch``.
- ``registration_change`` (also spelled ``broker_log_dirs_changed``, the controller's name):
  ``broker_id``, ``dirs`` / ``log_dirs`` (remaining online dirs), optional ``fenced``.
- ``fenced`` / ``unfenced``: ``broker_id``.
- ``partition_change``: ``topic``, ``partition`` and the fields it sets: ``replicas``,
  ``isr``, ``leader``, ``directories`` (aligned with replicas), ``reason``. Missing fields
  keep their previous value (a PartitionChangeRecord carries only what changed).

Pure. ``dirs`` may also be spelled ``log_dirs`` or ``online_dirs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from harness.history.model import Event, History
from kafka_common import ids

__all__ = ["UNASSIGNED", "LOST", "MIGRATING", "PartitionView", "BrokerView", "MetadataView",
           "controller_events", "replay", "view_at", "is_offline_reason", "CONTROLLER_EVENTS",
           "REGISTRATION_CHANGES"]

UNASSIGNED = ids.to_base64(ids.UNASSIGNED)
LOST = ids.to_base64(ids.LOST)
MIGRATING = ids.to_base64(ids.MIGRATING)
CONTROLLER_EVENTS = ("registered", "registration_change", "broker_log_dirs_changed", "fenced", "unfenced",
                     "partition_change")
REGISTRATION_CHANGES = ("registration_change", "broker_log_dirs_changed")

TP = tuple[str, int]


def is_offline_reason(reason: object) -> bool:
    """Whether a controller change was caused by an offline / lost dir."""
    return isinstance(reason, str) and ("offline" in reason.lower() or "lost" in reason.lower())


@dataclass
class PartitionView:
    topic: str
    partition: int
    replicas: list[int] | None = None
    isr: list[int] = field(default_factory=list)
    leader: int = -1
    directories: list[str] | None = None

    def dir_of(self, broker_id: int) -> str | None:
        if self.replicas is None or self.directories is None or broker_id not in self.replicas:
            return None
        i = self.replicas.index(broker_id)
        return self.directories[i] if i < len(self.directories) else None


@dataclass
class BrokerView:
    broker_id: int
    dirs: set[str] = field(default_factory=set)
    registered_dirs: int = 0      # how many dirs its latest registration listed
    fenced: bool = True
    epoch: int | None = None

    def dir_online(self, dir_id: str | None) -> bool:
        """Behaviour §2: UNASSIGNED/MIGRATING online, LOST offline, else in the online set."""
        if dir_id is None or dir_id in (UNASSIGNED, MIGRATING):
            return True
        if dir_id == LOST:
            return False
        return dir_id in self.dirs


@dataclass
class MetadataView:
    partitions: dict[TP, PartitionView] = field(default_factory=dict)
    brokers: dict[int, BrokerView] = field(default_factory=dict)

    def broker(self, broker_id: int) -> BrokerView:
        if broker_id not in self.brokers:
            self.brokers[broker_id] = BrokerView(broker_id)
        return self.brokers[broker_id]

    def apply(self, e: Event) -> None:
        """Apply one controller event (unknown events are ignored)."""
        if e.event == "partition_change":
            topic, part = e.get("topic"), e.get("partition")
            if topic is None or part is None:
                return
            key = (str(topic), int(part))
            view = self.partitions.setdefault(key, PartitionView(key[0], key[1]))
            if e.get("replicas") is not None:
                view.replicas = [int(r) for r in e.get("replicas")]
            if e.get("isr") is not None:
                view.isr = [int(r) for r in e.get("isr")]
            if e.get("leader") is not None:
                view.leader = int(e.get("leader"))
            if e.get("directories") is not None:
                view.directories = [str(d) for d in e.get("directories")]
            return
        broker_id = e.get("broker_id")
        if broker_id is None:
            return
        b = self.broker(int(broker_id))
        dirs = e.get("dirs", e.get("log_dirs", e.get("online_dirs")))
        if e.event == "registered":
            b.dirs = set(dirs or [])
            b.registered_dirs = len(b.dirs)
            b.fenced = bool(e.get("fenced", True))
            b.epoch = e.get("broker_epoch")
        elif e.event in REGISTRATION_CHANGES:
            if dirs is not None:
                b.dirs = set(dirs)
            if e.get("fenced") is not None:
                b.fenced = bool(e.get("fenced"))
        elif e.event == "fenced":
            b.fenced = True
        elif e.event == "unfenced":
            b.fenced = False

    def partitions_of(self, broker_id: int) -> list[PartitionView]:
        return [p for p in self.partitions.values() if p.replicas and broker_id in p.replicas]

    def copy(self) -> "MetadataView":
        out = MetadataView()
        for k, p in self.partitions.items():
            out.partitions[k] = PartitionView(p.topic, p.partition, None if p.replicas is None else list(p.replicas),
                                              list(p.isr), p.leader,
                                              None if p.directories is None else list(p.directories))
        for k, b in self.brokers.items():
            out.brokers[k] = BrokerView(b.broker_id, set(b.dirs), b.registered_dirs, b.fenced, b.epoch)
        return out


def controller_events(history: History) -> list[Event]:
    return history.events(CONTROLLER_EVENTS, source="node", role="controller")


def replay(history: History) -> Iterator[tuple[Event, MetadataView]]:
    """Yield ``(event, view after it)`` for each controller event; the view is shared and
    mutated in place (copy it to keep a snapshot)."""
    view = MetadataView()
    for e in controller_events(history):
        view.apply(e)
        yield e, view


def view_at(history: History, ts_ns: int) -> MetadataView:
    """The metadata view after every controller event with ``ts_ns`` ≤ the given time."""
    view = MetadataView()
    for e in controller_events(history):
        if e.ts_ns > ts_ns:
            break
        view.apply(e)
    return view
