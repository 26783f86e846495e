"""``lose-unsynced`` on the dm backend: dm-log-writes, and the replay of what was durable.

dm-log-writes (``0 SZ log-writes <dev> <logdev>``) passes every write to ``dev`` and appends
it to ``logdev`` in the order the writes completed, with the flushes and FUA writes marked.
A power cut is then: stop taking writes, take the image as it was when logging began (a
copy made at inject, the device suspended), replay onto it every logged entry up to the last
flush — and the FUA writes after it, which bypass the cache — and put the result back as the
device's data. What was written but never flushed is gone, exactly as on a drive whose volatile
cache lost power.

The log format (the kernel's ``drivers/md/dm-log-writes.c``, xfstests ``src/log-writes``):
a super block in the first sector (``magic`` 0x6a736677736872, ``version`` 1,
``nr_entries``, ``sectorsize``; little-endian), then per entry one sector holding
``sector, nr_sectors, flags, data_len`` (u64 each, the rest zero but a MARK's text) followed
by ``nr_sectors`` sectors of data (none for a DISCARD). The super's count may lag the entries
written, so :func:`parse_log` reads entries until one is not valid (all zero: the rest of a
fresh, sparse log file). Pure file I/O: the parse, the durable prefix and the replay are
tested here with a log this module writes (:func:`write_log`); the device part lives in
``infra.dm``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from infra.errors import InfraError

MAGIC = 0x6A736677736872
VERSION = 1
FLUSH, FUA, DISCARD, MARK, METADATA = 1, 2, 4, 8, 16
_SUPER = struct.Struct("<QQQI")
_ENTRY = struct.Struct("<QQQQ")


class LogFormatError(InfraError, ValueError):
    """The file is not a dm-log-writes log (or is cut short)."""


@dataclass(frozen=True, slots=True)
class Entry:
    sector: int          # where the write went, in log sectors
    nr_sectors: int
    flags: int
    data_offset: int     # where its data is in the log file

    @property
    def nbytes(self) -> int:
        return 0 if self.flags & DISCARD else self.nr_sectors


def parse_log(path: str) -> tuple[int, list[Entry]]:
    """(sector size, entries) of a log file."""
    with open(path, "rb") as fh:
        head = fh.read(_SUPER.size)
        if len(head) < _SUPER.size:
            raise LogFormatError(f"{path}: no log super block")
        magic, version, _n, sectorsize = _SUPER.unpack(head)
        if magic != MAGIC or version != VERSION or sectorsize < _ENTRY.size or sectorsize % 512:
            raise LogFormatError(f"{path}: not a dm-log-writes log (magic {magic:#x}, version {version}, "
                                 f"sector size {sectorsize})")
        entries = []
        pos = sectorsize
        size = os.fstat(fh.fileno()).st_size
        while pos + sectorsize <= size:
            fh.seek(pos)
            sector, nr, flags, _dlen = _ENTRY.unpack(fh.read(_ENTRY.size))
            if not flags and not nr:
                break                     # the zeros after the last entry
            data = 0 if flags & DISCARD else nr * sectorsize
            if pos + sectorsize + data > size:
                raise LogFormatError(f"{path}: entry at {pos} is cut short")
            entries.append(Entry(sector, nr, flags, pos + sectorsize))
            pos += sectorsize + data
    return sectorsize, entries


def durable(entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(what a power cut keeps, what it loses): every entry up to the last flush, and FUA
    writes after it; the other writes after the last flush are lost."""
    last = max((i for i, e in enumerate(entries) if e.flags & FLUSH), default=-1)
    kept = entries[:last + 1] + [e for e in entries[last + 1:] if e.flags & FUA]
    lost = [e for e in entries[last + 1:] if not e.flags & FUA]
    return kept, lost


def replay(log_path: str, sectorsize: int, entries: list[Entry], target_fd: int) -> int:
    """Write the entries' data (discards as zeros) onto ``target_fd``; bytes written."""
    done = 0
    with open(log_path, "rb") as fh:
        for e in entries:
            if not e.nr_sectors or e.flags & MARK:
                continue
            n = e.nr_sectors * sectorsize
            if e.flags & DISCARD:
                data = b"\0" * n
            else:
                fh.seek(e.data_offset)
                data = fh.read(n)
            os.pwrite(target_fd, data, e.sector * sectorsize)
            done += n
    return done


def write_log(path: str, writes, *, sectorsize: int = 4096) -> None:
    """A log in the kernel's format (for tests): ``writes`` = ``(sector, data, flags)``."""
    with open(path, "wb") as fh:
        fh.write(_SUPER.pack(MAGIC, VERSION, len(writes), sectorsize).ljust(sectorsize, b"\0"))
        for sector, data, flags in writes:
            nr = -(-len(data) // sectorsize)
            fh.write(_ENTRY.pack(sector, nr, flags, 0).ljust(sectorsize, b"\0"))
            if not flags & DISCARD:
                fh.write(data.ljust(nr * sectorsize, b"\0"))
