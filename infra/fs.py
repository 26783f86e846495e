"""Filesystems on the lab's block devices: mkfs (leaving a probe area at the end), mount, repair."""

from __future__ import annotations

import errno
import os
import tempfile
import time
from pathlib import Path

from infra import _cmd
from infra.errors import CommandError, DeviceError
from infra.mounts import mount_at

FSTYPES = ("ext4", "xfs", "raw")  # raw: the bare block device, no filesystem, not mounted
BLOCK = 4096


def mkfs(dev: str, fstype: str, fs_bytes: int) -> None:
    """Make ``fstype`` on the first ``fs_bytes`` of ``dev`` (the rest is the probe area)."""
    if fstype == "ext4":
        argv = ["mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-m", "0",
                "-E", "lazy_itable_init=0,lazy_journal_init=1,nodiscard", dev, str(fs_bytes // BLOCK)]
    elif fstype == "xfs":
        argv = ["mkfs.xfs", "-q", "-f", "-K", "-d", f"size={fs_bytes}", dev]
    else:
        raise DeviceError(f"filesystem type {fstype!r} is not supported (choose from {', '.join(FSTYPES)})")
    try:
        _cmd.run(argv, timeout_s=300)
    except CommandError as exc:
        raise DeviceError(f"mkfs {fstype} on {dev} failed: {exc}") from exc


def mount(dev: str, target: Path, fstype: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    opts = "errors=remount-ro" if fstype == "ext4" else "defaults"
    try:
        _cmd.run(["mount", "-t", fstype, "-o", opts, dev, str(target)], timeout_s=120)
    except CommandError as exc:
        raise DeviceError(f"cannot mount {dev} on {target}: {exc}") from exc


def umount(target: Path, *, lazy: bool = False) -> None:
    if mount_at(target) is None:
        return
    argv = ["umount", "-l", str(target)] if lazy else ["umount", str(target)]
    proc = _cmd.run(argv, check=False, timeout_s=120)
    if proc.returncode != 0 and mount_at(target) is not None:
        raise DeviceError(f"cannot unmount {target}: {proc.stderr.strip()}")


def is_read_only(target: Path) -> bool:
    """True when the filesystem at ``target`` is mounted (or was remounted) read-only."""
    entry = mount_at(target)
    return entry is not None and entry.read_only


def wait_unused(dev: str, timeout_s: float) -> bool:
    """Wait until nothing holds ``dev`` (an O_EXCL open succeeds)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.close(os.open(dev, os.O_RDONLY | os.O_EXCL))
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return False
        time.sleep(0.05)


def fsck(dev: str, fstype: str) -> str:
    """Repair ``dev`` (unmounted). Returns the tool's summary; raises if it cannot be repaired.

    ext4: ``e2fsck -f -y`` (replays the journal itself). xfs: mount once to replay the log
    (``xfs_repair -L`` would throw fsynced metadata away), unmount, ``xfs_repair``; only if
    that fails, ``xfs_repair -L``.
    """
    if fstype == "ext4":
        proc = _cmd.run(["e2fsck", "-f", "-y", dev], check=False, timeout_s=600)
        # e2fsck: 0 clean, 1 errors corrected, 2 corrected + reboot advised; >=4 left uncorrected
        if proc.returncode >= 4:
            raise DeviceError(f"e2fsck could not repair {dev} (rc {proc.returncode}): {proc.stdout[-300:]}")
        return _last_line(proc) or "clean"
    replay = Path(tempfile.mkdtemp(prefix="jbodlab-replay-"))
    try:
        if _cmd.run(["mount", "-t", "xfs", dev, str(replay)], check=False, timeout_s=120).returncode == 0:
            _cmd.run(["umount", str(replay)], check=False, timeout_s=120)
    finally:
        replay.rmdir()
    proc = _cmd.run(["xfs_repair", dev], check=False, timeout_s=600)
    if proc.returncode == 0:
        return _last_line(proc) or "clean"
    proc = _cmd.run(["xfs_repair", "-L", dev], check=False, timeout_s=600)
    if proc.returncode != 0:
        raise DeviceError(f"xfs_repair -L could not repair {dev} (rc {proc.returncode}): {proc.stderr[-300:]}")
    return "log zeroed: " + (_last_line(proc) or "repaired")


def _last_line(proc) -> str:
    text = (proc.stdout or proc.stderr or "").strip()
    return text.splitlines()[-1] if text else ""
