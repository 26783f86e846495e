"""Shared loop-device fixture: a small ext4 file system on a real loop device that can be
failed for real (``EXT4_IOC_SHUTDOWN``: every later I/O on it fails with EIO).

Generalises the ``LoopFs`` helper of ``tests/broker/storage/conftest.py`` so that other test
areas and the benchmarks can use it:

* the image is a sparse file in ``/tmp/jbodtest-*/disk.img`` (the ``jbodtest-`` prefix of
  docs/design.md, so a leak is recognisable), attached with ``losetup -f --show``,
  formatted with ``mkfs.ext4 -q`` and mounted either at ``/tmp/jbodtest-*/mnt`` or at a
  mount point the caller names (e.g. a broker's ``data2`` dir before ``kraft-storage
  format`` runs);
* ``shutdown()`` returns the CLOCK_REALTIME ns just before the ioctl (the injection time,
  comparable with the node event logs' ``ts_ns``);
* ``cleanup()`` never raises: it closes this process's fds under the mount, unmounts
  (``umount``, else ``umount -l``), detaches the loop device and removes the temp dir. Kill
  the processes that use the mount first, then call it (fixture finalisers do).

Use from a test module::

    from loopdev import loop_fs_factory  # noqa: F401  (a pytest fixture)

    def test_x(loop_fs_factory):
        fs = loop_fs_factory(mountpoint=some_dir, size_mb=32)
        ...
        fs.shutdown()

or stand-alone (benchmarks): ``fs = LoopFs(...); fs.setup(); try: … finally: fs.cleanup()``.
Tests skip with :func:`skip_reason` only where the host lacks root or loop devices.

Also here: ``small_tmpfs`` (a 512 KiB tmpfs fixture) and :func:`fill_up`, for a dir whose
file system runs full (ENOSPC) rather than failing with EIO.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import tempfile
import time

import pytest

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_DEFAULT = 0
EXT4_GOING_FLAGS_LOGFLUSH = 1
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
PREFIX = "jbodtest-"
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")


class LoopDevError(RuntimeError):
    """A step of building the loop file system failed (names the command and its stderr)."""


def _run(*cmd: str, timeout_s: float = 60.0) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise LoopDevError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip()


def skip_reason() -> str | None:
    """Why this host cannot run loop-device tests, or None if it can."""
    if os.geteuid() != 0:
        return "needs root for loop devices and mount"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control (loop devices unavailable)"
    return None


def lab_disk_skip_reason() -> str | None:
    """Why this host cannot make the lab's FUSE-served disks (root, loop devices, FUSE), or None."""
    if os.geteuid() != 0:
        return "needs root (loop devices, FUSE, mounts)"
    from infra import capability
    caps = capability.probe()
    if not caps.loop:
        return "no loop devices on this host"
    if not caps.fuse:
        return caps.fuse_reason
    return None


class LoopFs:
    """A small ext4 file system on a loop device (image: sparse file under /tmp/jbodtest-*)."""

    def __init__(self, *, size_mb: int = 32, mountpoint: str | None = None, prefix: str = PREFIX,
                 mkfs_args: tuple[str, ...] = ()) -> None:
        if size_mb < 8:
            raise ValueError(f"size_mb={size_mb}: ext4 with a journal needs at least 8 MiB")
        if not prefix.startswith(PREFIX):
            raise ValueError(f"prefix={prefix!r}: must start with {PREFIX!r} (leak detection relies on it)")
        self.size_mb = size_mb
        self.mkfs_args = tuple(mkfs_args)
        self.root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.image = os.path.join(self.root, "disk.img")
        self.mnt = os.path.abspath(mountpoint) if mountpoint else os.path.join(self.root, "mnt")
        self.dev = ""
        self.mounted = False
        self.shutdown_ns: int | None = None

    def setup(self) -> "LoopFs":
        """Sparse image → loop device → ext4 → mounted. On failure everything made so far is
        undone before the error propagates."""
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.size_mb << 20)  # sparse
            self.dev = _run("losetup", "-f", "--show", self.image)
            _run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", *self.mkfs_args, self.dev)
            os.makedirs(self.mnt, exist_ok=True)
            if os.listdir(self.mnt):
                raise LoopDevError(f"mount point {self.mnt} is not empty")
            _run("mount", "-t", "ext4", self.dev, self.mnt)
            self.mounted = True
            # a fresh ext4 has lost+found: a Kafka log dir must hold only what the broker
            # writes (an unknown dir there would be loaded as a partition log)
            lost = os.path.join(self.mnt, "lost+found")
            if os.path.isdir(lost):
                os.rmdir(lost)
        except BaseException:
            self.cleanup()
            raise
        return self

    def shutdown(self, flags: int = EXT4_GOING_FLAGS_NOLOGFLUSH) -> int:
        """EXT4_IOC_SHUTDOWN on the mount root: from now on every I/O on the fs fails with EIO.
        Returns time.time_ns() taken just before the ioctl."""
        if not self.mounted:
            raise LoopDevError(f"{self.mnt} is not mounted")
        fd = os.open(self.mnt, os.O_RDONLY)
        try:
            self.shutdown_ns = time.time_ns()
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", flags))
        finally:
            os.close(fd)
        return self.shutdown_ns

    def _close_own_fds(self) -> None:
        """A failed test may leave files open in this process; close them so that the umount
        is not busy."""
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if target == self.mnt or target.startswith(self.mnt + "/"):
                try:
                    os.close(int(name))
                except OSError:
                    pass

    def is_mounted(self) -> bool:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            return any(line.split()[4] == self.mnt for line in f)

    def cleanup(self) -> None:
        """Unmount, detach, remove — never raises, safe to call twice."""
        if self.mounted or (self.dev and self.is_mounted()):
            self._close_own_fds()
            if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            self.mounted = False
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = ""
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def loop_fs_factory(request):
    """``make(mountpoint=None, size_mb=32) -> LoopFs`` (set up and mounted); every one made
    is cleaned up in a finaliser, even when the test fails. Request this fixture BEFORE the
    fixtures that start processes using the mount, so those are torn down (killed) first."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    made: list[LoopFs] = []

    def make(mountpoint: str | None = None, size_mb: int = 32) -> LoopFs:
        fs = LoopFs(size_mb=size_mb, mountpoint=mountpoint)
        made.append(fs)
        return fs.setup()

    def finish() -> None:
        for fs in reversed(made):
            fs.cleanup()

    request.addfinalizer(finish)
    return make


@pytest.fixture
def loop_fs(loop_fs_factory):
    """One loop file system mounted under /tmp/jbodtest-*/mnt."""
    return loop_fs_factory()


@pytest.fixture
def loop_fs_64mb(loop_fs_factory):
    """One 64 MiB loop file system (room for a broker dir under load); modules that want it
    as their ``loop_fs`` import it under that name (pytest names a fixture by the attribute)."""
    return loop_fs_factory(size_mb=64)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 512 KiB tmpfs (e.g. for a metadata dir that fills up; needs root + mount, skipped
    otherwise)."""
    path = tmp_path / "tiny"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "jbodtest-tmpfs", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {out.stderr.strip()}")
    yield path
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_up(path) -> None:
    """Write the file ``path`` until its file system is full (ENOSPC), down to the last byte."""
    with open(path, "wb", buffering=0) as f:
        for size in (65536, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
