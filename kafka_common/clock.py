"""Time is injected: logic takes ``now_ms`` or a :class:`Clock`, never reads the system clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol


def ms_to_timedelta(ms: int) -> timedelta:
    """A Kafka duration field (kio reads and writes them as ``timedelta``) from milliseconds."""
    return timedelta(milliseconds=ms)


def timedelta_to_ms(value: timedelta | int | None, default: int = 0) -> int:
    """Milliseconds of a Kafka duration field (kio's ``timedelta``, which reads ``-1`` as a
    negative one; a plain int passes; None is ``default``)."""
    if value is None:
        return default
    if isinstance(value, timedelta):
        return int(round(value.total_seconds() * 1000))
    return int(value)


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds on a monotonic clock (timers, timeouts)."""
        ...

    def wall_ns(self) -> int:
        """Nanoseconds since the epoch, CLOCK_REALTIME (event timestamps)."""
        ...


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start_ms: int = 0, wall_start_ns: int = 1_700_000_000_000_000_000) -> None:
        self._ms = start_ms
        self._wall_offset_ns = wall_start_ns - start_ms * 1_000_000

    def monotonic_ms(self) -> int:
        return self._ms

    def wall_ns(self) -> int:
        return self._wall_offset_ns + self._ms * 1_000_000

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("time does not go backwards")
        self._ms += ms
