"""The newest appended batches of a partition log kept in memory, so the broker's event loop
can serve a fetch at the log end without the log's lock or any I/O (``read_tail``).

What is kept: every batch above the high watermark as of the last append (what the ISR's
followers have still to fetch: a leader behind several producers' 1 MB appends answers its
followers from memory, not from a job queued on the dir's worker behind those appends),
and at least the newest ``tail_cache_bytes`` (64 KiB: a consumer at the tail), never more
than ``tail_cache_max_bytes`` (16 MiB; a batch bigger than that is not kept). Measured (docs/status.md): with
1 MB batches and only 64 KiB kept, every follower read was a dir job, and each job's hop
(worker wake-up, then the loop's) cost 30-170 ms on a machine whose cores the clients kept
busy — a follower round moved one batch per two such hops.

The cache is one tuple (batch bases, batch ends, cumulative byte counts, chunks, positions,
n): per batch its offsets, the bytes before it (``cum``, one entry more than batches), the
append's data it lies in (one immutable ``bytes`` per append, shared by its batches: an
append copies its data at most once, a read of whole appends copies nothing) and its position
there. An append grows the lists in place past the ``n`` entries of the tuple it then
publishes, so a reader's snapshot never changes under it; trimming the front (batches below
the HW, or past the cap) publishes new lists, only once it drops half the entries or the cap
is passed (then down to half the cap), so that costs O(1) per batch. A part of
:class:`broker_impl.storage.partition_log.PartitionLog` (its ``tail``), which tells it each
append (:meth:`TailCache.remember`, under the log's lock) and clears it whenever the log's
end moves other than by an append (:meth:`TailCache.clear`).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Protocol

from kafka_common import batch_header as bh

if TYPE_CHECKING:
    from broker_impl.storage.log_config import LogConfig

Batches = tuple[list[int], list[int], list[int], list[bytes], list[int], int]


class TailHost(Protocol):
    """The log as its tail cache sees it: its current config (replaced whole by a topic
    config change), whether it was closed, and its end (lock-free reads)."""
    config: LogConfig
    closed: bool

    @property
    def log_end_offset(self) -> int: ...


class TailCache:
    """Owns ``batches``: the published tuple (None: nothing kept), replaced as a whole."""

    __slots__ = ("host", "batches")

    def __init__(self, host: TailHost) -> None:
        self.host = host
        self.batches: Batches | None = None

    def clear(self) -> None:
        self.batches = None

    def remember(self, data: bytes | bytearray | memoryview, headers: list[tuple[int, bh.BatchHeader]],
                 hw: int) -> None:
        """An append of ``data`` (its batches' ``headers``), with the log's high watermark
        ``hw``: kept, the front trimmed (below ``hw``, past the cap)."""
        cfg = self.host.config
        cap = max(cfg.tail_cache_max_bytes, cfg.tail_cache_bytes)
        size = len(data)
        if size > cap or not headers:
            self.batches = None
            return
        chunk = data if type(data) is bytes else bytes(data)
        old = self.batches
        if old is not None:
            bases, ends, cum, chunks, starts, n = old
            # grow in place only where no snapshot can see it: past n entries
            if not (n and ends[n - 1] == headers[0][1].base_offset and len(bases) == n):
                old = None
        if old is None:
            bases, ends, cum, chunks, starts, n = [], [], [0], [], [], 0
        total = cum[n]
        for p, h in headers:
            bases.append(h.base_offset)
            ends.append(h.next_offset)
            chunks.append(chunk)
            starts.append(p)
            total += h.size_bytes
            cum.append(total)
        n += len(headers)
        drop = _drop(ends, cum, n, hw, cfg.tail_cache_bytes, cap)
        if drop:
            bases, ends, cum, chunks, starts = (bases[drop:n], ends[drop:n], cum[drop:n + 1], chunks[drop:n],
                                                starts[drop:n])
            n -= drop
        self.batches = (bases, ends, cum, chunks, starts, n)

    def read(self, offset: int, max_bytes: int, upper_offset: int | None = None,
             min_one: bool = True) -> bytes | None:
        """``read`` served from the newest appended batches kept in memory, without a lock or
        I/O (for the event loop): the same bytes ``read`` would return, or ``None`` when
        ``offset`` is not among them (read from the disk then). The log's ``read_tail``."""
        t = self.batches
        host = self.host
        if t is None or host.closed:
            return None
        bases, ends, cum, chunks, starts, n = t
        if not n or ends[n - 1] != host.log_end_offset:
            return None
        i = bisect.bisect_right(bases, offset, 0, n) - 1
        if i < 0 or offset >= ends[i]:
            return None
        end = i
        for j in range(i, n):
            if upper_offset is not None and bases[j] >= upper_offset:
                break
            if cum[j + 1] - cum[i] > max_bytes and not (min_one and j == i):
                break
            end = j + 1
        if end == i:
            return b""
        parts = []
        j = i
        while j < end:
            chunk, k = chunks[j], j
            while k + 1 < end and chunks[k + 1] is chunk:
                k += 1
            s, e = starts[j], starts[k] + cum[k + 1] - cum[k]
            parts.append(chunk if s == 0 and e == len(chunk) else memoryview(chunk)[s:e])
            j = k + 1
        if len(parts) == 1:
            return parts[0] if type(parts[0]) is bytes else bytes(parts[0])
        return b"".join(parts)


def _drop(ends: list[int], cum: list[int], n: int, hw: int, floor: int, cap: int) -> int:
    """How many batches to drop from the front (0: keep the lists as they are): those
    every ISR follower has (below the HW) beyond the newest ``floor`` bytes, once they are
    half the entries; past the cap, down to half the cap."""
    total = cum[n]
    committed = bisect.bisect_right(ends, hw, 0, n)
    beyond_floor = max(0, bisect.bisect_right(cum, total - floor, 0, n + 1) - 1)
    drop = min(committed, beyond_floor)
    if total - cum[0] > cap:
        return min(n - 1, max(drop, bisect.bisect_left(cum, total - cap // 2, 0, n + 1)))
    return drop if drop * 2 >= n else 0
