"""Scenario text and command-line overrides (pure): :func:`parse_scenario_text` reads JSON (also a
run.json) or TOML text, :func:`apply_override` applies one ``PATH=VALUE`` to plain scenario data.
Reading a file is :func:`harness.catalog.resolve.load_scenario`."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from harness.scenario.fields import ScenarioError, join
from harness.scenario.model import Scenario

__all__ = ["parse_scenario_text", "apply_override"]


def parse_scenario_text(text: str, fmt: str) -> Scenario:
    """Parse JSON (``fmt="json"``) or TOML (``"toml"``) text; syntax errors name the line."""
    try:
        data = json.loads(text) if fmt == "json" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError([(f"<json line {exc.lineno}>", exc.msg)]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([("<toml>", str(exc))]) from None
    if fmt == "json" and isinstance(data, dict) and "run_id" in data:  # a run.json: re-run the same value
        data = data.get("scenario_value", data.get("scenario"))
    return Scenario.from_dict(data)


def _split_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in path.split("."):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)", chunk)
        if m is None:
            raise ScenarioError([(path, "not a field path (like workload.topics[0].partitions)")])
        parts.append(m.group(1))
        parts.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return parts


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply ``path=value`` to plain scenario data in place. The value is read as JSON when it
    parses (``3``, ``true``, ``[1,2]``, ``{"kind": "disk", ...}``), else as a string."""
    path, sep, text = assignment.partition("=")
    if not sep:
        raise ScenarioError([("--set", f"{assignment!r} is not PATH=VALUE")])
    parts = _split_path(path.strip())
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        value = text
    node: Any = data
    walked = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = join(walked, part)
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ScenarioError([(walked, "is not a list")])
            if part > len(node) or (part == len(node) and not last):
                raise ScenarioError([(here, f"index out of range (the list has {len(node)} items)")])
            if last:
                node[part:part + 1] = [value]
            else:
                node = node[part]
        else:
            if not isinstance(node, dict):
                raise ScenarioError([(walked, "is not a table")])
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if isinstance(parts[i + 1], int) else {})
        walked = here
