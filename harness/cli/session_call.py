"""One call of a chaos-session command to the session server, and how its failure is said:
``jbodlab <command>: <why>`` on stderr, exit 2 when the request never reached the session (a
bad argument, no session, no answer: :class:`~harness.run.session.SessionError`) and exit 1
when the session answered that it did not do it (``ok`` false, its ``error``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from harness.run.session import SessionError

__all__ = ["call_session", "failed"]


def failed(command: str, why: object, code: int) -> int:
    """Say ``jbodlab <command>: <why>`` on stderr; ``code``."""
    print(f"jbodlab {command}: {why}", file=sys.stderr)
    return code


def call_session(command: str, send: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any] | None, int]:
    """``send()``'s answer and 0 when the session did it; ``None`` and the exit code (2: not
    sent, 1: refused) when not, said on stderr."""
    try:
        answer = send()
    except SessionError as exc:
        return None, failed(command, exc, 2)
    if not answer.get("ok"):
        return None, failed(command, answer.get("error"), 1)
    return answer, 0
