"""One ordered history of a run (Jepsen style): client ops, harness actions, node events.

Entries, merged by ``ts_ns`` (CLOCK_REALTIME everywhere: the containers share the host's
clock) and numbered by ``index``:

- :class:`ClientOp` — ``type`` invoke | ok | fail | info (info = outcome unknown, e.g. a
  timeout), ``f`` produce | consume, ``process`` (one producer or consumer worker),
  ``value_id`` (unique per produced value), ``topic``/``partition``/``offset``, ``error``.
  A produce is an ``invoke`` then one completion from the same process with the same
  ``value_id``; a consumed record is a single ``ok`` consume op.
- :class:`Event` with ``source="harness"`` — the runner's actions: ``fault_injected``,
  ``fault_healed``, ``first_io_error_observed``, ``node_started``, ``node_exited``,
  ``node_status``, ``page_cache_dropped`` (a node with a dead disk restarted cold); with ``source="client"``: ``drained`` (the drain consumer reached
  ``offset`` = end of ``topic``/``partition``).
- :class:`Event` with ``source="node"`` — a line of a node's event log (interfaces.md).

Values and parsing only (the checkers read them): :mod:`harness.results.ledger` writes the runner's
JSON-lines *ledger* and merges it with every node's ``events.file``. Malformed lines never
abort a parse: they are kept in ``History.problems`` ("file:line: problem") and the rest is
read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

__all__ = [
    "OP_TYPES", "OP_FS", "HARNESS_ACTIONS", "ClientOp", "Event", "Entry", "OpPair", "History",
    "parse_node_events", "parse_ledger", "entry_to_json",
    "fault_injected_event", "fault_healed_event",
]

T = TypeVar("T")
OP_TYPES = ("invoke", "ok", "fail", "info")
OP_FS = ("produce", "consume")
HARNESS_ACTIONS = ("fault_injected", "fault_healed", "first_io_error_observed", "node_started",
                   "node_exited", "node_status", "page_cache_dropped")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOp:
    ts_ns: int
    type: str
    f: str
    process: str
    topic: str | None = None
    partition: int | None = None
    value_id: str | None = None
    offset: int | None = None
    error: str | None = None
    index: int = -1

    @property
    def source(self) -> str:
        return "client"


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    ts_ns: int
    source: str                      # "harness" | "node" | "client" (drained)
    event: str
    node_id: int | None = None
    role: str | None = None          # node events: "broker" | "controller"
    attrs: Mapping[str, Any] = field(default_factory=dict)
    index: int = -1

    def get(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


Entry = Union[ClientOp, Event]


@dataclass(frozen=True, slots=True)
class OpPair:
    """A produce: its invoke and its completion (``None``: never completed → treat as info)."""

    invoke: ClientOp
    completion: ClientOp | None

    @property
    def outcome(self) -> str:
        return "info" if self.completion is None else self.completion.type


@dataclass(frozen=True, slots=True)
class History:
    entries: tuple[Entry, ...]
    problems: tuple[str, ...] = ()

    @staticmethod
    def of(entries: Iterable[Entry], problems: Sequence[str] = ()) -> "History":
        """Order by ``ts_ns`` (stable: equal stamps keep their input order) and number them."""
        ordered = sorted(entries, key=lambda e: e.ts_ns)
        return History(tuple(replace(e, index=i) for i, e in enumerate(ordered)), tuple(problems))

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def start_ns(self) -> int | None:
        return self.entries[0].ts_ns if self.entries else None

    @property
    def end_ns(self) -> int | None:
        return self.entries[-1].ts_ns if self.entries else None

    def ops(self, f: str | None = None, type: str | None = None) -> list[ClientOp]:
        return [e for e in self.entries if isinstance(e, ClientOp)
                and (f is None or e.f == f) and (type is None or e.type == type)]

    def events(self, event: str | Sequence[str] | None = None, *, source: str | None = None,
               node_id: int | None = None, role: str | None = None) -> list[Event]:
        names = (event,) if isinstance(event, str) else event
        return [e for e in self.entries if isinstance(e, Event)
                and (names is None or e.event in names) and (source is None or e.source == source)
                and (node_id is None or e.node_id == node_id) and (role is None or e.role == role)]

    def produce_pairs(self) -> list[OpPair]:
        """Every produce invoke with its completion (same process and value id)."""
        open_: dict[tuple[str, str | None], ClientOp] = {}
        pairs: dict[int, OpPair] = {}
        for op in self.ops("produce"):
            key = (op.process, op.value_id)
            if op.type == "invoke":
                open_[key] = op
                pairs[op.index] = OpPair(op, None)
            elif key in open_:
                inv = open_.pop(key)
                pairs[inv.index] = OpPair(inv, op)
        return [pairs[i] for i in sorted(pairs)]

    def faults(self) -> list[Event]:
        return self.events("fault_injected", source="harness")

    def resolve_ref(self, ref: str) -> int | None:
        """The node id a node ref was bound to (first ``fault_injected`` naming it); plain
        ``broker:N``/``controller:N`` refs resolve to N."""
        for e in self.faults():
            if e.get("node_ref") == ref and e.node_id is not None:
                return e.node_id
            if e.get("peer_ref") == ref and e.get("peer_id") is not None:
                return int(e.get("peer_id"))
        kind, _, rest = ref.partition(":")
        if kind in ("broker", "controller") and rest.isdigit():
            return int(rest)
        return None


# ---------------------------------------------------------------- parsing

_NODE_CORE = ("ts_ns", "node_id", "role", "event")


def _int_field(obj: Mapping[str, Any], key: str, required: bool) -> int | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise ValueError(f"missing {key!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer, got {value!r}")
    return value


def _node_event(obj: Any) -> Event:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if not isinstance(obj.get("event"), str):
        raise ValueError("missing 'event'")
    return Event(ts_ns=_int_field(obj, "ts_ns", True), source="node", event=obj["event"],
                 node_id=_int_field(obj, "node_id", False), role=obj.get("role"),
                 attrs={k: v for k, v in obj.items() if k not in _NODE_CORE})


def parse_node_events(lines: Iterable[str], where: str = "events") -> tuple[list[Event], list[str]]:
    """Parse one node's event log (JSON lines). Returns (events, problems); a bad line (e.g. a
    half-written last line after a halt) becomes a problem naming ``where:line``."""
    return _parse_lines(lines, where, _node_event)


def _parse_lines(lines: Iterable[str], where: str, parse: Callable[[Any], T]) -> tuple[list[T], list[str]]:
    """``parse`` of each non-blank JSON line; a line it refuses is a problem naming ``where:line``."""
    out, problems = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except (ValueError, TypeError) as exc:
            problems.append(f"{where}:{n}: {exc}: {line.strip()[:120]!r}")
    return out, problems


def _ledger_entry(obj: Any) -> Entry:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    source = obj.get("source")
    if source == "client" and "type" in obj:
        if obj["type"] not in OP_TYPES:
            raise ValueError(f"'type' {obj['type']!r} is not one of {', '.join(OP_TYPES)}")
        if obj.get("f") not in OP_FS:
            raise ValueError(f"'f' {obj.get('f')!r} is not one of {', '.join(OP_FS)}")
        return ClientOp(ts_ns=_int_field(obj, "ts_ns", True), type=obj["type"], f=obj["f"],
                        process=str(obj.get("process", "0")), topic=obj.get("topic"),
                        partition=_int_field(obj, "partition", False), value_id=obj.get("value_id"),
                        offset=_int_field(obj, "offset", False), error=obj.get("error"))
    if source in ("harness", "client"):
        if not isinstance(obj.get("event"), str):
            raise ValueError("missing 'event'")
        return Event(ts_ns=_int_field(obj, "ts_ns", True), source=source, event=obj["event"],
                     node_id=_int_field(obj, "node_id", False),
                     attrs={k: v for k, v in obj.items() if k not in ("ts_ns", "source", "event", "node_id")})
    raise ValueError(f"'source' {source!r} is not client or harness")


def parse_ledger(lines: Iterable[str], where: str = "ledger") -> tuple[list[Entry], list[str]]:
    return _parse_lines(lines, where, _ledger_entry)


def entry_to_json(entry: Entry) -> dict[str, Any]:
    """The ledger / node-log JSON object of an entry (inverse of the parsers)."""
    if isinstance(entry, ClientOp):
        out = {"ts_ns": entry.ts_ns, "source": "client", "type": entry.type, "f": entry.f,
               "process": entry.process, "topic": entry.topic, "partition": entry.partition,
               "value_id": entry.value_id, "offset": entry.offset, "error": entry.error}
        return {k: v for k, v in out.items() if v is not None}
    out = {"ts_ns": entry.ts_ns, "source": entry.source, "event": entry.event}
    if entry.node_id is not None:
        out["node_id"] = entry.node_id
    if entry.role is not None:
        out["role"] = entry.role
    out.update(entry.attrs)
    return out


def fault_injected_event(fault: Any, fault_index: int, *, ts_ns: int, node_id: int | None,
                         dir_ids: Sequence[str] = (), paths: Sequence[str] = (), peer_id: int | None = None,
                         backend: str | None = None) -> Event:
    """The ``fault_injected`` action for a schedule fault, with the attrs the checkers and
    metrics read (``fault_id`` = ``f<index>``)."""
    from harness.scenario.faults import fault_to_dict
    spec = fault_to_dict(fault)
    attrs: dict[str, Any] = {"fault_id": f"f{fault_index}", "fault_index": fault_index, "kind": fault.kind,
                             "fault_kind": fault.label(), "node_ref": spec.get("node"),
                             "spec": spec}
    for key in ("mode", "action", "topic", "partition"):
        if key in spec:
            attrs[key] = spec[key]
    if "dir" in spec or "to_dir" in spec:
        attrs["dir_ref"] = spec.get("dir", spec.get("to_dir"))
    if dir_ids:
        attrs["dir_ids"] = list(dir_ids)
        if len(dir_ids) == 1:
            attrs["dir_id"] = dir_ids[0]
    if paths:
        attrs["paths"] = list(paths)
        if len(paths) == 1:
            attrs["path"] = paths[0]
    if peer_id is not None:
        attrs["peer_ref"], attrs["peer_id"] = spec.get("peer"), peer_id
    if backend is not None:
        attrs["backend"] = backend
    return Event(ts_ns=ts_ns, source="harness", event="fault_injected", node_id=node_id, attrs=attrs)


def fault_healed_event(fault: Any, fault_index: int, *, ts_ns: int, node_id: int | None) -> Event:
    return Event(ts_ns=ts_ns, source="harness", event="fault_healed", node_id=node_id,
                 attrs={"fault_id": f"f{fault_index}", "kind": fault.kind, "fault_kind": fault.label()})
