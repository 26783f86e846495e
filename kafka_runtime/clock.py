"""The real clock behind :class:`kafka_common.clock.Clock` (the pure code takes any Clock;
tests pass a ``ManualClock``)."""

from __future__ import annotations

import time


class SystemClock:
    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ns(self) -> int:
        return time.time_ns()
