"""The event loop a broker or controller process runs on.

uvloop (libuv, C) by default: the broker's hot path is a request per partition batch,
several socket sends and a thread → loop hand-over per append, and the loop's own share of
that is measurably smaller on uvloop (``bench/replication_bench.py --part scale``: ~17 % less
broker CPU per MB in the saturated 100-partition window, docs/status.md).
``JBODLAB_EVENT_LOOP=asyncio`` selects the standard library's loop (A/B runs, debugging);
without uvloop installed the standard loop is used too.
"""

from __future__ import annotations

import asyncio
import os
import sys

ENV = "JBODLAB_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def loop_kind() -> str:
    """What ``new_event_loop`` will build: ``uvloop`` or ``asyncio``."""
    wanted = os.environ.get(ENV, "uvloop").strip().lower() or "uvloop"
    if wanted not in CHOICES:
        raise ValueError(f"{ENV}={wanted!r}: expected one of {', '.join(CHOICES)}")
    if wanted == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "asyncio"
    return wanted


def loop_kind_or_exit(prog: str) -> str:
    """``loop_kind()``, or a one-line error naming the variable and exit status 2 (a bad
    setting, like a bad config value)."""
    try:
        return loop_kind()
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def new_event_loop() -> asyncio.AbstractEventLoop:
    if loop_kind() == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def running_loop_kind() -> str:
    """``uvloop`` or ``asyncio``: the loop this coroutine runs on (for start-up events)."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
