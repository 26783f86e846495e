"""Disk faults behind ONE interface: ``DiskFaultHandle`` — one fault on one lab disk, with
``inject()``, ``heal()``, ``describe()`` (the scenario's fault *value* is
``harness.scenario.faults.DiskFault``; this is what acts on the disk).

Kinds: ``error`` (all I/O → EIO), ``error-reads``, ``error-writes``, ``flaky`` (p, seed),
``delay`` (ms), ``enospc`` (fill the filesystem), ``remove`` (the device disappears: every
I/O fails; heal re-plugs it), ``corrupt-reads`` / ``corrupt-writes`` (p = share of blocks,
seed: silent bit flips), ``bad-blocks`` (reads of the file's blocks fail, a write remaps
them), ``lose-unsynced`` (a volatile drive cache: what was not flushed is lost at the next
power cut, ``infra.power``) and ``permission`` (``chmod a-w -R`` of the log dir,
``infra.permission``; only for nodes that run as an unprivileged user). The block-level kinds
go through the disk's backend (``fuse``: the FUSE daemon's mode; ``dm``: a table swap).
``heal()`` is idempotent.

``files`` (host paths inside the disk): the block-level kinds of ``FILE_KINDS`` then meet only
the blocks of those files (``infra.extents``: FIEMAP, resolved at inject), and the kinds a
read meets first evict those files' clean pages from the page cache, so the node's next read
of them reaches the device (``cache_pages`` in the record: resident before → after). The
probe then reads the first of those blocks with O_DIRECT (and, for ``corrupt-reads``,
compares it with the backing image: ``probe_flipped_bits``); a write fault on a file is not
probed (a write would change the file). After the probe the backend's first-hit clock is
rearmed: ``observe_hits()`` (called by ``heal`` before it heals) reads when an op of the node
first met the fault, and how often (``first_hit_ns``, ``hits``, ``flipped_bits``).

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

from infra import extents, fs, loopdev, permission
from infra.disks import Disk, DiskBackend, repair_disk
from infra.errors import FaultError
from infra.device_probe import (PROBE_SIZE, PROBE_STAMP, bit_diff, device_healthy, drain_stale_errors, probe_device,
                                read_direct, try_fs_write)
from infra.faultmodes import FaultMode, seed_meeting_data

KINDS = ("error", "error-reads", "error-writes", "flaky", "delay", "enospc", "remove", "corrupt-reads",
         "corrupt-writes", "bad-blocks", "lose-unsynced", "permission")
FILE_KINDS = ("error", "error-reads", "error-writes", "flaky", "delay", "corrupt-reads", "corrupt-writes",
              "bad-blocks")
READ_KINDS = ("error", "error-reads", "flaky", "delay", "corrupt-reads", "bad-blocks")   # a read meets them
P_KINDS = ("flaky", "corrupt-reads", "corrupt-writes")
FILL_NAME = ".jbodlab-enospc-fill"
COMPARE_BYTES = 64 << 10       # corrupt-*: how much the probe compares (of the first range / the probe area)


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
    ranges: list[list[int]] | None = None      # image byte ranges of the target files
    cache_pages: list[int] | None = None       # [resident before, resident after, total] of the files
    probe_flipped_bits: int | None = None      # corrupt-reads: bits the probe found flipped
    first_hit_ns: int | None = None            # the first op after the probe that met the fault (backend's clock)
    hits: dict[str, int] | None = None         # injected ops per kind, from the backend
    flipped_bits: int | None = None            # corrupt-*: bits flipped for the node's I/O
    modes_revoked: int | None = None           # permission: paths whose write bits were cleared

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
    files: tuple[str, ...] = ()
    node_user: tuple[int, int] | None = None     # permission: who the nodes run as (uid, gid)
    probe: bool = True
    probe_timeout_s: float = 5.0
    probe_interval_s: float = 0.005
    record: FaultRecord = field(init=False, compare=False, repr=False)
    _saved: dict = field(init=False, compare=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultError(f"disk fault kind {self.kind!r} is unknown (choose from {', '.join(KINDS)})")
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        if self.files and self.kind not in FILE_KINDS:
            raise FaultError(f"{self.kind} acts on a whole disk or dir, not on files (file kinds: "
                             f"{', '.join(FILE_KINDS)})")
        if self.kind == "bad-blocks" and not self.files:
            raise FaultError("bad-blocks needs files (whose blocks go bad)")
        if self.kind == "permission" and self.node_user is None:
            raise FaultError("a permission fault needs nodes that run as an unprivileged user (a process "
                             "running as root ignores file modes)")
        params: dict[str, object] = {}
        if self.kind not in ("enospc", "permission"):
            self.mode(((0, 4096),) if self.kind == "bad-blocks" else ())  # validates p / delay_ms
            params = {"p": self.p, "seed": self.seed} if self.kind in P_KINDS else (
                {"delay_ms": self.delay_ms} if self.kind == "delay" else {})
        if self.files:
            params["files"] = list(self.files)
        target = self.disk.target()
        if self.files:
            target["files"] = ",".join(self.files)
        object.__setattr__(self, "record", FaultRecord(self.backend.name, self.kind, params, target))

    def mode(self, ranges: tuple[tuple[int, int], ...] = (), seed: int | None = None) -> FaultMode:
        if self.kind == "remove":
            return FaultMode("removed")
        if self.kind in ("enospc", "permission"):
            return FaultMode()
        return FaultMode(self.kind, p=self.p if self.kind in P_KINDS else 0.0,
                         seed=self.seed if seed is None else seed, delay_ms=self.delay_ms, ranges=ranges)

    def _seed_for(self, ranges: tuple[tuple[int, int], ...]) -> int:
        """corrupt-reads of files: a seed whose flips meet the files' bytes (see
        :func:`infra.faultmodes.seed_meeting_data`), recorded in the fault's params when it
        differs from the one asked for; the seed asked for otherwise."""
        if not (self.files and self.kind == "corrupt-reads"):
            return self.seed
        seed = seed_meeting_data(self.seed, self.p, extents.image_ranges(self.disk, self.files, to_file_end=True))
        params = self.record.params
        if seed != self.seed:
            params["seed"], params["seed_asked"] = seed, self.seed
        else:
            params.pop("seed_asked", None)
        return seed

    # ---- interface --------------------------------------------------------------------
    def inject(self) -> FaultRecord:
        rec = self.record
        if rec.injected_ns is not None and rec.healed_ns is None:
            return rec
        rec.healed_ns = None
        rec.first_io_error_observed_ns = rec.probe_errno = rec.probe_op = rec.probe_latency_ms = None
        rec.first_hit_ns = rec.hits = rec.flipped_bits = None
        if self.kind == "permission":
            return self._inject_permission()
        if self.kind == "lose-unsynced" and loopdev.write_cache(self.disk.loop_dev) == "write-through":
            raise FaultError(f"{self.disk.node}/{self.disk.name} has a write-through (power-loss protected) cache: "
                             "it never holds unsynced writes to lose")
        ranges = extents.image_ranges(self.disk, self.files) if self.files else ()
        rec.ranges = [list(r) for r in ranges] if self.files else None
        if self.probe and self.kind != "enospc":
            drain_stale_errors(self.disk)
        rec.injected_ns = time.time_ns()
        if self.kind == "enospc":
            rec.state_after_inject = _fill(self.disk)
        else:
            rec.state_after_inject = self.backend.set_mode(self.disk, self.mode(ranges, self._seed_for(ranges)))
        if self.files and self.kind in READ_KINDS:
            rec.cache_pages = _evict(self.files)
        if self.probe:
            self._observe(ranges)
        if self.kind != "enospc":
            self.backend.rearm(self.disk)
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
        if self.kind == "permission":
            permission.restore(self._saved.pop("modes", {}))
            rec.state_after_heal = "modes restored"
        elif self.kind == "enospc":
            (self.disk.mountpoint / FILL_NAME).unlink(missing_ok=True)
            rec.state_after_heal = "fill file removed"
        else:
            self.observe_hits()
            rec.state_after_heal = self.backend.set_mode(self.disk, FaultMode())
        rec.healed_ns = time.time_ns()
        if self.kind not in ("enospc", "permission") and self.probe:
            rec.device_healthy_after_heal = device_healthy(self.disk)
        rec.fs_read_only_after_heal = fs.is_read_only(self.disk.mountpoint)
        if repair_fs and self.disk.fstype != "raw":
            rec.fs_repair = repair_disk(self.disk, busy_timeout_s=busy_timeout_s)
        return rec

    def observe_hits(self) -> FaultRecord:
        """Read the backend's counters of this fault into the record (first hit since the
        probe, injected ops, flipped bits); nothing when the backend keeps none (dm) or the
        fault is not (or no longer) in force."""
        rec = self.record
        if rec.injected_ns is None or rec.healed_ns is not None or self.kind in ("enospc", "permission"):
            return rec
        snap = self.backend.snapshot(self.disk)
        if snap and snap.get("mode", {}).get("kind") == ("removed" if self.kind == "remove" else self.kind):
            rec.first_hit_ns = snap.get("first_hit_ns")
            rec.hits = dict(snap.get("injected") or {})
            rec.flipped_bits = snap.get("flipped")
        return rec

    def describe(self) -> dict[str, object]:
        return {"fault": "disk", **self.record.as_dict()}

    # ---- permission -------------------------------------------------------------------
    def _inject_permission(self) -> FaultRecord:
        rec = self.record
        rec.injected_ns = time.time_ns()
        modes = permission.revoke_write(self.disk.data_path)
        self._saved["modes"] = modes
        rec.modes_revoked = len(modes)
        rec.state_after_inject = f"chmod a-w -R {self.disk.data_path} ({len(modes)} paths)"
        if self.probe:
            uid, gid = self.node_user  # type: ignore[misc]
            err = permission.probe_as(uid, gid, self.disk.data_path)
            rec.probe_op = "create-file"
            if err is not None:
                rec.first_io_error_observed_ns, rec.probe_errno = time.time_ns(), err
        return rec

    # ---- observation ------------------------------------------------------------------
    def _observe(self, ranges: tuple[tuple[int, int], ...]) -> None:
        rec = self.record
        if self.kind == "enospc":
            rec.probe_op = "write-file"
            err = try_fs_write(self.disk.mountpoint)
            if err is not None:
                rec.first_io_error_observed_ns, rec.probe_errno = time.time_ns(), err
            return
        if self.kind == "lose-unsynced":
            self._observe_unsynced()
            return
        if self.files and self.kind not in READ_KINDS:
            return   # a write probe would change the file: the node's first write dates the fault
        offset = ranges[0][0] if ranges else self.disk.probe_offset
        if self.kind == "delay":
            t0 = time.monotonic()
            probe_device(self.disk, "read", offset)
            rec.probe_op, rec.probe_latency_ms = "read", (time.monotonic() - t0) * 1000.0
            return
        if self.kind in ("corrupt-reads", "corrupt-writes"):
            self._observe_corruption(ranges)
            return
        ops = ["write"] if self.kind == "error-writes" else (
            ["read", "write"] if self.kind == "flaky" and not self.files else ["read"])
        deadline = time.monotonic() + self.probe_timeout_s
        i = 0
        while time.monotonic() < deadline:
            op = ops[i % len(ops)]
            i += 1
            err = probe_device(self.disk, op, offset)
            if err is not None:
                rec.first_io_error_observed_ns, rec.probe_op, rec.probe_errno = time.time_ns(), op, err
                return
            time.sleep(self.probe_interval_s)

    def _observe_corruption(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """Read through the device and from the backing image beneath it; differing bits = the
        corruption confirmed at the device. corrupt-writes: write a probe block first."""
        rec = self.record
        if ranges:
            start, end = ranges[0][0], min(ranges[0][1], ranges[0][0] + COMPARE_BYTES)
        else:
            start, end = self.disk.probe_offset, self.disk.probe_offset + COMPARE_BYTES
        if self.kind == "corrupt-writes":
            # the stamp into the probe area's blocks; what lands on the medium shows the flips
            start, end = self.disk.probe_offset, self.disk.probe_offset + COMPARE_BYTES
            for off in range(start, end, PROBE_SIZE):
                probe_device(self.disk, "write", off)
            seen = PROBE_STAMP * ((end - start) // PROBE_SIZE)
        else:
            seen = read_direct(self.disk.block_dev, start, end - start)
        with open(self.disk.image, "rb") as fh:   # beneath the fault layer
            fh.seek(start)
            medium = fh.read(end - start)
        diff = bit_diff(seen, medium)
        rec.probe_op = "read-compare" if self.kind == "corrupt-reads" else "write-compare"
        rec.probe_flipped_bits = diff
        if diff:
            rec.first_io_error_observed_ns = time.time_ns()

    def _observe_unsynced(self) -> None:
        """A write to the probe area must reach the device but not the backing image."""
        rec = self.record
        stamp = f"jbodlab-unsynced-{time.time_ns()}".encode()
        buf = mmap.mmap(-1, PROBE_SIZE)
        try:
            buf.write(stamp.ljust(PROBE_SIZE, b"\0"))
            fd = os.open(self.disk.block_dev, os.O_RDWR | os.O_DIRECT)
            try:
                os.pwritev(fd, [buf], self.disk.probe_offset)
            finally:
                os.close(fd)
        finally:
            buf.close()
        with open(self.disk.image, "rb") as fh:
            fh.seek(self.disk.probe_offset)
            on_medium = fh.read(len(stamp)) == stamp
        rec.probe_op = "write-unsynced"
        if not on_medium and read_direct(self.disk.block_dev, self.disk.probe_offset, PROBE_SIZE).startswith(stamp):
            rec.first_io_error_observed_ns = time.time_ns()   # held by the volatile cache, not yet durable


def _evict(files) -> list[int]:
    """Drop the files' clean pages from the page cache: [resident before, after, total pages]."""
    before = after = total = 0
    for f in files:
        b, n = extents.resident_pages(f)
        extents.drop_cached_pages(f)
        a, _ = extents.resident_pages(f)
        before, after, total = before + b, after + a, total + n
    return [before, after, total]


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
