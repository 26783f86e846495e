"""One lab disk: sparse backing file → (FUSE fault fs →) loop device (direct I/O) → (dm-linear →)
filesystem, mounted at ``<lab dir>/nodes/<node>/<dir>``; the log dir is its ``data/`` subdir.

The last ``PROBE_BYTES`` of every device lie outside the filesystem: the fault probe reads and
writes a sentinel block there with O_DIRECT without touching the filesystem.

Backends (``FuseBackend``, ``DmBackend``, ``PlainBackend``) attach/detach the block device and
switch its ``FaultMode``; ``infra.faults.DiskFaultHandle`` is the one interface on top.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from infra import dm, fs, loopdev
from infra.errors import DeviceError, FaultError
from infra.faultmodes import FaultMode
from infra.fuse_daemon import FuseDaemon
from infra.naming import disk_key, dm_name

PROBE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Disk:
    lab_id: str
    node: str
    name: str
    fstype: str
    backend: str
    image: Path          # the real backing file
    loop_dev: str
    block_dev: str       # the device the filesystem sits on (loop or /dev/mapper/…)
    mountpoint: Path
    fs_bytes: int

    @property
    def key(self) -> str:
        return disk_key(self.node, self.name)

    @property
    def data_path(self) -> Path:
        """Host path of the log dir on this disk."""
        return self.mountpoint / "data"

    @property
    def probe_offset(self) -> int:
        return self.fs_bytes

    def target(self) -> dict[str, str]:
        return {"lab": self.lab_id, "node": self.node, "dir": self.name, "device": self.block_dev,
                "loop": self.loop_dev, "mountpoint": str(self.mountpoint), "fstype": self.fstype}


class DiskBackend(Protocol):
    """Attach/detach a disk's block device and switch its fault mode. ``power_cut`` drops what
    the device has not made durable and stops taking writes (until the next ``set_mode``);
    ``snapshot`` is the backend's own reading of the fault (counters, first hit) or None;
    ``rearm`` makes the next op that meets the fault its first hit."""

    name: str

    def attach(self, lab_id: str, node: str, dirname: str, image: Path, cache: str) -> tuple[str, str]: ...
    def set_mode(self, disk: Disk, mode: FaultMode) -> str: ...
    def power_cut(self, disk: Disk) -> dict: ...
    def snapshot(self, disk: Disk) -> dict | None: ...
    def rearm(self, disk: Disk) -> None: ...
    def detach(self, disk: Disk) -> None: ...


class PlainBackend:
    """A loop device on the backing file, no fault injection (baselines, benches)."""

    name = "plain"

    def attach(self, lab_id: str, node: str, dirname: str, image: Path, cache: str) -> tuple[str, str]:
        dev = loopdev.attach(image, cache=cache)
        return dev, dev

    def set_mode(self, disk: Disk, mode: FaultMode) -> str:
        if mode.kind != "ok":
            raise FaultError(f"the plain backend cannot inject {mode} (use fuse or dm)")
        return "ok"

    def power_cut(self, disk: Disk) -> dict:
        raise FaultError("the plain backend cannot cut a disk's power (use fuse or dm)")

    def snapshot(self, disk: Disk) -> dict | None:
        return None

    def rearm(self, disk: Disk) -> None:
        return None

    def detach(self, disk: Disk) -> None:
        loopdev.detach(disk.loop_dev)


class FuseBackend:
    """The loop device sits on the image as served by the lab's FUSE fault daemon."""

    name = "fuse"

    def __init__(self, daemon: FuseDaemon) -> None:
        self.daemon = daemon

    def attach(self, lab_id: str, node: str, dirname: str, image: Path, cache: str) -> tuple[str, str]:
        dev = loopdev.attach(self.daemon.mountpoint / image.name, cache=cache)
        return dev, dev

    def set_mode(self, disk: Disk, mode: FaultMode) -> str:
        reply = self.daemon.set_mode(disk.image.name, mode)
        return json.dumps(reply["mode"], sort_keys=True)

    def power_cut(self, disk: Disk) -> dict:
        reply = self.daemon.power_cut(disk.image.name)
        return {"dropped_bytes": reply["dropped_bytes"], "state": json.dumps(reply["mode"], sort_keys=True)}

    def snapshot(self, disk: Disk) -> dict | None:
        return self.daemon.get(disk.image.name)

    def rearm(self, disk: Disk) -> None:
        self.daemon.rearm(disk.image.name)

    def detach(self, disk: Disk) -> None:
        loopdev.detach(disk.loop_dev)


class DmBackend:
    """loop → dm-linear ``jbodlab-<lab>-<node>--<dir>``; faults are table swaps."""

    name = "dm"

    def __init__(self) -> None:
        self._cut: set[str] = set()   # dm devices whose power is cut (the next ok powers them on)

    def attach(self, lab_id: str, node: str, dirname: str, image: Path, cache: str) -> tuple[str, str]:
        dev = loopdev.attach(image, cache=cache)
        try:
            return dev, dm.create(dm_name(lab_id, node, dirname), dev)
        except DeviceError:
            loopdev.detach(dev)
            raise

    def set_mode(self, disk: Disk, mode: FaultMode) -> str:
        name = dm_name(disk.lab_id, disk.node, disk.name)
        if mode.kind == "ok" and name in self._cut:
            self._cut.discard(name)
            return dm.power_on(name, disk.loop_dev)   # after a power cut: what was durable, back
        return dm.set_mode(name, disk.loop_dev, mode, image=disk.image)

    def power_cut(self, disk: Disk) -> dict:
        name = dm_name(disk.lab_id, disk.node, disk.name)
        self._cut.add(name)
        return dm.power_cut(name, disk.loop_dev)

    def snapshot(self, disk: Disk) -> dict | None:
        return None   # dm keeps no counters: the kernel log has the only record

    def rearm(self, disk: Disk) -> None:
        return None

    def detach(self, disk: Disk) -> None:
        dm.remove(dm_name(disk.lab_id, disk.node, disk.name))
        loopdev.detach(disk.loop_dev)


def create_disk(backend: DiskBackend, *, lab_id: str, lab_dir: Path, node: str, dirname: str,
                size_mb: int, fstype: str, cache: str = "write-back", owner: tuple[int, int] | None = None) -> Disk:
    """Backing file → device → mkfs → mount → ``data/``. Undoes its own steps on failure.
    ``cache``: the device's cache model (``infra.loopdev.WRITE_CACHES``); ``owner``: (uid, gid)
    that owns ``data/`` (the user the node runs as)."""
    if fstype not in fs.FSTYPES:
        raise DeviceError(f"filesystem type {fstype!r} is not supported (choose from {', '.join(fs.FSTYPES)})")
    if size_mb < (300 if fstype == "xfs" else 1 if fstype == "raw" else 16):
        raise DeviceError(f"disk size {size_mb} MiB too small for {fstype}")
    fs_bytes = size_mb << 20
    image = lab_dir / "backing" / f"{disk_key(node, dirname)}.img"
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as fh:
        fh.truncate(fs_bytes + PROBE_BYTES)
    loop_dev, block_dev = backend.attach(lab_id, node, dirname, image, cache)
    disk = Disk(lab_id, node, dirname, fstype, backend.name, image, loop_dev, block_dev,
                lab_dir / "nodes" / node / dirname, fs_bytes)
    if fstype == "raw":
        return disk
    try:
        fs.mkfs(block_dev, fstype, fs_bytes)
        fs.mount(block_dev, disk.mountpoint, fstype)
        disk.data_path.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(disk.data_path, *owner)
    except Exception:
        fs.umount(disk.mountpoint, lazy=True)
        backend.detach(disk)
        raise
    return disk


def destroy_disk(backend: DiskBackend, disk: Disk) -> None:
    try:
        backend.set_mode(disk, FaultMode())
    except Exception:  # noqa: BLE001 - tearing down: a dead daemon must not stop the rest
        pass
    fs.umount(disk.mountpoint, lazy=True)
    backend.detach(disk)
    try:
        disk.image.unlink(missing_ok=True)
    except OSError:
        pass


def repair_disk(disk: Disk, *, busy_timeout_s: float = 10.0) -> str:
    """Unmount, fsck (ext4 after an aborted journal / xfs after shutdown) and mount again.

    Processes that keep files open on the disk (a running node) hold the superblock: stop them
    first, or this raises DeviceError after ``busy_timeout_s``.
    """
    fs.umount(disk.mountpoint, lazy=True)
    if not fs.wait_unused(disk.block_dev, busy_timeout_s):
        raise DeviceError(f"{disk.block_dev} ({disk.node}/{disk.name}) is still in use after unmount: "
                          f"stop the node's processes before repairing")
    summary = fs.fsck(disk.block_dev, disk.fstype)
    fs.mount(disk.block_dev, disk.mountpoint, disk.fstype)
    disk.data_path.mkdir(exist_ok=True)
    os.sync()
    return summary
