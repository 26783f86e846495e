"""The lab's FUSE fault filesystem (a daemon: ``python -m infra.fusefs``).

The fallback implementation: ``infra/faultfs/faultfs.c`` is its native twin (same behaviour,
same control protocol) and runs by default; ``FuseDaemon(impl=...)`` chooses.

It serves the backing image files of one lab (``--backing DIR``) at ``--mount DIR``; the lab
attaches a loop device (``--direct-io=on``) to each served file and puts a real filesystem on
it, so a fault here is a real block-layer EIO under ext4/xfs. Every image has a
``FaultMode`` (see ``infra.faultmodes``), switched at run time through a Unix socket
(``--socket``, JSON lines: ``{"op": "set", "image": NAME, "mode": {...}}`` → ``{"ok": true}``;
ops ``ping``, ``set``, ``get``, ``list``, ``rearm`` (forget the first hit), ``power-cut`` (drop
the volatile cache of ``lose-unsynced``, the image ``off``)). What each mode does to an op is
``infra.fault_image.ImageState``. Runs on libfuse3 (mfusepy with
``FUSE_LIBRARY_NAME=fuse3``: async DIO, 1 MiB requests) with 64 worker threads, so a delayed
request stalls only itself. ``auto_unmount``: if the daemon dies, the mount goes away.

**Host sync.** A guest flush (ext4's journal commits and fsyncs send them; the loop device
turns each into an fsync of the served file) reaches this daemon and passes the image's fault
mode like any other request: it fails, is delayed or succeeds. Whether the daemon then also
makes the backing file durable on the host (``fdatasync``) is ``--host-sync``: off by default.
The lab's backing files are scratch — made per lab, never read after a host crash — so the
host sync bought nothing but cost: at S15's load the guests flush ~2,000 times a second, and
syncing each on the host took the daemon and the host's journal a third of a core and put
the host disk's commit latency into every guest fsync (baseline produce p99 2.4–2.6 s against
0.4–0.5 s without). The disks thus model drives whose write cache survives power loss: what
was written is durable once written, and a flush still travels the whole guest I/O stack.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import socketserver
import stat
import sys
import threading
from pathlib import Path

from infra.fault_image import FaultImageError, ImageState
from infra.faultmodes import FaultMode

log = logging.getLogger("jbodlab.fusefs")


def _fuse_error(code: int) -> Exception:
    import mfusepy
    return mfusepy.FuseOSError(code)


def make_operations(backing: Path, states: dict[str, ImageState], *, host_sync: bool = False):
    import mfusepy

    class FaultFS(mfusepy.Operations):
        use_ns = True

        def _name(self, path: str) -> str:
            name = path.lstrip("/")
            if "/" in name or not name:
                raise mfusepy.FuseOSError(errno.ENOENT)
            return name

        def _state(self, name: str) -> ImageState:
            st = states.get(name)
            if st is None:
                st = states.setdefault(name, ImageState(str(backing / name)))
            return st

        def getattr(self, path, fh=None):
            if path == "/":
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
            try:
                st = os.lstat(backing / self._name(path))
            except FileNotFoundError:
                raise mfusepy.FuseOSError(errno.ENOENT) from None
            if not stat.S_ISREG(st.st_mode):
                raise mfusepy.FuseOSError(errno.ENOENT)
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": st.st_size,
                    "st_uid": st.st_uid, "st_gid": st.st_gid, "st_atime": st.st_atime_ns,
                    "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks}

        def readdir(self, path, fh):
            if path != "/":
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            return [".", ".."] + sorted(p.name for p in backing.iterdir() if p.is_file())

        def open(self, path, flags):
            name = self._name(path)
            self._state(name)
            try:
                return os.open(backing / name, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                raise mfusepy.FuseOSError(errno.ENOENT) from None

        def read(self, path, size, offset, fh):
            try:
                return self._state(self._name(path)).read(fh, size, offset)
            except FaultImageError:
                raise mfusepy.FuseOSError(errno.EIO) from None

        def write(self, path, data, offset, fh):
            try:
                return self._state(self._name(path)).write(fh, bytes(data), offset)
            except FaultImageError:
                raise mfusepy.FuseOSError(errno.EIO) from None

        def fsync(self, path, datasync, fh):
            try:
                self._state(self._name(path)).fsync(fh, bool(datasync), host_sync)
            except FaultImageError:
                raise mfusepy.FuseOSError(errno.EIO) from None
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            os.close(fh)
            return 0

        def truncate(self, path, length, fh=None):
            os.truncate(backing / self._name(path), length)
            return 0

        def statfs(self, path):
            sv = os.statvfs(backing)
            return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_namemax")}

    return FaultFS()


class _ControlHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for raw in self.rfile:
            try:
                reply = self.server.dispatch(json.loads(raw))  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - every bad request gets a clear answer
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write((json.dumps(reply) + "\n").encode())
            self.wfile.flush()


class ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, backing: Path, states: dict[str, ImageState]) -> None:
        if path.exists():
            path.unlink()
        super().__init__(str(path), _ControlHandler)
        self.backing = backing
        self.states = states

    def dispatch(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "list":
            return {"ok": True, "images": {n: s.snapshot() for n, s in sorted(self.states.items())}}
        name = req.get("image")
        if not isinstance(name, str) or "/" in name or not (self.backing / name).is_file():
            return {"ok": False, "error": f"image {name!r} is not served (no such file in {self.backing})"}
        state = self.states.setdefault(name, ImageState(str(self.backing / name)))
        if op == "set":
            mode = FaultMode.from_dict(req.get("mode") or {})
            state.set(mode)
            log.info("image %s: mode %s", name, mode)
            return {"ok": True, **state.snapshot()}
        if op == "power-cut":
            dropped = state.power_cut()
            log.info("image %s: power cut, %d unsynced bytes dropped", name, dropped)
            return {"ok": True, **state.snapshot()}
        if op == "rearm":
            state.rearm()
            return {"ok": True, **state.snapshot()}
        if op == "get":
            return {"ok": True, **state.snapshot()}
        return {"ok": False, "error": f"unknown op {op!r} (ping, list, set, get, rearm, power-cut)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.fusefs", description=__doc__.splitlines()[0])
    parser.add_argument("--backing", required=True, type=Path)
    parser.add_argument("--mount", required=True, type=Path)
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--max-threads", type=int, default=64)
    parser.add_argument("--host-sync", action="store_true",
                        help="also fdatasync the backing file on every guest flush (off: the backing "
                             "files are scratch; see the module doc)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fusefs %(levelname)s %(message)s", stream=sys.stderr)
    os.environ["FUSE_LIBRARY_NAME"] = "fuse3"  # before mfusepy loads libfuse: libfuse2 would serialize all I/O
    import mfusepy

    if mfusepy.fuse_version_major != 3:
        log.error("mfusepy loaded libfuse%s, need libfuse3 (apt-get install libfuse3-3)", mfusepy.fuse_version_major)
        return 2
    states: dict[str, ImageState] = {}
    server = ControlServer(args.socket, args.backing, states)
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    log.info("serving %s at %s (control %s, pid %d, host sync %s)", args.backing, args.mount, args.socket,
             os.getpid(), "on" if args.host_sync else "off")
    mfusepy.FUSE(make_operations(args.backing, states, host_sync=args.host_sync), str(args.mount), foreground=True, allow_other=True,
                 auto_unmount=True, max_threads=args.max_threads, fsname="jbodlab-faultfs")
    server.shutdown()
    log.info("unmounted, exiting")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
