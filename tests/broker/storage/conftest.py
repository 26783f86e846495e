"""Fixtures of the storage tests: formatted log dirs, a failure recorder, and a real ext4 file
system on a loop device that can be shut down (every later I/O fails with EIO)."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import struct
import subprocess
import tempfile
import uuid

import pytest

from kafka_common import ids, meta_properties as mp
from kafka_runtime import fsutil

CLUSTER_ID = ids.to_base64(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF))
NODE_ID = 1
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


class FailureRecorder:
    """The ``on_failure(dir_path, errno, op)`` callback, recording every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def __call__(self, dir_path: str, errno: int, op: str) -> None:
        self.calls.append((dir_path, errno, op))


@pytest.fixture
def failures() -> FailureRecorder:
    return FailureRecorder()


def format_dir(path: str, *, node_id: int = NODE_ID, cluster_id: str = CLUSTER_ID,
               directory_id: uuid.UUID | None | str = "random", rng: random.Random | None = None) -> uuid.UUID | None:
    os.makedirs(path, exist_ok=True)
    if directory_id == "random":
        directory_id = ids.random_directory_id(rng or random.Random(path))
    fsutil.atomic_write(os.path.join(path, mp.FILE_NAME),
                        mp.render(mp.MetaProperties(node_id=node_id, cluster_id=cluster_id,
                                                    directory_id=directory_id)).encode())
    return directory_id


@pytest.fixture
def log_dirs(tmp_path):
    """Three formatted data dirs (the first is also the metadata dir)."""
    paths = [str(tmp_path / f"d{i}") for i in range(3)]
    for p in paths:
        format_dir(p)
    return paths


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


class LoopFs:
    """A small ext4 file system on a loop device, mounted under /tmp/jbodtest-*/mnt."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="jbodtest-", dir="/tmp")
        self.image = os.path.join(self.root, "disk.img")
        self.mnt = os.path.join(self.root, "mnt")
        self.dev = ""
        self.mounted = False

    def setup(self, size_mb: int = 32) -> None:
        with open(self.image, "wb") as f:
            f.truncate(size_mb << 20)  # sparse
        self.dev = _run("losetup", "-f", "--show", self.image)
        _run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", self.dev)
        os.mkdir(self.mnt)
        _run("mount", "-t", "ext4", self.dev, self.mnt)
        self.mounted = True

    def shutdown(self) -> None:
        """EXT4_IOC_SHUTDOWN with NOLOGFLUSH: from now on every I/O on the fs fails with EIO."""
        fd = os.open(self.mnt, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def _close_own_fds(self) -> None:
        """A failed test may leave log files open; close this process's fds under the mount so
        that the umount is not busy."""
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if target.startswith(self.mnt + "/") or target == self.mnt:
                try:
                    os.close(int(name))
                except OSError:
                    pass

    def cleanup(self) -> None:
        if self.mounted:
            self._close_own_fds()
            if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            self.mounted = False
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = ""
        shutil.rmtree(self.root, ignore_errors=True)


def _loop_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for loop devices and mount"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control (loop devices unavailable)"
    return None


@pytest.fixture
def loop_fs(request):
    reason = _loop_skip_reason()
    if reason:
        pytest.skip(reason)
    fs = LoopFs()
    request.addfinalizer(fs.cleanup)
    fs.setup()
    return fs
