"""The probes of a lab disk, outside any fault: one O_DIRECT sentinel-block read or write on its
block device (in the probe area beyond the filesystem, or at a given offset), a raw O_DIRECT
read of a range, a small fsync'd write into its filesystem, and the bit difference of two
buffers. ``infra.faults.DiskFaultHandle`` dates and confirms its faults with them; the backend
tests and the lab's benchmark ask whether a device is healthy."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from infra.disks import Disk

__all__ = ["PROBE_SIZE", "PROBE_STAMP", "device_healthy", "drain_stale_errors", "probe_device", "read_direct",
           "bit_diff", "try_fs_write"]

PROBE_SIZE = 4096
PROBE_STAMP = b"jbodlab-probe".ljust(PROBE_SIZE, b"\0")


def device_healthy(disk: Disk, attempts: int = 3) -> bool:
    """O_DIRECT read and write probes succeed. Either may first report an error left on the
    block device's page-cache mapping by an earlier failed writeback (direct I/O on a block
    device flushes the range first and returns that error once, then it is cleared), so each
    op gets a few attempts."""
    return all(any(_probe_io(disk, op) is None for _ in range(attempts)) for op in ("read", "write"))


def drain_stale_errors(disk: Disk) -> None:
    """Consume writeback errors pending on the device mapping, so the inject probe reports
    an error of *this* fault and not an old one."""
    for op in ("read", "write", "read"):
        _probe_io(disk, op)


def probe_device(disk: Disk, op: str = "read", offset: int | None = None) -> int | None:
    """One O_DIRECT sentinel-block read or write on the disk's device (at ``offset``, by
    default the probe area outside the filesystem): None if ok, else errno."""
    return _probe_io(disk, op, offset)


def read_direct(dev: str, offset: int, size: int) -> bytes:
    size = -(-size // PROBE_SIZE) * PROBE_SIZE
    buf = mmap.mmap(-1, size)
    try:
        fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
        try:
            n = os.preadv(fd, [buf], offset)
        finally:
            os.close(fd)
        return bytes(buf[:n])
    finally:
        buf.close()


def bit_diff(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    return sum(bin(x ^ y).count("1") for x, y in zip(a[:n], b[:n]) if x != y)


def _probe_io(disk: Disk, op: str, offset: int | None = None) -> int | None:
    buf = mmap.mmap(-1, PROBE_SIZE)
    try:
        fd = os.open(disk.block_dev, (os.O_RDWR if op == "write" else os.O_RDONLY) | os.O_DIRECT)
    except OSError as exc:
        return exc.errno or errno.EIO
    try:
        if op == "write":
            buf.write(PROBE_STAMP)
            n = os.pwritev(fd, [buf], disk.probe_offset if offset is None else offset)
        else:
            n = os.preadv(fd, [buf], disk.probe_offset if offset is None else offset)
        return None if n == PROBE_SIZE else errno.EIO
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        os.close(fd)
        buf.close()


def try_fs_write(mountpoint: Path) -> int | None:
    path = mountpoint / ".jbodlab-enospc-probe"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x" * 65536)
            os.fsync(fd)
        finally:
            os.close(fd)
        return None
    except OSError as exc:
        return exc.errno
    finally:
        try:
            path.unlink()
        except OSError:
            pass
