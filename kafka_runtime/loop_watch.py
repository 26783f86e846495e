"""A watch on a node's event loop: when the loop does not run its callbacks for longer than
a threshold, one log line says how long and where the loop's thread was meanwhile.

A stalled loop shows up elsewhere as something else: connects that "time out" although the
peer is up (on a late loop the timer fires before the connect's completion is read), missed
heartbeats, fenced brokers. This line says which it was. A beat callback on the loop records
when it last ran; a watcher thread notices a beat that is late by more than the threshold and
takes the loop thread's stack then (once per stall); the beat that finally runs logs the
stall with that stack.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

DEFAULT_THRESHOLD_S = 0.25
PERIOD_S = 0.05

log = logging.getLogger(__name__)


class LoopWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, *, threshold_s: float = DEFAULT_THRESHOLD_S,
                 period_s: float = PERIOD_S, logger: logging.Logger | None = None) -> None:
        self.loop = loop
        self.threshold_s = threshold_s
        self.period_s = period_s
        self.log = logger or log
        self.stalls = 0
        self.longest_s = 0.0
        self._last = time.monotonic()
        self._stack: str | None = None     # taken by the watcher during the current stall
        self._loop_thread: int | None = None
        self._stop = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "LoopWatch":
        """Call from the loop's thread (the loop may be running or about to)."""
        self._loop_thread = threading.get_ident()
        self._last = time.monotonic()
        self._handle = self.loop.call_later(self.period_s, self._beat)
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    # -- on the loop ----------------------------------------------------------------------
    def _beat(self) -> None:
        now = time.monotonic()
        late = now - self._last - self.period_s
        if late > self.threshold_s:
            self.stalls += 1
            self.longest_s = max(self.longest_s, late)
            where = self._stack or ("(no stack taken: the whole process was stopped — a pause, SIGSTOP, a "
                                    "frozen cgroup — or the loop's thread held the interpreter)\n")
            self.log.warning("event loop stalled for %d ms; the loop's thread was at:\n%s",
                             late * 1000, where.rstrip())
        self._last = now      # first, so the watcher does not take a stack for this stall again
        self._stack = None
        if not self._stop.is_set():
            self._handle = self.loop.call_later(self.period_s, self._beat)

    # -- on the watcher thread ------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(self.period_s):
            late = time.monotonic() - self._last - self.period_s
            if late > self.threshold_s and self._stack is None:
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    self._stack = "".join(traceback.format_stack(frame, limit=12))
