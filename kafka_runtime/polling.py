"""Waiting for a condition by asking again: the one poll loop of the lab's blocking waits and
of the tests' (``testkit.cluster.wait_until``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll_until"]

T = TypeVar("T")


def poll_until(pred: Callable[[], T], timeout_s: float, *, interval_s: float = 0.05) -> T | None:
    """``pred()``'s first truthy value, asked every ``interval_s`` seconds until ``timeout_s``
    have passed (it is asked once more after the deadline's last sleep); ``None`` when no
    answer was truthy. The caller says what timing out means (its own error, its own words)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval_s)
