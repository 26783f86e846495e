"""Capability probe: which disk-fault backend this host can run (``auto`` = dm if it works, else fuse)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from infra import dm
from infra.errors import CapabilityError

BACKENDS = ("auto", "dm", "fuse", "plain")


@dataclass(frozen=True, slots=True)
class Capabilities:
    root: bool
    loop: bool
    fuse: bool
    dm: bool
    dm_reason: str
    fuse_reason: str

    def as_dict(self) -> dict[str, object]:
        return {"root": self.root, "loop": self.loop, "fuse": self.fuse, "dm": self.dm,
                "dm_reason": self.dm_reason, "fuse_reason": self.fuse_reason}


def probe() -> Capabilities:
    root = os.geteuid() == 0
    loop = Path("/dev/loop-control").exists()
    fuse_ok = Path("/dev/fuse").exists() and any(
        Path(p).exists() for p in ("/usr/lib/x86_64-linux-gnu/libfuse3.so.3", "/lib/x86_64-linux-gnu/libfuse3.so.3",
                                   "/usr/lib/aarch64-linux-gnu/libfuse3.so.3"))
    fuse_reason = "FUSE available (libfuse3)" if fuse_ok else "no /dev/fuse or libfuse3 (apt-get install fuse3 libfuse3-3)"
    dm_ok, dm_reason = dm.available()
    return Capabilities(root, loop, fuse_ok, dm_ok, dm_reason, fuse_reason)


def choose_backend(requested: str = "auto", caps: Capabilities | None = None) -> str:
    """Resolve ``auto`` and check the requested backend works here (else CapabilityError)."""
    if requested not in BACKENDS:
        raise CapabilityError(f"disk backend {requested!r} is unknown (choose from {', '.join(BACKENDS)})")
    caps = caps or probe()
    if not caps.root or not caps.loop:
        raise CapabilityError("the lab needs root and loop devices (/dev/loop-control)")
    if requested == "auto":
        if caps.dm:
            return "dm"
        if caps.fuse:
            return "fuse"
        raise CapabilityError(f"no disk fault backend: {caps.dm_reason}; {caps.fuse_reason}")
    if requested == "dm" and not caps.dm:
        raise CapabilityError(f"dm backend unavailable: {caps.dm_reason}")
    if requested == "fuse" and not caps.fuse:
        raise CapabilityError(f"fuse backend unavailable: {caps.fuse_reason}")
    return requested
