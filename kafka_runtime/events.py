"""The node event log: one JSON object per line.

Fields ``ts_ns`` (CLOCK_REALTIME), ``node_id``, ``role``, ``event`` and the event's own
fields. The file is opened in append mode and flushed after every line (it lives outside
the log dirs, so a failed data dir never loses it). Uuids are written in Kafka's base64
text form; tuples/sets as lists. An empty path gives a log that only counts events.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

from kafka_common import ids


@functools.lru_cache(maxsize=4096)
def _uuid_text(value: uuid.UUID) -> str:
    return ids.to_base64(value)


def _default(value: Any) -> Any:
    """json.dumps hook for what JSON lacks: uuids (Kafka base64), sets; else str()."""
    if isinstance(value, uuid.UUID):
        return _uuid_text(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)


def _jsonable(value: Any) -> Any:
    """Uuids inside lists/tuples are not seen by ``default``: convert those up front."""
    if isinstance(value, uuid.UUID):
        return _uuid_text(value)
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], uuid.UUID):
        return [_uuid_text(v) if isinstance(v, uuid.UUID) else v for v in value]
    return value


class EventLog:
    def __init__(self, path: str, node_id: int, role: str, *, echo: bool = False) -> None:
        self.path = path
        self.node_id = node_id
        self.role = role
        self.echo = echo
        self.count = 0
        self._lock = threading.Lock()
        self._file = None
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", buffering=1)

    def emit(self, event: str, **fields: Any) -> dict[str, Any] | None:
        if self._file is None and not self.echo:
            self.count += 1
            return None
        line: dict[str, Any] = {"ts_ns": time.time_ns(), "node_id": self.node_id,
                                "role": self.role, "event": event}
        for key, value in fields.items():
            line[key] = _jsonable(value)
        text = json.dumps(line, separators=(",", ":"), default=_default)
        with self._lock:
            self.count += 1
            if self._file is not None:
                self._file.write(text + "\n")
                self._file.flush()
        if self.echo:
            print(text, file=sys.stderr, flush=True)
        return line

    def write_lines(self, lines: list[str]) -> None:
        """Lines already formatted as :meth:`emit` would (JSON objects, no newline), written
        and flushed at once: many events of one kind without per-line overhead."""
        if not lines:
            return
        with self._lock:
            self.count += len(lines)
            if self._file is not None:
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()
        if self.echo:
            print("\n".join(lines), file=sys.stderr, flush=True)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_events(path: str) -> list[dict[str, Any]]:
    """All complete lines of an event file (a torn last line is ignored)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out
