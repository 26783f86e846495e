"""The newest appended batches of a partition log kept in memory, so the broker's event loop
can serve a fetch at the log end without the log's lock or any I/O (``read_tail``).

The cache is one tuple (batch bases, batch ends, byte positions, bytes), replaced as a whole;
readers take a snapshot. Mixed into :class:`broker_impl.storage.partition_log.PartitionLog`,
which owns ``_tail`` and clears it whenever the log's end moves other than by an append.
"""

from __future__ import annotations

import bisect

from kafka_common import batch_header as bh


class TailCache:
    def _remember_tail(self, data: bytes | bytearray | memoryview, headers: list[tuple[int, bh.BatchHeader]]) -> None:
        cap = self.config.tail_cache_bytes
        old = self._tail
        if len(data) > cap:
            self._tail = None
            return
        bases = tuple(h.base_offset for _, h in headers)
        ends = tuple(h.next_offset for _, h in headers)
        if old is not None and old[1][-1] == bases[0] and len(old[3]) + len(data) <= cap:
            shift = len(old[3])
            self._tail = (old[0] + bases, old[1] + ends, old[2] + tuple(shift + p for p, _ in headers),
                          old[3] + bytes(data))
        else:
            self._tail = (bases, ends, tuple(p for p, _ in headers), bytes(data))

    def read_tail(self, offset: int, max_bytes: int, upper_offset: int | None = None,
                  min_one: bool = True) -> bytes | None:
        """``read`` served from the newest appended batches kept in memory, without a lock or
        I/O (for the event loop): the same bytes ``read`` would return, or ``None`` when
        ``offset`` is not among them (read from the disk then)."""
        t = self._tail
        if t is None or self.closed or t[1][-1] != self.log_end_offset:
            return None
        bases, ends, positions, data = t
        i = bisect.bisect_right(bases, offset) - 1
        if i < 0 or offset >= ends[i]:
            return None
        start = end = positions[i]
        for j in range(i, len(bases)):
            if upper_offset is not None and bases[j] >= upper_offset:
                break
            stop = positions[j + 1] if j + 1 < len(bases) else len(data)
            if stop - start > max_bytes and not (min_one and j == i):
                break
            end = stop
        return data[start:end]
