"""Host prerequisites: Debian packages, the Docker engine, fusectl.

``ensure_packages()`` installs what is missing with apt-get; ``ensure_dockerd()`` starts a
daemon (log in ``/var/log/jbodlab/dockerd.log``) when none answers and waits for its socket;
``ensure_fusectl()`` mounts the FUSE control filesystem (not mounted on these hosts).
Every step reports what it does through the ``say`` callback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from infra import _cmd
from infra.errors import SetupError
from infra.naming import LOG_ROOT

Say = Callable[[str], None]

HOST_PACKAGES = (
    "docker.io", "debootstrap", "fuse3", "libfuse3-3", "xfsprogs", "e2fsprogs", "kcat",
    "iproute2", "iptables", "util-linux", "psmisc", "procps", "kmod",
    "gcc", "libc6-dev", "pkg-config", "libfuse3-dev",   # the native FUSE daemon (infra.faultfs_build)
)
DOCKER_SOCKET = Path("/var/run/docker.sock")
FUSECTL_DIR = Path("/sys/fs/fuse/connections")


def _quiet(_msg: str) -> None:
    pass


def missing_packages(packages: tuple[str, ...] = HOST_PACKAGES) -> list[str]:
    missing = []
    for name in packages:
        proc = _cmd.run(["dpkg-query", "-W", "-f=${Status}", name], check=False)
        if "install ok installed" not in proc.stdout:
            missing.append(name)
    return missing


def ensure_packages(say: Say = _quiet, packages: tuple[str, ...] = HOST_PACKAGES) -> list[str]:
    """Install missing Debian packages; return what was installed."""
    missing = missing_packages(packages)
    if not missing:
        say(f"Debian packages present ({len(packages)} checked)")
        return []
    say(f"installing Debian packages: {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _cmd.run(["apt-get", "update", "-qq"], timeout_s=600, env=env)
    _cmd.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], timeout_s=1200, env=env)
    return missing


def docker_answers() -> bool:
    return DOCKER_SOCKET.exists() and _cmd.ok(["docker", "version", "--format", "{{.Server.Version}}"], timeout_s=15)


def ensure_dockerd(say: Say = _quiet, wait_s: float = 60.0) -> None:
    """Start dockerd when no daemon answers; wait until it does."""
    if docker_answers():
        say("Docker engine running")
        return
    if shutil.which("dockerd") is None:
        raise SetupError("dockerd not found: install the Debian package docker.io")
    LOG_ROOT.mkdir(parents=True, exist_ok=True)
    log_path = LOG_ROOT / "dockerd.log"
    say(f"starting dockerd (log: {log_path})")
    with open(log_path, "ab") as log_file:
        subprocess.Popen(["dockerd"], stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if docker_answers():
            say("Docker engine answers on /var/run/docker.sock")
            return
        time.sleep(0.5)
    tail = log_path.read_text(errors="replace").splitlines()[-5:]
    raise SetupError(f"dockerd did not answer within {wait_s:.0f} s; last log lines: {' | '.join(tail)}")


def fusectl_mounted() -> bool:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == str(FUSECTL_DIR):
            return True
    return False


def ensure_fusectl(say: Say = _quiet) -> None:
    """Mount fusectl so connections can be tuned (max_background) and aborted."""
    if fusectl_mounted():
        return
    say(f"mounting fusectl on {FUSECTL_DIR}")
    proc = _cmd.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL_DIR)], check=False)
    if proc.returncode != 0 and not fusectl_mounted():
        raise SetupError(f"cannot mount fusectl on {FUSECTL_DIR}: {proc.stderr.strip()}")


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache() -> None:
    """Drop the kernel's clean page cache, dentries and inodes (``drop_caches`` 3; dirty pages
    stay). A node restarted after its disk died then finds that disk cold: what it reads at
    start-up (``meta.properties``, checkpoints) reaches the failed device instead of a cached
    copy, as after a reboot. Needs root."""
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        raise SetupError(f"cannot drop the page cache ({DROP_CACHES}): {exc.strerror or exc}") from exc
