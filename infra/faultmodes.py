"""Fault modes of one backing image (shared by the FUSE daemon and its clients).

A ``FaultMode`` is a frozen value: ``ok``, ``error`` (all I/O → EIO), ``error-reads``,
``error-writes`` (writes and fsync → EIO), ``flaky`` (each op fails with probability ``p``,
drawn from ``random.Random(seed)`` reset at every switch, so a sequence replays),
``delay`` (every op sleeps ``delay_ms``) and ``removed`` (the device is gone: every op → EIO).
Text form for CLIs: ``ok``, ``error``, ``error-reads``, ``error-writes``, ``flaky:P[:SEED]``,
``delay:MS``, ``removed``.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("ok", "error", "error-reads", "error-writes", "flaky", "delay", "removed")
ALL_OPS = frozenset({"read", "write", "fsync"})
_OPS = {
    "ok": frozenset(),
    "error": ALL_OPS,
    "error-reads": frozenset({"read"}),
    "error-writes": frozenset({"write", "fsync"}),
    "flaky": ALL_OPS,
    "delay": ALL_OPS,
    "removed": ALL_OPS,
}


@dataclass(frozen=True, slots=True)
class FaultMode:
    kind: str = "ok"
    p: float = 0.0
    seed: int = 0
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault mode kind {self.kind!r} is unknown (choose from {', '.join(KINDS)})")
        if self.kind == "flaky" and not 0.0 <= self.p <= 1.0:
            raise ValueError(f"flaky probability p={self.p} must be within [0, 1]")
        if self.kind == "delay" and not 0.0 <= self.delay_ms <= 600_000:
            raise ValueError(f"delay_ms={self.delay_ms} must be within [0, 600000]")

    @property
    def ops(self) -> frozenset[str]:
        """The operations this mode affects."""
        return _OPS[self.kind]

    def fails(self, op: str) -> bool:
        """True if ``op`` always fails in this mode (flaky and delay are not 'always')."""
        return self.kind in ("error", "error-reads", "error-writes", "removed") and op in self.ops

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "p": self.p, "seed": self.seed, "delay_ms": self.delay_ms}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> FaultMode:
        try:
            return cls(kind=str(data["kind"]), p=float(data.get("p", 0.0)), seed=int(data.get("seed", 0)),
                       delay_ms=float(data.get("delay_ms", 0.0)))
        except KeyError as exc:
            raise ValueError(f"fault mode {data!r} lacks field {exc}") from exc

    @classmethod
    def parse(cls, text: str) -> FaultMode:
        parts = text.strip().split(":")
        kind, args = parts[0], parts[1:]
        try:
            if kind == "flaky":
                if not 1 <= len(args) <= 2:
                    raise ValueError("flaky needs P[:SEED]")
                return cls("flaky", p=float(args[0]), seed=int(args[1]) if len(args) > 1 else 0)
            if kind == "delay":
                if len(args) != 1:
                    raise ValueError("delay needs MS")
                return cls("delay", delay_ms=float(args[0]))
            if args:
                raise ValueError(f"{kind} takes no parameters")
            return cls(kind)
        except ValueError as exc:
            raise ValueError(f"fault mode {text!r}: {exc}") from exc

    def __str__(self) -> str:
        if self.kind == "flaky":
            return f"flaky:{self.p:g}:{self.seed}"
        if self.kind == "delay":
            return f"delay:{self.delay_ms:g}"
        return self.kind
