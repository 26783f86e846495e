"""``lab.json``: the one record of a lab on the host (``/var/lib/jbodlab/labs/<lab_id>/lab.json``).

It holds the owner pid and that process's start time (so ``jbodlab cleanup`` can tell a live
lab from a leftover even after pid reuse), whether the lab is persistent, the backend, the
topology, the network and the disks (loop device, image, mountpoint). :mod:`infra.lab` writes
it; :mod:`infra.lab` and :mod:`infra.cleanup` read it, only through this module.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["FILE", "new_record", "read", "write", "owner_alive", "recorded_loops"]

FILE = "lab.json"


def _proc_start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def new_record(lab_id: str, *, persistent: bool, backend: str, topology: dict) -> dict:
    """The record of a lab owned by this process, as created."""
    return {"lab_id": lab_id, "owner_pid": os.getpid(), "owner_start": _proc_start_time(os.getpid()),
            "persistent": persistent, "created_ns": time.time_ns(), "backend": backend,
            "topology": topology}


def read(lab_root: Path) -> dict:
    """The record of the lab at ``lab_root``; OSError / ValueError when missing or unreadable."""
    meta = json.loads((lab_root / FILE).read_text())
    if not isinstance(meta, dict):
        raise ValueError(f"{lab_root / FILE}: not a JSON object")
    return meta


def write(lab_root: Path, meta: dict) -> None:
    """Replace the record atomically (a reader sees the old or the new one, never half)."""
    tmp = lab_root / (FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.rename(lab_root / FILE)


def owner_alive(meta: dict) -> bool:
    """A lab is live while its owner process runs; a persistent lab (chaos session) until removed."""
    if meta.get("persistent"):
        return True
    pid = meta.get("owner_pid")
    if not isinstance(pid, int):
        return False
    started = _proc_start_time(pid)
    return started is not None and started == meta.get("owner_start")


def recorded_loops(labs_root: Path) -> dict[str, tuple[str, str]]:
    """loop device -> (lab id, image file name), from every lab's record under ``labs_root``."""
    out: dict[str, tuple[str, str]] = {}
    if not labs_root.is_dir():
        return out
    for meta_path in labs_root.glob(f"*/{FILE}"):
        try:
            for d in read(meta_path.parent).get("disks", []):
                out[d["loop_dev"]] = (meta_path.parent.name, Path(d["image"]).name)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out
