"""Validation of plain data (JSON / TOML / CLI) into frozen values, with field paths.

Every problem is collected with the path of the field it concerns (``faults[1].mode``), so a
scenario file with three mistakes gets three lines, not one at a time::

    ScenarioError (ValueError)      .problems: list[(path, message)]

Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from harness.errors import HarnessError

__all__ = ["ScenarioError", "Problems", "Fields", "REQUIRED", "join"]


class ScenarioError(HarnessError, ValueError):
    """A scenario value that cannot be used; one line per problem, each naming its field."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"{path}: {msg}" for path, msg in self.problems))


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def join(path: str, name: str | int) -> str:
    """``join("faults", 1) == "faults[1]"``, ``join("faults[1]", "mode") == "faults[1].mode"``."""
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


class Problems:
    """Collects (path, message) pairs; :meth:`raise_if_any` turns them into one error."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path or "<scenario>", message))

    def raise_if_any(self) -> None:
        if self.items:
            raise ScenarioError(self.items)


def _typename(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table", type(None): "null"}.get(type(value), type(value).__name__)


def one_of(value: Any, choices: Sequence[str]) -> str:
    """The message for a value outside ``choices`` (with a close match when there is one)."""
    msg = f"{value!r} is not one of {', '.join(choices)}"
    if isinstance(value, str):
        close = difflib.get_close_matches(value, list(choices), n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
    return msg


class Fields:
    """Reads the fields of one mapping found at ``path``; every problem goes to ``problems``.

    Getters return the default (or ``None``) when the field is bad, so a caller can keep
    reading and report every problem; call :meth:`finish` to flag unknown fields, then
    ``problems.raise_if_any()`` before using the value.
    """

    def __init__(self, data: Any, path: str, problems: Problems) -> None:
        self.path = path
        self.problems = problems
        if not isinstance(data, Mapping):
            problems.add(path, f"must be a table of fields, got {_typename(data)}")
            data = {}
        self.data: Mapping[str, Any] = data
        self.seen: set[str] = set()

    def here(self, name: str | int) -> str:
        return join(self.path, name)

    def raw(self, name: str, default: Any = REQUIRED) -> Any:
        self.seen.add(name)
        if name in self.data:
            return self.data[name]
        if default is REQUIRED:
            self.problems.add(self.here(name), "missing (required)")
            return None
        return default

    def _value(self, name: str, default: Any) -> tuple[bool, Any]:
        """(usable, value): a missing field gives its default; an explicit null is allowed
        only for optional fields (default ``None``)."""
        if name in self.data and self.data[name] is None and default is not None:
            self.seen.add(name)
            self.problems.add(self.here(name), "must not be null")
            return False, None if default is REQUIRED else default
        value = self.raw(name, default)
        return value is not None, value

    def _bad(self, name: str, want: str, value: Any, default: Any) -> Any:
        self.problems.add(self.here(name), f"must be {want}, got {_typename(value)} {value!r}")
        return None if default is REQUIRED else default

    def int(self, name: str, default: Any = REQUIRED, *, lo: int | None = None,
            hi: int | None = None) -> Any:
        ok, value = self._value(name, default)
        if not ok:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            return self._bad(name, "an integer", value, default)
        if lo is not None and value < lo:
            self.problems.add(self.here(name), f"{value} is below the minimum {lo}")
        if hi is not None and value > hi:
            self.problems.add(self.here(name), f"{value} is above the maximum {hi}")
        return value

    def float(self, name: str, default: Any = REQUIRED, *, lo: float | None = None,
              hi: float | None = None) -> Any:
        ok, value = self._value(name, default)
        if not ok:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self._bad(name, "a number", value, default)
        if lo is not None and value < lo:
            self.problems.add(self.here(name), f"{value} is below the minimum {lo}")
        if hi is not None and value > hi:
            self.problems.add(self.here(name), f"{value} is above the maximum {hi}")
        return float(value)

    def bool(self, name: str, default: Any = REQUIRED) -> Any:
        ok, value = self._value(name, default)
        if not ok:
            return value
        if not isinstance(value, bool):
            return self._bad(name, "true or false", value, default)
        return value

    def str(self, name: str, default: Any = REQUIRED, *, choices: Sequence[str] | None = None) -> Any:
        ok, value = self._value(name, default)
        if not ok:
            return value
        if not isinstance(value, str):
            return self._bad(name, "a string", value, default)
        if choices is not None and value not in choices:
            self.problems.add(self.here(name), one_of(value, choices))
        return value

    def list(self, name: str, default: Any = REQUIRED) -> list[tuple[str, Any]]:
        """``[(path_of_item, item), ...]`` of a list field (empty when bad or absent)."""
        value = self.raw(name, default)
        if value is None:
            return []
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            self.problems.add(self.here(name), f"must be a list, got {_typename(value)}")
            return []
        return [(join(self.here(name), i), item) for i, item in enumerate(value)]

    def table(self, name: str, default: Any = REQUIRED) -> Any:
        value = self.raw(name, default)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.problems.add(self.here(name), f"must be a table, got {_typename(value)}")
            return None if default is REQUIRED else default
        return value

    def finish(self) -> None:
        for key in self.data:
            if key not in self.seen:
                known = sorted(self.seen)
                msg = f"unknown field (known: {', '.join(known)})"
                close = difflib.get_close_matches(str(key), known, n=1)
                if close:
                    msg += f"; did you mean {close[0]!r}?"
                self.problems.add(self.here(str(key)), msg)
