"""Reading /proc/self/mountinfo without touching the mounted filesystems (safe with a wedged FUSE daemon)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class MountEntry:
    mount_id: int
    major_minor: str
    root: str
    target: str
    options: str
    fstype: str
    source: str
    super_options: str

    @property
    def minor(self) -> int:
        return int(self.major_minor.split(":")[1])

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",") or "ro" in self.super_options.split(",")


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mountinfo(path: str = "/proc/self/mountinfo") -> list[MountEntry]:
    entries = []
    for line in Path(path).read_text().splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        entries.append(MountEntry(int(f[0]), f[2], _unescape(f[3]), _unescape(f[4]), f[5], r[0],
                                  _unescape(r[1]) if len(r) > 1 else "", r[2] if len(r) > 2 else ""))
    return entries


def mounts_under(prefix: Path | str) -> list[MountEntry]:
    """Mounts at or below ``prefix``, deepest (and latest) first: the order to unmount them."""
    pre = str(prefix).rstrip("/")
    found = [m for m in mountinfo() if m.target == pre or m.target.startswith(pre + "/")]
    return sorted(found, key=lambda m: (m.target.count("/"), m.mount_id), reverse=True)


def mount_at(target: Path | str) -> MountEntry | None:
    """The top-most mount at exactly ``target``."""
    hits = [m for m in mountinfo() if m.target == str(target)]
    return max(hits, key=lambda m: m.mount_id) if hits else None
