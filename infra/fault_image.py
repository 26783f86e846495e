"""One served image of the Python FUSE daemon (``infra.fusefs``): its fault mode, counters and
the I/O that passes through it — the reference of what the native daemon's
``infra/faultfs/image.c`` and ``infra/faultfs/imageio.c`` do.

``ImageState.read(fd, size, offset)`` / ``write(fd, data, offset)`` / ``fsync(fd, datasync)``
carry out one request on the backing file descriptor under the image's mode
(``infra.faultmodes``): pass, sleep, EIO, flip bits, keep the write in the volatile cache, drop
it. ``power_cut()`` drops the cache and switches the image ``off``; ``rearm()`` forgets the
first hit (the harness calls it after its own probe, so the next hit is the node's).

Counters (the snapshot, also the control protocol's answer): ``ops`` and ``injected`` per op
(read, write, fsync); ``host_syncs``; ``first_hit_ns`` — when an op first met the fault since
it was set (an EIO returned, a bit flipped, a write cached or dropped, a delay served); ``flipped``
— bits flipped; ``unsynced_bytes`` — what the volatile cache holds now (whole 4 KiB pages);
``dropped_bytes`` — what the last power cut lost; ``bad_blocks`` — bad blocks left.
"""

from __future__ import annotations

import bisect
import errno
import os
import random
import threading
import time

from infra.errors import InfraError
from infra.faultmodes import BLOCK, FaultMode, flips

OPS = ("read", "write", "fsync")
MAX_CACHE_BYTES = 256 << 20   # a fuller volatile cache is written back (destaged) as a whole


class FaultImageError(InfraError, OSError):
    """An op refused by the image's mode (EIO)."""


def _zeros() -> dict[str, int]:
    return {op: 0 for op in OPS}


class ImageState:
    """Mode, RNG, counters, bad-block list and volatile cache of one served image."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path                      # the backing file (the cache's write-back outside a request)
        self.lock = threading.Lock()          # mode, counters, draws, bad blocks
        self.cache_lock = threading.Lock()    # the volatile cache, and every op of lose-unsynced
        self.mode = FaultMode()
        self.rng = random.Random(0)
        self.since_ns = time.time_ns()
        self.ops = _zeros()
        self.injected = _zeros()
        self.host_syncs = 0
        self.first_hit_ns: int | None = None
        self.flipped = 0
        self.dropped_bytes = 0
        self.bad: list[int] = []                  # sorted bad block numbers (bad-blocks)
        self.cache: dict[int, bytearray] = {}     # page number -> 4 KiB (lose-unsynced)

    # ---- control ------------------------------------------------------------------------
    def set(self, mode: FaultMode) -> None:
        with self.cache_lock:
            if self.mode.kind == "lose-unsynced" and self.cache:
                self._write_back()            # leaving the mode without a power cut loses nothing
            with self.lock:
                self.mode = mode
                self.rng = random.Random(mode.seed)
                self.since_ns = time.time_ns()
                self.injected = _zeros()
                self.first_hit_ns = None
                self.flipped = 0
                self.dropped_bytes = 0
                self.bad = sorted({b for a, e in mode.ranges for b in range(a // BLOCK, e // BLOCK)}) \
                    if mode.kind == "bad-blocks" else []

    def rearm(self) -> None:
        with self.lock:
            self.first_hit_ns = None

    def power_cut(self) -> int:
        """Drop the volatile cache (what was never flushed), switch ``off``; bytes dropped."""
        with self.cache_lock:
            dropped = len(self.cache) * BLOCK
            self.cache.clear()
            with self.lock:
                self.mode = FaultMode("off")
                self.since_ns = time.time_ns()
                self.injected = _zeros()
                self.first_hit_ns = None
                self.flipped = 0
                self.bad = []
                self.dropped_bytes = dropped
        return dropped

    def snapshot(self) -> dict[str, object]:
        with self.lock:
            return {"mode": self.mode.to_dict(), "since_ns": self.since_ns, "ops": dict(self.ops),
                    "injected": dict(self.injected), "host_syncs": self.host_syncs,
                    "first_hit_ns": self.first_hit_ns, "flipped": self.flipped,
                    "unsynced_bytes": len(self.cache) * BLOCK, "dropped_bytes": self.dropped_bytes,
                    "bad_blocks": len(self.bad)}

    # ---- the gate -----------------------------------------------------------------------
    def _hit(self, op: str | None) -> None:
        """Count one injected effect (lock held)."""
        if op is not None:
            self.injected[op] += 1
        if self.first_hit_ns is None:
            self.first_hit_ns = time.time_ns()

    def _gate(self, op: str, offset: int = 0, size: int = 0) -> FaultMode:
        """Count the op; raise EIO, or return the mode the op proceeds under."""
        with self.lock:
            self.ops[op] += 1
            mode = self.mode
            if mode.kind == "ok" or not mode.in_scope(op, offset, size):
                return FaultMode()
            fail = mode.fails(op) or (mode.kind == "flaky" and self.rng.random() < mode.p)
            if mode.kind == "bad-blocks" and op == "read":
                first, last = offset // BLOCK, (offset + max(size, 1) - 1) // BLOCK
                i = bisect.bisect_left(self.bad, first)
                fail = i < len(self.bad) and self.bad[i] <= last
            if mode.kind == "off" and op == "read":
                fail = True
            if fail:
                self._hit(op)
                raise FaultImageError(errno.EIO, os.strerror(errno.EIO))
            if mode.kind == "delay" and mode.delay_ms > 0:
                self._hit(None)
        if mode.kind == "delay" and mode.delay_ms > 0:
            time.sleep(mode.delay_ms / 1000.0)
        return mode

    # ---- I/O ------------------------------------------------------------------------------
    def read(self, fd: int, size: int, offset: int) -> bytes:
        if self.mode.kind == "lose-unsynced" or self.cache:
            with self.cache_lock:
                mode = self._gate("read", offset, size)
                if mode.kind == "lose-unsynced" or self.cache:
                    return self._cached_read(fd, size, offset)
        mode = self._gate("read", offset, size)
        data = os.pread(fd, size, offset)
        if mode.kind == "corrupt-reads":
            data = self._corrupt(mode, data, offset, "read")
        return data

    def write(self, fd: int, data: bytes, offset: int) -> int:
        if self.mode.kind in ("lose-unsynced", "off"):
            with self.cache_lock:
                mode = self._gate("write", offset, len(data))
                if mode.kind == "off":
                    with self.lock:
                        self._hit("write")
                        self.dropped_bytes += len(data)   # a write after the power went: lost too
                    return len(data)
                if mode.kind == "lose-unsynced":
                    self._cache_write(fd, data, offset)
                    return len(data)
        mode = self._gate("write", offset, len(data))
        if mode.kind == "corrupt-writes":
            data = self._corrupt(mode, data, offset, "write")
        n = os.pwrite(fd, data, offset)
        if mode.kind == "bad-blocks" and n > 0:
            self._remap(offset, n)
        return n

    def fsync(self, fd: int, datasync: bool, host_sync: bool) -> None:
        mode = self._gate("fsync")
        if mode.kind == "off":
            return
        if self.cache:
            with self.cache_lock:
                self._write_back(fd)
        if host_sync:
            if datasync:
                os.fdatasync(fd)
            else:
                os.fsync(fd)
            with self.lock:
                self.host_syncs += 1

    # ---- effects ----------------------------------------------------------------------------
    def _corrupt(self, mode: FaultMode, data: bytes, offset: int, op: str) -> bytes:
        hits = flips(mode.ranges, mode.seed, mode.p, offset, len(data))
        hits = [(i, bit) for i, bit in hits if i < len(data)]
        if not hits:
            return data
        buf = bytearray(data)
        for i, bit in hits:
            buf[i] ^= 1 << bit
        with self.lock:
            self._hit(op)
            self.flipped += len(hits)
        return bytes(buf)

    def _remap(self, offset: int, size: int) -> None:
        first, last = offset // BLOCK, (offset + size - 1) // BLOCK
        with self.lock:
            lo, hi = bisect.bisect_left(self.bad, first), bisect.bisect_right(self.bad, last)
            del self.bad[lo:hi]

    def _page(self, fd: int, page: int) -> bytearray:
        buf = self.cache.get(page)
        if buf is None:
            buf = bytearray(os.pread(fd, BLOCK, page * BLOCK).ljust(BLOCK, b"\0"))
            self.cache[page] = buf
        return buf

    def _cache_write(self, fd: int, data: bytes, offset: int) -> None:
        """Into the volatile cache (cache_lock held)."""
        pos, end = offset, offset + len(data)
        while pos < end:
            page, rel = divmod(pos, BLOCK)
            n = min(BLOCK - rel, end - pos)
            self._page(fd, page)[rel:rel + n] = data[pos - offset:pos - offset + n]
            pos += n
        with self.lock:
            self._hit("write")
        if len(self.cache) * BLOCK > MAX_CACHE_BYTES:
            self._write_back(fd)

    def _cached_read(self, fd: int, size: int, offset: int) -> bytes:
        data = bytearray(os.pread(fd, size, offset))
        for page in range(offset // BLOCK, (offset + len(data) - 1) // BLOCK + 1 if data else 0):
            buf = self.cache.get(page)
            if buf is None:
                continue
            start, stop = max(offset, page * BLOCK), min(offset + len(data), (page + 1) * BLOCK)
            data[start - offset:stop - offset] = buf[start - page * BLOCK:stop - page * BLOCK]
        return bytes(data)

    def _write_back(self, fd: int | None = None) -> None:
        """The volatile cache to the backing file (cache_lock held)."""
        own = fd is None and self.path is not None
        if own:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        if fd is None:
            return
        try:
            for page in sorted(self.cache):
                os.pwrite(fd, self.cache[page], page * BLOCK)
        finally:
            if own:
                os.close(fd)
        self.cache.clear()
