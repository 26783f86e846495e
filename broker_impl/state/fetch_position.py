"""Where a follower's fetch position stands against the leader's log (KIP-320 / KIP-595).

One rule, used by the Fetch handler (what to answer) and by the leader's ISR bookkeeping
(whether the fetch counts as progress): Kafka updates a follower's fetch state only for a
valid fetch, so a divergent replica can neither join the ISR nor move the high watermark
over records it does not have.

``follower_position(log, fetch_offset, last_fetched_epoch)`` with ``log`` anything that has
``log_start_offset``, ``log_end_offset`` and ``end_offset_for_epoch(epoch) -> (epoch, end)``
(lock-free on a ``PartitionLog``):

- ``last_fetched_epoch`` ≥ 0 and the leader knows no epoch at or before it
  → ``OUT_OF_RANGE`` (start over);
- the leader's log ends that epoch before ``fetch_offset``, or its nearest epoch is older
  → ``DIVERGING`` with ``(epoch, end offset)`` the follower must truncate to;
- ``fetch_offset`` outside [log start, log end] → ``OUT_OF_RANGE``;
- otherwise ``VALID``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Position(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    OUT_OF_RANGE = "out_of_range"


@dataclass(frozen=True, slots=True)
class FetchPosition:
    position: Position
    diverging: tuple[int, int] | None = None   # (epoch, end offset) for DIVERGING

    @property
    def valid(self) -> bool:
        return self.position is Position.VALID


VALID = FetchPosition(Position.VALID)
OUT_OF_RANGE = FetchPosition(Position.OUT_OF_RANGE)


def follower_position(log: Any, fetch_offset: int, last_fetched_epoch: int) -> FetchPosition:
    if last_fetched_epoch >= 0:
        epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            return OUT_OF_RANGE
        if end < fetch_offset or epoch < last_fetched_epoch:
            return FetchPosition(Position.DIVERGING, (epoch, end))
    if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
        return OUT_OF_RANGE
    return VALID
