"""The shape of a Raft log: which leader epoch wrote which offsets, where it starts and ends.

Raft reasons about offsets and epochs only, never bytes, so the pure state keeps this
small index (one entry per epoch change) and the runtime keeps it in step with the log
on disk (``append`` after each batch written, ``truncate_to``, ``reset_to_snapshot``).

    start_offset ≤ offsets held < end_offset
    epochs = [(epoch, first offset), ...] strictly increasing in both
    snapshot = (end offset, epoch) of the newest snapshot, or None; start_offset == its end
    offset when the log before it was dropped
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller_impl.errors import ControllerError


class LogShapeError(ControllerError):
    """An append or truncation that would break the log's invariants (a bug in the caller)."""


@dataclass
class LogShape:
    start_offset: int = 0
    end_offset: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)
    snapshot: tuple[int, int] | None = None  # (end offset, epoch)

    @property
    def last_epoch(self) -> int:
        if self.epochs:
            return self.epochs[-1][0]
        return self.snapshot[1] if self.snapshot else 0

    def append(self, base_offset: int, last_offset: int, epoch: int) -> None:
        """One batch of ``epoch`` at [base_offset, last_offset] was written at the end."""
        if base_offset != self.end_offset or last_offset < base_offset:
            raise LogShapeError(f"append [{base_offset}, {last_offset}] at end offset {self.end_offset}")
        if epoch < self.last_epoch:
            raise LogShapeError(f"append of epoch {epoch} after epoch {self.last_epoch}")
        if not self.epochs or self.epochs[-1][0] != epoch:
            self.epochs.append((epoch, base_offset))
        self.end_offset = last_offset + 1

    def truncate_to(self, offset: int) -> None:
        """Drop offsets ≥ ``offset``."""
        if offset < self.start_offset:
            raise LogShapeError(f"truncate to {offset} below the log start {self.start_offset}")
        if offset >= self.end_offset:
            return
        while self.epochs and self.epochs[-1][1] >= offset:
            self.epochs.pop()
        self.end_offset = offset

    def reset_to_snapshot(self, end_offset: int, epoch: int) -> None:
        """The log now starts (and ends) at a snapshot ending at ``end_offset``."""
        self.start_offset = self.end_offset = end_offset
        self.epochs = []
        self.snapshot = (end_offset, epoch)

    def snapshot_taken(self, end_offset: int, epoch: int) -> None:
        if self.snapshot is None or end_offset > self.snapshot[0]:
            self.snapshot = (end_offset, epoch)

    def drop_before(self, offset: int) -> None:
        """The log before ``offset`` was deleted (it is covered by a snapshot)."""
        if offset <= self.start_offset:
            return
        if self.snapshot is None or offset > self.snapshot[0]:
            raise LogShapeError(f"drop before {offset}: no snapshot covers it")
        self.start_offset = offset
        # keep the entry of the epoch that holds the new start
        while len(self.epochs) > 1 and self.epochs[1][1] <= offset:
            self.epochs.pop(0)

    def epoch_of(self, offset: int) -> int | None:
        """The epoch of the record at ``offset`` (None if not held)."""
        if offset < self.start_offset or offset >= self.end_offset:
            return None
        found = None
        for epoch, start in self.epochs:
            if start <= offset:
                found = epoch
            else:
                break
        return found

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's ``endOffsetForEpoch``: the largest epoch ≤ ``epoch`` this log knows and the
        offset where it ends (the start of the next epoch, or the log end). (-1, -1) when
        no such epoch is known."""
        best: tuple[int, int] = (-1, -1)
        if self.snapshot is not None and self.snapshot[1] <= epoch:
            best = (self.snapshot[1], self.snapshot[0])
        for i, (e, _) in enumerate(self.epochs):
            if e > epoch:
                break
            end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.end_offset
            best = (e, end)
        return best

    def up_to_date_key(self) -> tuple[int, int]:
        """What Vote compares: (last epoch, end offset)."""
        return (self.last_epoch, self.end_offset)
