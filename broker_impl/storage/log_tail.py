"""The newest appended batches of a partition log kept in memory, so the broker's event loop
can serve a fetch at the log end without the log's lock or any I/O (``read_tail``).

The cache is one tuple (batch bases, batch ends, byte positions, bytes, n, used): lists and a
bytearray that an append grows in place past the ``n`` entries and ``used`` bytes of the tuple
it then publishes, so a reader's snapshot (the tuple it took) never changes under it and an
append copies only its own batches (it copied the whole tail, up to 64 KiB, each time); a
cache that would pass ``tail_cache_bytes`` starts new lists. Mixed into
:class:`broker_impl.storage.partition_log.PartitionLog`, which owns ``_tail`` and clears it
whenever the log's end moves other than by an append.
"""

from __future__ import annotations

import bisect

from kafka_common import batch_header as bh


class TailCache:
    def _remember_tail(self, data: bytes | bytearray | memoryview, headers: list[tuple[int, bh.BatchHeader]]) -> None:
        cap = self.config.tail_cache_bytes
        size = len(data)
        if size > cap or not headers:
            self._tail = None
            return
        old = self._tail
        if old is not None:
            bases, ends, positions, buf, n, used = old
            # grow in place only where no snapshot can see it: past n entries and used bytes
            if (n and ends[n - 1] == headers[0][1].base_offset and used + size <= cap
                    and len(bases) == n and len(buf) == used):
                for p, h in headers:
                    bases.append(h.base_offset)
                    ends.append(h.next_offset)
                    positions.append(used + p)
                buf += data
                self._tail = (bases, ends, positions, buf, n + len(headers), used + size)
                return
        self._tail = ([h.base_offset for _, h in headers], [h.next_offset for _, h in headers],
                      [p for p, _ in headers], bytearray(data), len(headers), size)

    def read_tail(self, offset: int, max_bytes: int, upper_offset: int | None = None,
                  min_one: bool = True) -> bytes | None:
        """``read`` served from the newest appended batches kept in memory, without a lock or
        I/O (for the event loop): the same bytes ``read`` would return, or ``None`` when
        ``offset`` is not among them (read from the disk then)."""
        t = self._tail
        if t is None or self.closed:
            return None
        bases, ends, positions, buf, n, used = t
        if not n or ends[n - 1] != self.log_end_offset:
            return None
        i = bisect.bisect_right(bases, offset, 0, n) - 1
        if i < 0 or offset >= ends[i]:
            return None
        start = end = positions[i]
        for j in range(i, n):
            if upper_offset is not None and bases[j] >= upper_offset:
                break
            stop = positions[j + 1] if j + 1 < n else used
            if stop - start > max_bytes and not (min_one and j == i):
                break
            end = stop
        return bytes(buf[start:end])
