"""The run's history on disk: the runner's JSON-lines *ledger* (:class:`LedgerWriter`: client
ops and harness actions, one object a line; harness actions are flushed at once, client ops at
most :data:`FLUSH_S` after they are written) and :func:`load_history`, which
merges the ledger with every node's ``events.file`` into a :class:`~harness.history.model.History`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, TextIO

from harness.history.model import (OP_FS, OP_TYPES, ClientOp, Entry, Event, History, entry_to_json,
                             parse_ledger, parse_node_events)

__all__ = ["load_history", "LedgerWriter", "FLUSH_S"]

FLUSH_S = 0.2   # the longest a client op waits in the writer's buffer (a later line flushes it)


def load_history(ledger: str | Path | None, node_event_files: Iterable[str | Path]) -> History:
    """Merge the runner's ledger and every node's event log into one :class:`History`.
    A missing node file is a problem (a node that never started), not an error."""
    entries: list[Entry] = []
    problems: list[str] = []
    if ledger is not None:
        with open(ledger, encoding="utf-8", errors="replace") as fh:
            got, bad = parse_ledger(fh, str(ledger))
        entries += got
        problems += bad
    for path in node_event_files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                got, bad = parse_node_events(fh, str(path))
        except FileNotFoundError:
            problems.append(f"{path}: no such event file")
            continue
        entries += got
        problems += bad
    return History.of(entries, problems)


class LedgerWriter:
    """Appends ledger lines for the runner: one JSON object per line. A client op is flushed
    with the first line written :data:`FLUSH_S` or more after the last flush, a harness action
    (a fault, a node's start or exit) at once, everything at :meth:`close`: at thousands of
    client ops a second a write call per line was most of the harness's CPU, and the readers
    of a ledger open it after the writer is closed (a manual session's file is at most
    :data:`FLUSH_S` behind while its producers run)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: TextIO = open(self.path, "a", encoding="utf-8")
        self._flushed_at = time.monotonic()

    def write(self, entry: Entry, *, flush: bool = True) -> None:
        self._fh.write(json.dumps(entry_to_json(entry), sort_keys=True, default=str) + "\n")
        now = time.monotonic()
        if flush or now - self._flushed_at >= FLUSH_S:
            self._fh.flush()
            self._flushed_at = now

    def op(self, ts_ns: int, type: str, f: str, process: str, **fields: Any) -> ClientOp:
        """Record a client op (``topic``, ``partition``, ``value_id``, ``offset``, ``error``)."""
        if type not in OP_TYPES or f not in OP_FS:
            raise ValueError(f"client op type={type!r} f={f!r}: type must be one of {OP_TYPES}, f one of {OP_FS}")
        op = ClientOp(ts_ns=ts_ns, type=type, f=f, process=process, **fields)
        self.write(op, flush=False)
        return op

    def action(self, ts_ns: int, event: str, node_id: int | None = None, **attrs: Any) -> Event:
        """Record a harness action (``node_started``, ``node_exited``, ``node_status``, …)."""
        e = Event(ts_ns=ts_ns, source="harness", event=event, node_id=node_id, attrs=attrs)
        self.write(e)
        return e

    def drained(self, ts_ns: int, topic: str, partition: int, offset: int) -> Event:
        e = Event(ts_ns=ts_ns, source="client", event="drained",
                  attrs={"topic": topic, "partition": partition, "offset": offset})
        self.write(e)
        return e

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
