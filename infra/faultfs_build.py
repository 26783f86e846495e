"""Build the native FUSE fault daemon (``infra/faultfs/*.c``) once per source version.

The binary lives outside the git tree, in ``<cache root>/faultfs/jbodlab-faultfs-<key>``
(``/var/cache/jbodlab/`` unless ``JBODLAB_CACHE_ROOT`` says otherwise); ``<key>`` hashes the
C sources and headers and the compiler flags, so an edited source builds a new binary and an
unchanged one costs a few file hashes (``jbodlab setup`` and ``FuseDaemon.start()`` both call
``ensure_built``). Builds are serialised by a lock file and land atomically (compile to a
temporary name, rename); after a successful build only the ``KEEP_BINARIES`` newest binaries
stay (worktrees of other versions on the same host keep theirs instead of rebuilding in turn). Needs a C
compiler, ``pkg-config`` and ``libfuse3-dev``; when any is missing ``BuildError`` says which,
and ``FuseDaemon(impl="auto")`` falls back to the Python daemon (``infra.fusefs``).
``python -m infra.faultfs_build`` builds and prints the binary's path.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from infra.errors import SetupError
from infra.naming import CACHE_ROOT

SOURCE_DIR = Path(__file__).resolve().parent / "faultfs"
SOURCE = SOURCE_DIR / "faultfs.c"      # the daemon's main file; every *.c beside it is compiled with it
BUILD_DIR = CACHE_ROOT / "faultfs"
KEEP_BINARIES = 4
BINARY_PREFIX = "jbodlab-faultfs-"
CFLAGS = ("-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-pthread")


class BuildError(SetupError):
    """The native daemon cannot be built on this host (the message says why)."""


def sources() -> list[Path]:
    """The C files compiled together: SOURCE and the other ``*.c`` of its directory."""
    return [SOURCE] + sorted(p for p in SOURCE.parent.glob("*.c") if p != SOURCE)


def _key() -> str:
    h = hashlib.sha256()
    for path in sources() + sorted(SOURCE.parent.glob("*.h")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update("\0".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def binary_path() -> Path:
    """Where the binary of the current source is (built or not)."""
    return BUILD_DIR / f"{BINARY_PREFIX}{_key()}"


def is_native_daemon(argv0: str) -> bool:
    """True for the argv[0] of a native daemon (how cleanup recognises one in /proc)."""
    return os.path.basename(argv0).startswith(BINARY_PREFIX)


def _compiler() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise BuildError("no C compiler (apt-get install gcc libc6-dev)")


def _fuse3_flags() -> list[str]:
    if shutil.which("pkg-config") is None:
        raise BuildError("no pkg-config (apt-get install pkg-config)")
    proc = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"no fuse3 headers for pkg-config (apt-get install libfuse3-dev): {proc.stderr.strip()}")
    return proc.stdout.split()


def ensure_built(say: Callable[[str], None] | None = None) -> Path:
    """The path of an up-to-date binary, compiling it if needed; BuildError if impossible."""
    target = binary_path()
    if os.access(target, os.X_OK):
        return target
    try:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        lock = open(BUILD_DIR / ".build.lock", "w")  # noqa: SIM115 - held across the build
    except OSError as exc:
        raise BuildError(f"cannot use build dir {BUILD_DIR}: {exc}") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(target, os.X_OK):  # built by another process meanwhile
            return target
        cc, flags = _compiler(), _fuse3_flags()
        if say:
            say(f"building the native FUSE daemon {target.name} ({cc})")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        argv = [cc, *CFLAGS, "-o", str(tmp), *map(str, sources()), *flags, "-lm"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
                raise BuildError(f"{' '.join(argv)} exited {proc.returncode}: {tail}")
            os.replace(tmp, target)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BuildError(f"compiling {SOURCE.parent.name}/*.c: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        older = sorted((p for p in BUILD_DIR.glob(f"{BINARY_PREFIX}*") if p != target),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        for old in older[KEEP_BINARIES - 1:]:
            old.unlink(missing_ok=True)  # a daemon still running from it keeps its inode
    return target


if __name__ == "__main__":
    print(ensure_built(say=print))
