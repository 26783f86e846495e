"""A power cut of a node's disks: what was not durable is lost, then the power comes back.

``cut_power(backend, disks)`` (the node's processes already killed) per disk:

1. the device loses power (``backend.power_cut``): the FUSE daemon drops what its volatile
   cache holds — the writes since the last flush of a ``lose-unsynced`` disk — and then
   acknowledges and drops every write (dm: ``flakey drop_writes``);
2. the filesystem is unmounted and the block device's buffers flushed: the dirty pages of the
   host's page cache (the guest's RAM, lost in a real power cut) are written to a device that
   drops them (counted: ``writeback_dropped_bytes``, FUSE backend), so nothing written after
   the last flush survives, on any disk of the node; the unmount must really finish (nothing
   may hold the filesystem), else ``DeviceError``;
3. power on (mode ``ok``) and mount again: ext4 replays its journal as after a crash.

Returns one record per disk: bytes the device's volatile cache dropped (``dropped_bytes``),
bytes of the page cache's writeback it dropped after the cut, times of the cut and the mount.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from infra import _cmd, fs
from infra.errors import DeviceError
from infra.faultmodes import FaultMode


@dataclass(slots=True)
class PowerCutRecord:
    node: str
    dir: str
    cut_ns: int
    dropped_bytes: int
    state_after_cut: str
    writeback_dropped_bytes: int | None = None   # dirty pages written back onto the dead device (None: unknown)
    powered_on_ns: int | None = None
    mounted: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def cut_power(backend, disks, *, owner: tuple[int, int] | None = None, busy_timeout_s: float = 20.0,
              say=lambda _m: None) -> list[PowerCutRecord]:
    records = []
    for disk in disks:
        cut_ns = time.time_ns()
        got = backend.power_cut(disk)
        records.append(PowerCutRecord(disk.node, disk.name, cut_ns, int(got.get("dropped_bytes", 0)),
                                      str(got.get("state", ""))))
    for disk in disks:
        if disk.fstype == "raw":
            continue
        fs.umount(disk.mountpoint, lazy=True)
        if not fs.wait_unused(disk.block_dev, busy_timeout_s):
            raise DeviceError(f"{disk.block_dev} ({disk.node}/{disk.name}) still in use {busy_timeout_s:.0f} s after "
                              f"the unmount: its node's processes must be gone before a power cut")
        _cmd.run(["blockdev", "--flushbufs", disk.block_dev], check=False, timeout_s=60)
    for disk, rec in zip(disks, records):
        snap = backend.snapshot(disk)
        if snap is not None:
            rec.writeback_dropped_bytes = max(0, int(snap.get("dropped_bytes", 0)) - rec.dropped_bytes)
    for disk, rec in zip(disks, records):
        backend.set_mode(disk, FaultMode())
        rec.powered_on_ns = time.time_ns()
        if disk.fstype != "raw":
            fs.mount(disk.block_dev, disk.mountpoint, disk.fstype)
            disk.data_path.mkdir(exist_ok=True)
            if owner is not None:
                os.chown(disk.data_path, *owner)
            rec.mounted = True
        say(f"power cut {disk.node}/{disk.name}: {rec.dropped_bytes} unsynced bytes dropped by the drive, "
            f"{rec.writeback_dropped_bytes if rec.writeback_dropped_bytes is not None else '?'} of page-cache "
            f"writeback after the cut; mounted again")
    return records
