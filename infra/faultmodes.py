"""Fault modes of one backing image (shared by the FUSE daemons, the dm backend and their clients).

A ``FaultMode`` is a frozen value. Kinds:

- ``ok``; ``error`` (all I/O → EIO), ``error-reads``, ``error-writes`` (writes and fsync → EIO),
  ``flaky`` (each op fails with probability ``p``, drawn from a PRNG seeded with ``seed`` and
  reset at every switch, so a sequence replays), ``delay`` (every op sleeps ``delay_ms``),
  ``removed`` (the device is gone: every op → EIO);
- ``corrupt-reads`` / ``corrupt-writes``: silent corruption. Each 4 KiB block of the image is
  chosen with probability ``p`` by a hash of (``seed``, block number) — :func:`block_flip`,
  the same function in both daemons — and a chosen block has one bit flipped at a position
  that hash also fixes: data read from it (``corrupt-reads``) or written to it
  (``corrupt-writes``) comes back/lands with that bit flipped, every time, like bit rot on
  the medium. Nothing fails;
- ``bad-blocks`` (dm-dust): a read touching one of the listed blocks (``ranges``, widened to
  4 KiB blocks) fails with EIO; a write to a bad block succeeds and "remaps" it (it leaves
  the list);
- ``lose-unsynced`` (LazyFS, dm-flakey ``drop_writes`` at a power cut): the daemon keeps every
  write in its own volatile cache (reads see it) until the next flush (fsync) writes the
  cache to the backing file; a power cut (``power-cut`` control op) drops what was not
  flushed and switches the image to ``off``. Leaving the mode any other way writes the cache
  back (nothing is lost without a power cut);
- ``off``: the drive has no power: reads → EIO, writes and flushes are acknowledged and
  dropped (so the kernel can let go of the filesystem: unmount, flush the block device).

``ranges``: ``((start, end), …)`` byte ranges of the image (half open, merged). Given, the
data kinds touch only reads and writes that overlap them (an fsync then always passes);
empty, the whole image. That is how a fault targets the blocks of one file (``infra.extents``).

Text form for CLIs: ``ok``, ``error``, ``error-reads``, ``error-writes``, ``flaky:P[:SEED]``,
``delay:MS``, ``removed``, ``corrupt-reads:P[:SEED]``, ``corrupt-writes:P[:SEED]``,
``bad-blocks``, ``lose-unsynced``, ``off``, each optionally followed by
``@START-END,START-END…`` (byte ranges).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

KINDS = ("ok", "error", "error-reads", "error-writes", "flaky", "delay", "removed", "corrupt-reads",
         "corrupt-writes", "bad-blocks", "lose-unsynced", "off")
ALL_OPS = frozenset({"read", "write", "fsync"})
_OPS = {
    "ok": frozenset(),
    "error": ALL_OPS,
    "error-reads": frozenset({"read"}),
    "error-writes": frozenset({"write", "fsync"}),
    "flaky": ALL_OPS,
    "delay": ALL_OPS,
    "removed": ALL_OPS,
    "corrupt-reads": frozenset({"read"}),
    "corrupt-writes": frozenset({"write"}),
    "bad-blocks": frozenset({"read"}),
    "lose-unsynced": ALL_OPS,
    "off": ALL_OPS,
}
BLOCK = 4096                    # the granularity of corruption and bad blocks (the fs block size)
RANGED_KINDS = ("error", "error-reads", "error-writes", "flaky", "delay", "corrupt-reads", "corrupt-writes",
                "bad-blocks")
P_KINDS = ("flaky", "corrupt-reads", "corrupt-writes")
MAX_RANGES = 4096
_M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """splitmix64's finaliser (the native daemon computes the same)."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def block_flip(seed: int, block: int, p: float) -> tuple[int, int] | None:
    """Whether block ``block`` (4 KiB, counted from the image's start) is corrupted under
    ``seed``/``p``, and where: ``(byte position in the block, bit)``; None if it is not."""
    u = mix64((seed & _M64) ^ mix64(block))
    if (u >> 11) * (1.0 / (1 << 53)) >= p:
        return None
    v = mix64(u)
    return v % BLOCK, (v >> 12) & 7


def normalize_ranges(ranges, *, widen_to: int = 1) -> tuple[tuple[int, int], ...]:
    """Sorted, merged, half-open ``(start, end)`` pairs; ``widen_to``: align each outwards to
    that many bytes. ValueError on a malformed pair."""
    pairs = []
    for r in ranges or ():
        try:
            start, end = r
        except (TypeError, ValueError):
            start = end = None
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)):
            raise ValueError(f"range {r!r} is not a [start, end] pair of integers")
        if start < 0 or end <= start:
            raise ValueError(f"range [{start}, {end}) must have 0 <= start < end")
        pairs.append((start - start % widen_to, -(-end // widen_to) * widen_to))
    pairs.sort()
    out: list[tuple[int, int]] = []
    for start, end in pairs:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    if len(out) > MAX_RANGES:
        raise ValueError(f"{len(out)} ranges: at most {MAX_RANGES}")
    return tuple(out)


def overlaps(ranges: tuple[tuple[int, int], ...], start: int, end: int) -> bool:
    """True when [start, end) meets one of the (normalized) ranges."""
    i = bisect.bisect_right(ranges, (start, 1 << 63)) - 1
    if i >= 0 and ranges[i][1] > start:
        return True
    return i + 1 < len(ranges) and ranges[i + 1][0] < end


def flips(ranges: tuple[tuple[int, int], ...], seed: int, p: float, offset: int, size: int) -> list[tuple[int, int]]:
    """The bit flips ``(index in the request, bit)`` that corrupt a read or write of ``size``
    bytes at image ``offset``: the chosen blocks' flip positions that fall inside the request
    and inside ``ranges`` (all of the image when empty)."""
    out = []
    first, last = offset // BLOCK, (offset + size - 1) // BLOCK
    for block in range(first, last + 1):
        hit = block_flip(seed, block, p)
        if hit is None:
            continue
        pos = block * BLOCK + hit[0]
        if offset <= pos < offset + size and (not ranges or overlaps(ranges, pos, pos + 1)):
            out.append((pos - offset, hit[1]))
    return out


SEED_TRIES = 4096


def seed_meeting_data(seed: int, p: float, data: tuple[tuple[int, int], ...], tries: int = SEED_TRIES) -> int:
    """The first corruption seed from ``seed`` on whose flips meet a byte of ``data`` (image
    byte ranges holding a file's bytes, its last block cut at the file's end).

    A corrupted block has ONE flipped bit at a hashed position in its 4 KiB; in a file's last,
    partly written block that position falls past the file's end with the share of the block
    the file does not fill yet, and such a flip corrupts nothing the file holds (a short
    active segment: most of its only block). A file-limited corruption that must corrupt the
    file therefore moves its seed on until a flip lands in the data; ``seed`` itself when it
    already does, or when none of ``tries`` seeds does (a file of a few bytes at a low ``p``).
    """
    if not data:
        return seed
    for k in range(tries):
        s = seed + k
        if any(flips(data, s, p, start, end - start) for start, end in data):
            return s
    return seed


@dataclass(frozen=True, slots=True)
class FaultMode:
    kind: str = "ok"
    p: float = 0.0
    seed: int = 0
    delay_ms: float = 0.0
    ranges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault mode kind {self.kind!r} is unknown (choose from {', '.join(KINDS)})")
        if self.kind == "flaky" and not 0.0 <= self.p <= 1.0:
            raise ValueError(f"flaky probability p={self.p} must be within [0, 1]")
        if self.kind in ("corrupt-reads", "corrupt-writes") and not 0.0 < self.p <= 1.0:
            raise ValueError(f"{self.kind}: the share of blocks corrupted p={self.p} must be within (0, 1]")
        if self.kind == "delay" and not 0.0 <= self.delay_ms <= 600_000:
            raise ValueError(f"delay_ms={self.delay_ms} must be within [0, 600000]")
        ranges = normalize_ranges(self.ranges, widen_to=BLOCK if self.kind == "bad-blocks" else 1)
        object.__setattr__(self, "ranges", ranges)
        if ranges and self.kind not in RANGED_KINDS:
            raise ValueError(f"mode {self.kind} takes no ranges (ranged kinds: {', '.join(RANGED_KINDS)})")
        if self.kind == "bad-blocks" and not ranges:
            raise ValueError("bad-blocks needs the bad blocks as ranges")

    @property
    def ops(self) -> frozenset[str]:
        """The operations this mode affects."""
        return _OPS[self.kind]

    def fails(self, op: str) -> bool:
        """True if ``op`` always fails in this mode (flaky and delay are not 'always'; with
        ranges, only within them)."""
        return self.kind in ("error", "error-reads", "error-writes", "removed") and op in self.ops

    def in_scope(self, op: str, offset: int = 0, size: int = 0) -> bool:
        """Whether an op at [offset, offset+size) meets this mode at all (ranges: a read or a
        write must overlap them; an fsync never does)."""
        if not self.ranges:
            return True
        return op != "fsync" and overlaps(self.ranges, offset, offset + max(size, 1))

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "p": self.p, "seed": self.seed, "delay_ms": self.delay_ms,
                "ranges": [list(r) for r in self.ranges]}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> FaultMode:
        try:
            return cls(kind=str(data["kind"]), p=float(data.get("p", 0.0)), seed=int(data.get("seed", 0)),
                       delay_ms=float(data.get("delay_ms", 0.0)),
                       ranges=tuple(tuple(r) for r in (data.get("ranges") or ())))
        except KeyError as exc:
            raise ValueError(f"fault mode {data!r} lacks field {exc}") from exc
        except TypeError as exc:
            raise ValueError(f"fault mode {data!r}: {exc}") from exc

    @classmethod
    def parse(cls, text: str) -> FaultMode:
        body, at, spans = text.strip().partition("@")
        parts = body.split(":")
        kind, args = parts[0], parts[1:]
        try:
            ranges = tuple(tuple(int(x) for x in s.split("-", 1)) for s in spans.split(",") if s) if at else ()
            if at and not ranges:
                raise ValueError("'@' needs START-END ranges")
            if kind in P_KINDS:
                if not 1 <= len(args) <= 2:
                    raise ValueError(f"{kind} needs P[:SEED]")
                return cls(kind, p=float(args[0]), seed=int(args[1]) if len(args) > 1 else 0, ranges=ranges)
            if kind == "delay":
                if len(args) != 1:
                    raise ValueError("delay needs MS")
                return cls("delay", delay_ms=float(args[0]), ranges=ranges)
            if args:
                raise ValueError(f"{kind} takes no parameters")
            return cls(kind, ranges=ranges)
        except ValueError as exc:
            raise ValueError(f"fault mode {text!r}: {exc}") from exc

    def __str__(self) -> str:
        if self.kind in P_KINDS:
            text = f"{self.kind}:{self.p:g}:{self.seed}"
        elif self.kind == "delay":
            text = f"delay:{self.delay_ms:g}"
        else:
            text = self.kind
        if self.ranges:
            text += "@" + ",".join(f"{a}-{b}" for a, b in self.ranges)
        return text
