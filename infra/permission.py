"""The ``permission`` disk fault: Kafka's own system test (``log_dir_failure_test``) fails a log
dir with ``chmod a-w -R``. A process that runs as root ignores file modes (CAP_DAC_OVERRIDE),
so the fault means something only for nodes that run as an unprivileged user
(``Topology.node_user``): their next create of a file in the dir — a new segment, a
checkpoint's temp file, the health probe's write — gets EACCES.

``revoke_write(dir)`` records every path's mode and clears its write bits; ``restore(modes)``
puts the recorded modes back (paths gone meanwhile are skipped). ``probe_as(uid, gid, dir)``
tries to create a file in the dir as that user (a forked child that drops to it): None when
it could, else the errno.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
PROBE_NAME = ".jbodlab-permission-probe"


def revoke_write(root: Path) -> dict[str, int]:
    """``chmod a-w -R root``; returns {path: previous mode} (the root included)."""
    modes: dict[str, int] = {}
    paths = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        paths += [Path(dirpath) / n for n in dirnames + filenames]
    for p in paths:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        modes[str(p)] = stat.S_IMODE(st.st_mode)
        os.chmod(p, stat.S_IMODE(st.st_mode) & ~_WRITE_BITS)
    return modes


def restore(modes: dict[str, int]) -> int:
    """Put the recorded modes back; how many paths were restored."""
    done = 0
    for path, mode in modes.items():
        try:
            os.chmod(path, mode)
            done += 1
        except FileNotFoundError:
            continue
    return done


def probe_as(uid: int, gid: int, directory: Path) -> int | None:
    """Create (and remove) a file in ``directory`` as ``uid``/``gid``: None if it worked, else
    errno. A forked child drops to the user and reports the errno as its exit status (only
    ``os`` calls between fork and exit: safe in a threaded process)."""
    path = os.path.join(directory, PROBE_NAME)
    pid = os.fork()
    if pid == 0:   # the child
        code = 0
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            os.unlink(path)
        except OSError as exc:
            code = exc.errno or 5
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's code
            code = 5
        os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code or None
