"""From what a user typed to scenario values: a catalog name (``leader-dir-fails``,
``leader-dir-fails-bounce``, ``S1``) or a ``.json``/``.toml`` file, then ``--set PATH=VALUE``
overrides and a seed. The one place that does this; ``jbodlab run`` and ``jbodlab scenario``
both call it. Every problem raises :class:`~harness.scenario.fields.ScenarioError` naming the argument
or field path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from harness.scenario.fields import ScenarioError
from harness.scenario.model import Scenario
from harness.scenario.text import apply_override, parse_scenario_text
from harness.catalog.catalog import by_name

__all__ = ["resolve", "resolve_runs", "load_scenario"]


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file: ``.json`` (also a run.json) or ``.toml``."""
    p = Path(path)
    fmt = {".json": "json", ".toml": "toml"}.get(p.suffix.lower())
    if fmt is None:
        raise ScenarioError([("<file>", f"{p}: unknown format {p.suffix!r} (use .json or .toml)")])
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError([("<file>", f"{p}: {exc.strerror or exc}")]) from None
    return parse_scenario_text(text, fmt)


def _base(ref: str, *, bounce: bool) -> Scenario:
    if Path(ref).suffix.lower() in (".json", ".toml"):
        return load_scenario(ref)
    try:
        return by_name(ref, bounce=bounce)
    except KeyError as exc:
        raise ScenarioError([("SCENARIO", str(exc.args[0]))]) from None


def resolve_runs(ref: str, *, overrides: Iterable[str] = (), seed: int | None = None,
                 bounce: bool = False, runs: int = 1) -> list[Scenario]:
    """``runs`` validated values of one scenario reference, seeds ``seed, seed+1, …`` (the
    scenario's own seed when ``seed`` is None)."""
    if runs < 1:
        raise ScenarioError([("--runs", f"{runs} must be at least 1")])
    if seed is not None and seed < 0:
        raise ScenarioError([("--seed", f"{seed} must be >= 0")])
    data = _base(ref, bounce=bounce).to_dict()
    for assignment in overrides:
        apply_override(data, assignment)
    first = data["seed"] if seed is None else seed
    out = []
    for i in range(runs):
        data["seed"] = first + i
        out.append(Scenario.from_dict(data))
    return out


def resolve(ref: str, *, overrides: Iterable[str] = (), seed: int | None = None,
            bounce: bool = False) -> Scenario:
    """One validated scenario value."""
    return resolve_runs(ref, overrides=overrides, seed=seed, bounce=bounce)[0]
