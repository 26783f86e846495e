"""Fixtures of the infra tests: capability skips (one-line reasons) and the node image."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest


def system_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts, docker)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices on this host"
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        return "no docker engine installed (apt-get install docker.io)"
    return None


def fuse_skip_reason() -> str | None:
    from infra import capability
    caps = capability.probe()
    return None if caps.fuse else caps.fuse_reason


def cpu_group_skip_reason() -> str | None:
    """Why the lab cannot give its containers a CPU cgroup here (infra.cpu_group), or None."""
    from infra import cpu_group
    from infra.docker import Docker
    driver = Docker().cgroup_driver()
    if driver != "cgroupfs":
        return f"docker's cgroup driver is {driver}, not cgroupfs"
    if cpu_group._cpu_hierarchy(cpu_group.CGROUP_ROOT) is None:
        return f"no cpu controller under {cpu_group.CGROUP_ROOT}"
    return None


@pytest.fixture(scope="session")
def node_image() -> str:
    reason = system_skip_reason()
    if reason:
        pytest.skip(reason)
    from infra import host, image
    host.ensure_fusectl()
    host.ensure_dockerd()
    return image.ensure_node_image().node_image


# A process in a container: append 4 KiB + fsync every INTERVAL to PATH; report the first error.
WRITER = r"""
import os, sys, time
path, interval = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = 0
while True:
    try:
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
        n += 1
        if n == 5:
            print("READY", time.time_ns(), flush=True)
    except OSError as e:
        print("ERR", time.time_ns(), e.errno, n, flush=True)
        sys.exit(0)
    time.sleep(interval)
"""

WRITER_INTERVAL_S = 0.01


def start_writer(lab, node: str, dirname: str, filename: str = "log") -> str:
    path = f"{lab.container_log_dir(node, dirname)}/{filename}"
    return lab.start_node(node, ["python3", "-c", WRITER, path, str(WRITER_INTERVAL_S)])


def wait_log(lab, container: str, word: str, timeout_s: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in lab.docker.logs(container).splitlines():
            if line.startswith(word):
                return line.split()
        time.sleep(0.02)
    raise AssertionError(f"{container} never printed {word}; logs: {lab.docker.logs(container)[-500:]}")


def container_python(lab, node: str, code: str, timeout_s: float = 30.0):
    return lab.docker.exec(lab.container_name(node), ["python3", "-c", code], timeout_s=timeout_s)
