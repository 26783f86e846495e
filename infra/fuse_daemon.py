"""Start, talk to, tune, abort and stop the lab's FUSE fault daemon.

One daemon per lab serves every backing image of the lab. ``FuseDaemon(lab_dir).start()``
mounts it at ``<lab dir>/fuse``, raises the connection's ``max_background`` and
``congestion_threshold`` to 64 (fusectl), and writes ``fused.pid``. ``set_mode(image, mode)``
switches a fault at run time. ``abort()`` releases a wedged daemon through
``/sys/fs/fuse/connections/N/abort`` (N read from mountinfo, never via stat).

Two implementations with the same behaviour and the same control protocol (JSON lines on
``fused.sock``): ``native`` — ``infra/faultfs/faultfs.c``, built on demand by
``infra.faultfs_build`` (a libfuse3 C daemon: no per-request Python cost, no GIL) — and
``python`` — ``infra.fusefs`` (mfusepy). ``impl="auto"`` (default; ``JBODLAB_FUSE_IMPL``
overrides it) runs the native one when it can be built and otherwise logs one warning and
runs the Python one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from infra import _cmd, faultfs_build, host, jsonline
from infra.errors import DeviceError
from infra.faultmodes import FaultMode
from infra.mounts import mount_at

MAX_BACKGROUND = 64
IMPLS = ("auto", "native", "python")
log = logging.getLogger("jbodlab.fuse")


def is_daemon_argv(argv: list[bytes]) -> bool:
    """True for the command line (``/proc/PID/cmdline`` split at NUL) of a lab FUSE daemon,
    either implementation."""
    return b"infra.fusefs" in argv or (bool(argv) and faultfs_build.is_native_daemon(os.fsdecode(argv[0])))


def fuse_connection(mountpoint: Path) -> int | None:
    entry = mount_at(mountpoint)
    if entry is None or not entry.fstype.startswith("fuse"):
        return None
    return entry.minor


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class FuseDaemon:
    """``host_sync``: the daemon also syncs a backing file on the host for every guest flush
    (``--host-sync``); off by default, the lab's backing files being scratch. ``impl``:
    ``auto`` | ``native`` | ``python`` (None: ``$JBODLAB_FUSE_IMPL``, else ``auto``);
    ``active_impl`` says which one ``start()`` ran."""

    def __init__(self, lab_dir: Path, *, host_sync: bool = False, impl: str | None = None) -> None:
        impl = impl or os.environ.get("JBODLAB_FUSE_IMPL") or "auto"
        if impl not in IMPLS:
            raise ValueError(f"FUSE daemon implementation {impl!r} is unknown (choose from {', '.join(IMPLS)})")
        self.lab_dir = lab_dir
        self.host_sync = host_sync
        self.impl = impl
        self.active_impl: str | None = None
        self.backing = lab_dir / "backing"
        self.mountpoint = lab_dir / "fuse"
        self.socket_path = lab_dir / "fused.sock"
        self.pid_path = lab_dir / "fused.pid"
        self.log_path = lab_dir / "fused.log"
        self._proc: subprocess.Popen | None = None

    # ---- life cycle -------------------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> None:
        host.ensure_fusectl()
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        program, self.active_impl = self._program()
        env = dict(os.environ, FUSE_LIBRARY_NAME="fuse3")
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.log_path, "ab") as log_file:
            self._proc = subprocess.Popen(
                [*program, "--backing", str(self.backing), "--mount", str(self.mountpoint),
                 "--socket", str(self.socket_path), *(["--host-sync"] if self.host_sync else [])],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, close_fds=True)
        self.pid_path.write_text(f"{self._proc.pid}\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise DeviceError(f"FUSE daemon exited with rc {self._proc.returncode} at start; "
                                  f"log {self.log_path}: {self._log_tail()}")
            if fuse_connection(self.mountpoint) is not None and self._ping():
                self._tune()
                return
            time.sleep(0.05)
        self.stop()
        raise DeviceError(f"FUSE daemon did not mount {self.mountpoint} within {timeout_s:.0f} s: {self._log_tail()}")

    def _program(self) -> tuple[list[str], str]:
        """The daemon's command (without arguments) and which implementation it is."""
        python = [sys.executable, "-m", "infra.fusefs"]
        if self.impl == "python":
            return python, "python"
        try:
            return [str(faultfs_build.ensure_built())], "native"
        except faultfs_build.BuildError as exc:
            if self.impl == "native":
                raise DeviceError(f"native FUSE daemon unavailable: {exc}") from exc
            log.warning("native FUSE daemon unavailable (%s); running the Python daemon (infra.fusefs)", exc)
            return python, "python"

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-4:])
        except OSError:
            return "(no log)"

    def _tune(self) -> None:
        conn = fuse_connection(self.mountpoint)
        base = host.FUSECTL_DIR / str(conn)
        for knob in ("max_background", "congestion_threshold"):
            try:
                (base / knob).write_text(f"{MAX_BACKGROUND}\n")
            except OSError as exc:
                raise DeviceError(f"cannot set {base / knob}: {exc}") from exc

    def pid(self) -> int | None:
        if self._proc is not None:
            return self._proc.pid
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid)

    def abort(self) -> bool:
        """Abort the FUSE connection (releases processes stuck on a wedged daemon)."""
        conn = fuse_connection(self.mountpoint)
        if conn is None:
            return False
        try:
            (host.FUSECTL_DIR / str(conn) / "abort").write_text("1\n")
            return True
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Unmount (the daemon then exits); escalate to SIGTERM/SIGKILL; lazy-unmount what remains."""
        if mount_at(self.mountpoint) is not None:
            _cmd.run(["fusermount3", "-u", str(self.mountpoint)], check=False, timeout_s=30)
        pid = self.pid()
        if pid is not None:
            self._wait_exit(pid, timeout_s / 2) or self._signal(pid, signal.SIGTERM, timeout_s / 4) \
                or self._signal(pid, signal.SIGKILL, timeout_s / 4)
        if mount_at(self.mountpoint) is not None:
            _cmd.run(["umount", "-l", str(self.mountpoint)], check=False, timeout_s=30)
        for path in (self.pid_path, self.socket_path):
            path.unlink(missing_ok=True)

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.02)
        return False

    def _signal(self, pid: int, sig: int, timeout_s: float) -> bool:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        return self._wait_exit(pid, timeout_s)

    # ---- control ----------------------------------------------------------------------
    def request(self, req: dict, timeout_s: float = 5.0) -> dict:
        try:
            buf = jsonline.exchange(self.socket_path, req, timeout_s)
        except OSError as exc:
            raise DeviceError(f"FUSE daemon control {self.socket_path}: {exc}") from exc
        if not buf:
            raise DeviceError(f"FUSE daemon control {self.socket_path}: no reply to {req.get('op')}")
        return json.loads(buf)

    def _ping(self) -> bool:
        try:
            return bool(self.request({"op": "ping"}, timeout_s=1.0).get("ok"))
        except DeviceError:
            return False

    def set_mode(self, image: str, mode: FaultMode) -> dict:
        reply = self.request({"op": "set", "image": image, "mode": mode.to_dict()})
        if not reply.get("ok"):
            raise DeviceError(f"FUSE daemon refused mode {mode} for {image}: {reply.get('error')}")
        return reply

    def power_cut(self, image: str) -> dict:
        """Drop what the image's volatile cache holds (lose-unsynced) and switch it off."""
        reply = self.request({"op": "power-cut", "image": image})
        if not reply.get("ok"):
            raise DeviceError(f"FUSE daemon: power cut of {image}: {reply.get('error')}")
        return reply

    def rearm(self, image: str) -> dict:
        """Forget the image's first hit (the next op that meets the fault dates it)."""
        reply = self.request({"op": "rearm", "image": image})
        if not reply.get("ok"):
            raise DeviceError(f"FUSE daemon: rearm {image}: {reply.get('error')}")
        return reply

    def get(self, image: str) -> dict:
        reply = self.request({"op": "get", "image": image})
        if not reply.get("ok"):
            raise DeviceError(f"FUSE daemon: {reply.get('error')}")
        return reply
