"""Disk faults behind ONE interface: ``DiskFaultHandle`` — one fault on one lab disk, with
``inject()``, ``heal()``, ``describe()`` (the scenario's fault *value* is
``harness.faults.schedule.DiskFault``; this is what acts on the disk).

Kinds: ``error`` (all I/O → EIO), ``error-reads``, ``error-writes``, ``flaky`` (p, seed),
``delay`` (ms), ``enospc`` (fill the filesystem), ``remove`` (the device disappears: every
I/O fails; heal re-plugs it). The block-level kinds go through the disk's backend (``fuse``:
the FUSE daemon's mode; ``dm``: a table swap). ``heal()`` is idempotent.

Every fault keeps a ``FaultRecord``: backend, target, parameters, inject/heal wall-clock
times (``time.time_ns``, CLOCK_REALTIME like the node event logs), the backend state read
back after each switch, and ``first_io_error_observed_ns`` — when the first O_DIRECT probe
I/O on the device (sentinel block outside the filesystem) actually failed (for ``enospc``:
the first write into the filesystem that got ENOSPC). ``delay`` records the probe's
measured latency instead.

Example::

    fault = lab.disk_fault("broker-1", "d1", "error-writes")
    fault.inject()      # returns the record; fault.record.first_io_error_observed_ns is set
    ...
    fault.heal()        # device healthy again; ext4 that saw a write error is read-only:
    fault.heal(repair_fs=True)   # with the node stopped: also umount, e2fsck, mount
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra import fs
from infra.disks import Disk, DiskBackend, repair_disk
from infra.errors import FaultError
from infra.faultmodes import FaultMode

KINDS = ("error", "error-reads", "error-writes", "flaky", "delay", "enospc", "remove")
FILL_NAME = ".jbodlab-enospc-fill"
PROBE_SIZE = 4096


@dataclass(slots=True)
class FaultRecord:
    backend: str
    kind: str
    params: dict[str, float | int]
    target: dict[str, str]
    injected_ns: int | None = None
    healed_ns: int | None = None
    first_io_error_observed_ns: int | None = None
    probe_op: str | None = None
    probe_errno: int | None = None
    probe_latency_ms: float | None = None
    state_after_inject: str | None = None
    state_after_heal: str | None = None
    device_healthy_after_heal: bool | None = None
    fs_read_only_after_heal: bool | None = None
    fs_repair: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class DiskFaultHandle:
    disk: Disk
    kind: str
    backend: DiskBackend = field(compare=False, repr=False)
    p: float = 0.0
    seed: int = 0
    delay_ms: float = 0.0
    probe: bool = True
    probe_timeout_s: float = 5.0
    probe_interval_s: float = 0.005
    record: FaultRecord = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultError(f"disk fault kind {self.kind!r} is unknown (choose from {', '.join(KINDS)})")
        if self.kind == "enospc":
            params: dict[str, float | int] = {}
        else:
            self.mode()  # validates p / delay_ms
            params = {"p": self.p, "seed": self.seed} if self.kind == "flaky" else (
                {"delay_ms": self.delay_ms} if self.kind == "delay" else {})
        object.__setattr__(self, "record", FaultRecord(self.backend.name, self.kind, params, self.disk.target()))

    def mode(self) -> FaultMode:
        if self.kind == "remove":
            return FaultMode("removed")
        if self.kind == "enospc":
            return FaultMode()
        return FaultMode(self.kind, p=self.p, seed=self.seed, delay_ms=self.delay_ms)

    # ---- interface --------------------------------------------------------------------
    def inject(self) -> FaultRecord:
        rec = self.record
        if rec.injected_ns is not None and rec.healed_ns is None:
            return rec
        rec.healed_ns = None
        rec.first_io_error_observed_ns = rec.probe_errno = rec.probe_op = rec.probe_latency_ms = None
        if self.probe and self.kind != "enospc":
            _drain_stale_errors(self.disk)
        rec.injected_ns = time.time_ns()
        if self.kind == "enospc":
            rec.state_after_inject = _fill(self.disk)
        else:
            rec.state_after_inject = self.backend.set_mode(self.disk, self.mode())
        if self.probe:
            self._observe()
        return rec

    def heal(self, *, repair_fs: bool = False, busy_timeout_s: float = 10.0) -> FaultRecord:
        """Undo the fault (idempotent; safe before inject and after a previous heal).

        ``repair_fs``: also unmount, fsck and mount the filesystem (needed after a write error;
        the node's processes must have let go of the disk, else DeviceError after ``busy_timeout_s``).
        """
        rec = self.record
        if rec.injected_ns is None or rec.healed_ns is not None:
            if repair_fs and rec.healed_ns is not None and rec.fs_repair is None:
                rec.fs_repair = repair_disk(self.disk, busy_timeout_s=busy_timeout_s)
            return rec
        if self.kind == "enospc":
            (self.disk.mountpoint / FILL_NAME).unlink(missing_ok=True)
            rec.state_after_heal = "fill file removed"
        else:
            rec.state_after_heal = self.backend.set_mode(self.disk, FaultMode())
        rec.healed_ns = time.time_ns()
        if self.kind != "enospc" and self.probe:
            rec.device_healthy_after_heal = device_healthy(self.disk)
        rec.fs_read_only_after_heal = fs.is_read_only(self.disk.mountpoint)
        if repair_fs and self.disk.fstype != "raw":
            rec.fs_repair = repair_disk(self.disk, busy_timeout_s=busy_timeout_s)
        return rec

    def describe(self) -> dict[str, object]:
        return {"fault": "disk", **self.record.as_dict()}

    # ---- observation ------------------------------------------------------------------
    def _observe(self) -> None:
        rec = self.record
        if self.kind == "enospc":
            rec.probe_op = "write-file"
            err = _try_fs_write(self.disk.mountpoint)
            if err is not None:
                rec.first_io_error_observed_ns, rec.probe_errno = time.time_ns(), err
            return
        if self.kind == "delay":
            t0 = time.monotonic()
            _probe_io(self.disk, "read")
            rec.probe_op, rec.probe_latency_ms = "read", (time.monotonic() - t0) * 1000.0
            return
        ops = ["write"] if self.kind == "error-writes" else (["read", "write"] if self.kind == "flaky" else ["read"])
        deadline = time.monotonic() + self.probe_timeout_s
        i = 0
        while time.monotonic() < deadline:
            op = ops[i % len(ops)]
            i += 1
            err = _probe_io(self.disk, op)
            if err is not None:
                rec.first_io_error_observed_ns, rec.probe_op, rec.probe_errno = time.time_ns(), op, err
                return
            time.sleep(self.probe_interval_s)


def device_healthy(disk: Disk, attempts: int = 3) -> bool:
    """O_DIRECT read and write probes succeed. Either may first report an error left on the
    block device's page-cache mapping by an earlier failed writeback (direct I/O on a block
    device flushes the range first and returns that error once, then it is cleared), so each
    op gets a few attempts."""
    return all(any(_probe_io(disk, op) is None for _ in range(attempts)) for op in ("read", "write"))


def _drain_stale_errors(disk: Disk) -> None:
    """Consume writeback errors pending on the device mapping, so the inject probe reports
    an error of *this* fault and not an old one."""
    for op in ("read", "write", "read"):
        _probe_io(disk, op)


def probe_device(disk: Disk, op: str = "read") -> int | None:
    """One O_DIRECT sentinel-block read or write on the disk's device: None if ok, else errno."""
    return _probe_io(disk, op)


def _probe_io(disk: Disk, op: str) -> int | None:
    buf = mmap.mmap(-1, PROBE_SIZE)
    try:
        fd = os.open(disk.block_dev, (os.O_RDWR if op == "write" else os.O_RDONLY) | os.O_DIRECT)
    except OSError as exc:
        return exc.errno or errno.EIO
    try:
        if op == "write":
            buf.write(b"jbodlab-probe".ljust(PROBE_SIZE, b"\0"))
            n = os.pwritev(fd, [buf], disk.probe_offset)
        else:
            n = os.preadv(fd, [buf], disk.probe_offset)
        return None if n == PROBE_SIZE else errno.EIO
    except OSError as exc:
        return exc.errno or errno.EIO
    finally:
        os.close(fd)
        buf.close()


def _try_fs_write(mountpoint: Path) -> int | None:
    path = mountpoint / ".jbodlab-enospc-probe"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x" * 65536)
            os.fsync(fd)
        finally:
            os.close(fd)
        return None
    except OSError as exc:
        return exc.errno
    finally:
        try:
            path.unlink()
        except OSError:
            pass


def _fill(disk: Disk) -> str:
    """Fill the filesystem (outside ``data/``) until writes get ENOSPC."""
    path = disk.mountpoint / FILL_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        sv = os.statvfs(disk.mountpoint)
        free = sv.f_bavail * sv.f_frsize
        try:
            os.posix_fallocate(fd, 0, max(free - (1 << 20), 1 << 20))
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP):
                raise FaultError(f"cannot fill {disk.mountpoint}: {exc}") from exc
        chunk = b"\0" * (1 << 20)
        size = len(chunk)
        for _ in range(100_000):  # bounded: shrink the chunk until not even one block fits
            try:
                os.write(fd, chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise FaultError(f"cannot fill {disk.mountpoint}: {exc}") from exc
                if size <= 512:
                    break
                size //= 2
        os.fsync(fd)
    finally:
        os.close(fd)
    sv = os.statvfs(disk.mountpoint)
    return f"filled: {sv.f_bavail * sv.f_frsize} bytes free"
