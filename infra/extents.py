"""Where a file of a lab disk lives on the disk's backing image, and its page cache.

``image_ranges(disk, paths)`` maps files inside a mounted lab disk to the byte ranges of the
disk's backing image that hold their data: FIEMAP (``FS_IOC_FIEMAP`` with
``FIEMAP_FLAG_SYNC``, so delayed allocations are written and placed first) gives each extent's
physical offset on the filesystem's block device; the block device is the loop device (or a
dm-linear at offset 0 on it), which starts ``loop/offset`` bytes into the image. A fault
limited to those ranges (``infra.faultmodes``) meets only that file's blocks — as a bad
sector does, at the place they had when it was resolved: a file rewritten elsewhere later (a
checkpoint replaced by rename) leaves the fault on its old blocks.

The guest's page cache sits above the device: a read of a cached page never reaches the
fault. ``drop_cached_pages(path)`` evicts a file's clean pages (``POSIX_FADV_DONTNEED``; the
host and the containers share one kernel, so the node's next read goes to the device) and
``resident_pages(path)`` counts what is cached (``mincore``), so a fault record can say what
it dropped and a test can check it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from infra.errors import FaultError

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
EXTENT_LAST = 0x1
EXTENT_UNKNOWN = 0x2
EXTENT_DELALLOC = 0x4
EXTENT_INLINE = 0x200
_HEAD = struct.Struct("=QQIIII")            # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT = struct.Struct("=QQQQQIIII")       # fe_logical, fe_physical, fe_length, reserved64[2], fe_flags, reserved[3]
BATCH = 256
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True, slots=True)
class Extent:
    logical: int       # offset in the file
    physical: int      # offset on the filesystem's block device
    length: int
    flags: int


def fiemap(path: str | Path) -> list[Extent]:
    """The file's extents (synced first). OSError when the filesystem has no FIEMAP."""
    out: list[Extent] = []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        start, flags = 0, FIEMAP_FLAG_SYNC
        while True:
            buf = bytearray(_HEAD.size + BATCH * _EXTENT.size)
            _HEAD.pack_into(buf, 0, start, (1 << 64) - 1 - start, flags, 0, BATCH, 0)
            fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
            mapped = _HEAD.unpack_from(buf, 0)[3]
            last = None
            for i in range(mapped):
                lg, ph, ln, _r1, _r2, fl, *_ = _EXTENT.unpack_from(buf, _HEAD.size + i * _EXTENT.size)
                last = Extent(lg, ph, ln, fl)
                out.append(last)
            if mapped < BATCH or last is None or last.flags & EXTENT_LAST:
                return out
            start, flags = last.logical + last.length, 0
    finally:
        os.close(fd)


def loop_offset(loop_dev: str) -> int:
    """Where the loop device starts in its backing file (``/sys/block/loopN/loop/offset``)."""
    try:
        return int((Path("/sys/block") / Path(loop_dev).name / "loop" / "offset").read_text())
    except (OSError, ValueError):
        return 0


def image_ranges(disk, paths, *, to_file_end: bool = False) -> tuple[tuple[int, int], ...]:
    """Byte ranges of ``disk``'s backing image holding the data of ``paths`` (host paths inside
    its mount), sorted and merged: whole blocks, or with ``to_file_end`` only the bytes the
    files hold now (an extent past a file's size dropped, the last one cut at it). FaultError
    when a file is missing, outside the disk, has no blocks yet, or its blocks are not placed
    (inline data, an unknown extent)."""
    from infra.faultmodes import normalize_ranges
    base = loop_offset(disk.loop_dev)
    ranges = []
    for p in paths:
        path = Path(p)
        try:
            path.resolve().relative_to(disk.mountpoint.resolve())
        except ValueError:
            raise FaultError(f"{path} is not on disk {disk.node}/{disk.name} ({disk.mountpoint})") from None
        try:
            extents = fiemap(path)
        except FileNotFoundError:
            raise FaultError(f"{path}: no such file on {disk.node}/{disk.name}") from None
        except OSError as exc:
            raise FaultError(f"{path}: FIEMAP failed ({exc}): the filesystem cannot say where the file lies") from None
        if not extents:
            raise FaultError(f"{path}: the file has no blocks on the device (empty)")
        size = os.path.getsize(path) if to_file_end else None
        for e in extents:
            if e.flags & (EXTENT_UNKNOWN | EXTENT_DELALLOC | EXTENT_INLINE):
                raise FaultError(f"{path}: extent at {e.logical} is not placed on the device (flags {e.flags:#x})")
            length = e.length if size is None else min(e.length, size - e.logical)
            if length > 0:
                ranges.append((base + e.physical, base + e.physical + length))
    return normalize_ranges(ranges)


def drop_cached_pages(path: str | Path) -> None:
    """Evict the file's clean pages from the page cache (dirty ones stay until written back)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_pages(path: str | Path) -> tuple[int, int]:
    """(pages of the file in the page cache, pages of the file)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)   # private: never written, mincore reads the cache
        try:
            vec = (ctypes.c_ubyte * pages)()
            addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore: {os.strerror(err)}", str(path))
            resident = sum(v & 1 for v in vec)
            del addr
        finally:
            try:
                mm.close()
            except BufferError:   # a ctypes view still alive: the mapping goes with the process
                pass
    return resident, pages
