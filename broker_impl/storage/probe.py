"""Log dir health probe (beyond Kafka: a disk that hangs or fails silently is found even when idle): ``probe(dir_path)``.

Writes one 4 KiB block to ``<dir>/.jbodlab-probe`` with ``O_DIRECT`` (so the write reaches
the device instead of the page cache) and fsyncs it. File systems without O_DIRECT (tmpfs,
some overlays: ``EINVAL`` at open or write) fall back to a buffered write + fsync. Any other
failure raises ``OSError``: the caller (``LogManager.probe_dir``) routes it through the dir
failure channel with op ``"probe"``. Cost: one open, one 4 KiB write, one fsync, one close.
"""

from __future__ import annotations

import errno
import mmap
import os

PROBE_FILE = ".jbodlab-probe"
BLOCK = 4096
_NO_DIRECT = (errno.EINVAL, errno.EOPNOTSUPP)


def _aligned_block(stamp: bytes) -> mmap.mmap:
    buf = mmap.mmap(-1, BLOCK)  # page-aligned anonymous memory, as O_DIRECT requires
    buf.write(stamp[:BLOCK])
    return buf


def _write_fsync(path: str, flags: int, data) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        n = os.pwrite(fd, data, 0)
        if n != BLOCK:
            raise OSError(errno.EIO, f"short probe write: {n} of {BLOCK} bytes", path)
        os.fsync(fd)
    finally:
        os.close(fd)


def probe(dir_path: str, stamp: bytes = b"jbodlab probe\n") -> bool:
    """Write+fsync a small file in ``dir_path``; True if O_DIRECT was used. Raises OSError."""
    path = os.path.join(dir_path, PROBE_FILE)
    buf = _aligned_block(stamp)
    try:
        direct = getattr(os, "O_DIRECT", 0)
        if direct:
            try:
                _write_fsync(path, direct, buf)
                return True
            except OSError as exc:
                if exc.errno not in _NO_DIRECT:
                    raise
        _write_fsync(path, 0, buf)
        return False
    finally:
        buf.close()
