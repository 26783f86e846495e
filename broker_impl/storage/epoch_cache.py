"""Leader-epoch cache of one partition: epoch → start offset, persisted in
``leader-epoch-checkpoint`` (Kafka's ``LeaderEpochFileCache``).

Entries are strictly increasing in both epoch and start offset. The cache answers
OffsetForLeaderEpoch (:meth:`end_offset_for`) so a follower that became out of sync on a
leader change truncates to the right offset, and it is truncated together with the log.

The file I/O is passed in as ``persist(entries)`` so that the partition log can route its
OSErrors through the failure channel. Truncations persist at once; an assignment calls
``assigned()`` (default: persist at once), which the partition log turns into "write it with
the next flush" (KAFKA-15046: no fsync of this file in front of the appends).
"""

from __future__ import annotations

from typing import Callable

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, entries: list[tuple[int, int]], persist: Callable[[list[tuple[int, int]]], None],
                 assigned: Callable[[], None] | None = None) -> None:
        # copy-on-write: every change installs a new tuple, so a reader on another thread
        # can use ``snapshot`` as it is (no lock, no copy)
        self._entries: tuple[tuple[int, int], ...] = ()
        for epoch, start in entries:
            self._add(epoch, start)
        self._persist = persist
        # an assignment only adds an entry for offsets at or after the log's end: given
        # ``assigned``, the owner writes it with its next flush instead (see PartitionLog)
        self._assigned = assigned if assigned is not None else (lambda: self._persist(self.entries))

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def snapshot(self) -> tuple[tuple[int, int], ...]:
        """The entries as they are now, immutable (for :func:`end_offset_for`)."""
        return self._entries

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def _add(self, epoch: int, start: int) -> bool:
        """Kafka's rule: an update is needed unless ``epoch`` is the latest epoch and does not
        move its start back; it removes every entry with epoch ≥ it or start offset ≥ its start."""
        if epoch < 0 or start < 0:
            return False
        if self._entries and self._entries[-1][0] == epoch and start >= self._entries[-1][1]:
            return False  # already known: the first start offset of an epoch stays
        self._entries = tuple((e, s) for e, s in self._entries if e < epoch and s < start) + ((epoch, start),)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (persisted if it changed anything)."""
        if self._add(epoch, start_offset):
            self._assigned()

    def assign_many(self, pairs: list[tuple[int, int]]) -> None:
        changed = False
        for epoch, start in pairs:
            changed |= self._add(epoch, start)
        if changed:
            self._assigned()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset`` (exclusive): drop epochs starting at or after it."""
        kept = tuple((e, s) for e, s in self._entries if s < end_offset)
        if kept != self._entries:
            self._entries = kept
            self._persist(self.entries)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: keep the epoch covering it, moved to it."""
        kept = tuple((e, s) for e, s in self._entries if s >= start_offset)
        before = [(e, s) for e, s in self._entries if s < start_offset]
        if before and (not kept or kept[0][1] > start_offset):
            kept = ((before[-1][0], start_offset),) + kept
        if kept != self._entries:
            self._entries = kept
            self._persist(self.entries)

    def clear(self) -> None:
        if self._entries:
            self._entries = ()
            self._persist([])

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        return end_offset_for(self._entries, epoch, log_end_offset)


def end_offset_for(entries: tuple[tuple[int, int], ...], epoch: int, log_end_offset: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch: (largest known epoch ≤ ``epoch``, its end offset).

    The end offset is the start offset of the next larger epoch, or ``log_end_offset``
    when ``epoch`` is the latest. Unknown (older than everything): (-1, -1)."""
    if not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if epoch == entries[-1][0]:
        return epoch, log_end_offset
    found = None
    for i, (e, _s) in enumerate(entries):
        if e > epoch:
            if found is None:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            return entries[found][0], entries[i][1]
        found = i
    return entries[-1][0], log_end_offset
