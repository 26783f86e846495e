"""Checker results, composition and the safe runner (Jepsen's ``check-safe`` / ``compose``).

A checker is a pure function ``(scenario, history) -> CheckResult``. ``valid`` is ``True``,
``False`` or ``"unknown"`` (the history cannot tell, e.g. it ends too early or lacks the
events needed); ``details`` is a JSON-able mapping that explains the verdict. Several results
compose with the priority false > unknown > true.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, Union

__all__ = ["UNKNOWN", "Valid", "CheckResult", "merge_valid", "check_safe", "valid_text"]

UNKNOWN: Literal["unknown"] = "unknown"
Valid = Union[bool, Literal["unknown"]]


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    valid: Valid
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"checker": self.name, "valid": valid_text(self.valid), "summary": self.summary,
                "details": json.loads(json.dumps(self.details, default=str))}


def valid_text(valid: Valid) -> str:
    return "unknown" if valid == UNKNOWN else ("true" if valid is True else "false")


def merge_valid(values: Iterable[Valid]) -> Valid:
    """false > unknown > true; an empty input is true (nothing was judged false)."""
    out: Valid = True
    for v in values:
        if v is False:
            return False
        if v == UNKNOWN:
            out = UNKNOWN
    return out


def check_safe(name: str, fn: Callable[..., CheckResult], *args: Any) -> CheckResult:
    """Run a checker; a crash becomes ``unknown`` with the error in the details."""
    try:
        result = fn(*args)
    except Exception as exc:  # a checker bug must not hide the other verdicts
        return CheckResult(name, UNKNOWN, f"checker crashed: {type(exc).__name__}: {exc}",
                           {"error": f"{type(exc).__name__}: {exc}"})
    if result.valid not in (True, False, UNKNOWN):
        return CheckResult(name, UNKNOWN, f"checker returned an invalid verdict {result.valid!r}")
    return result
