"""device-mapper backend: loop → dm-linear, faults by table swap (xfstests ``common/dm*`` sequences).

Only usable where ``/dev/mapper/control`` answers (``available()``); on these hosts the kernel
has no device-mapper, so the tests of this module skip with that reason.

Rules kept here (fault-injection anchors, section d):
- ``udevadm settle`` before create and after; ``dmsetup mknodes`` (containers have no udev);
  ``DM_DISABLE_UDEV=1`` so libdevmapper never waits on a udev cookie.
- swap = ``suspend --nolockfs`` → ``load`` (table on stdin) → ``resume``; **resume always runs,
  even when load fails** (a suspended device makes every later I/O and umount hang).
- dm-delay: prime suspend/resume cycle first.
- teardown: resume, (umount by the caller), ``dmsetup remove --retry``.

The partial, silent and lost-write modes (``infra.faultmodes``): ranges become a table of
several segments (``linear`` outside them, the fault's target inside); ``corrupt-reads`` /
``corrupt-writes`` are dm-flakey's ``corrupt_bio_byte 1 r|w 255 0`` (every block: the first
byte of each bio set to 0xff — not the FUSE daemon's hashed bit flips) or, for a share
``p < 1``, ``random_read_corrupt`` / ``random_write_corrupt`` (kernel ≥ 6.5, probability out
of 10^9); ``bad-blocks`` is dm-dust (``addbadblock`` per 4 KiB block, then ``enable``: a read
of one fails, a write remaps it); ``off`` (a drive without power) is flakey ``error_reads
drop_writes``; ``lose-unsynced`` is dm-log-writes with a copy of the image taken at inject, and
a power cut replays onto that copy what was flushed (``infra.dm_logwrites``).
"""

from __future__ import annotations

import os
from pathlib import Path

from infra import _cmd, dm_logwrites, loopdev
from infra.errors import CommandError, DeviceError, FaultError
from infra.faultmodes import BLOCK, FaultMode

SECTOR = 512

CONTROL = Path("/dev/mapper/control")
_ENV = dict(os.environ, DM_DISABLE_UDEV="1")


def available() -> tuple[bool, str]:
    """(usable, reason): dm works only if the kernel driver answers."""
    if not CONTROL.exists():
        return False, "no device-mapper in this kernel (/dev/mapper/control absent)"
    proc = _cmd.run(["dmsetup", "version"], check=False, env=_ENV)
    if proc.returncode != 0:
        return False, f"device-mapper does not answer: {proc.stderr.strip().splitlines()[-1:]}"
    return True, "device-mapper available"


def _dmsetup(*args: str, table: str | None = None, check: bool = True):
    return _cmd.run(["dmsetup", *args], input_text=table, check=check, env=_ENV, timeout_s=120)


def sectors(dev: str) -> int:
    return int(_cmd.run(["blockdev", "--getsz", dev]).stdout.strip())


def linear_table(loop_dev: str, size: int) -> str:
    return f"0 {size} linear {loop_dev} 0\n"


def _target(mode: FaultMode, loop_dev: str, start: int, length: int) -> str:
    """The table line of ``mode`` for sectors [start, start + length) of the device."""
    head = f"{start} {length}"
    if mode.kind == "ok":
        return f"{head} linear {loop_dev} {start}"
    if mode.kind in ("error", "removed"):
        return f"{head} error"
    flakey = f"{head} flakey {loop_dev} {start} 0 180"
    if mode.kind == "error-writes":
        return f"{flakey} 1 error_writes"
    if mode.kind == "error-reads":  # kernel >= 6.5
        return f"{flakey} 1 error_reads"
    if mode.kind == "off":
        return f"{flakey} 2 error_reads drop_writes"
    if mode.kind in ("corrupt-reads", "corrupt-writes"):
        rw = "r" if mode.kind == "corrupt-reads" else "w"
        if mode.p >= 1.0:
            return f"{flakey} 5 corrupt_bio_byte 1 {rw} 255 0"
        return f"{flakey} 2 random_{'read' if rw == 'r' else 'write'}_corrupt {max(1, round(mode.p * 1e9))}"
    if mode.kind == "delay":
        return f"{head} delay {loop_dev} {start} {int(round(mode.delay_ms))}"
    if mode.kind == "flaky":
        # dm-flakey has no per-bio probability: approximate p as the down share of a 10 s cycle
        down = max(1, round(10 * mode.p))
        return f"{head} flakey {loop_dev} {start} {max(0, 10 - down)} {down}"
    raise FaultError(f"dm backend cannot realise mode {mode} as a table segment")


def table_for(mode: FaultMode, loop_dev: str, size: int, log_dev: str | None = None) -> str:
    """The dm table that realises ``mode`` on ``loop_dev`` (``size`` sectors). With ranges:
    ``linear`` outside them, the fault's target inside (one line per segment)."""
    if mode.kind == "bad-blocks":
        return f"0 {size} dust {loop_dev} 0 {BLOCK}\n"   # the blocks come by message (dust_messages)
    if mode.kind == "lose-unsynced":
        if log_dev is None:
            raise FaultError("lose-unsynced on dm needs its log device (dm-log-writes)")
        return f"0 {size} log-writes {loop_dev} {log_dev}\n"
    if not mode.ranges or mode.kind == "ok":
        return _target(mode, loop_dev, 0, size) + "\n"
    lines, pos = [], 0
    for a, b in mode.ranges:
        start, end = a // SECTOR, min(size, -(-b // SECTOR))
        if start >= size:
            break
        if start > pos:
            lines.append(_target(FaultMode(), loop_dev, pos, start - pos))
        lines.append(_target(mode, loop_dev, start, end - start))
        pos = end
    if pos < size:
        lines.append(_target(FaultMode(), loop_dev, pos, size - pos))
    return "\n".join(lines) + "\n"


def dust_messages(mode: FaultMode) -> list[str]:
    """The ``dmsetup message`` words that give a dust device the mode's bad blocks, then enable it."""
    blocks = [str(b) for a, e in mode.ranges for b in range(a // BLOCK, e // BLOCK)]
    return [*(f"addbadblock {b}" for b in blocks), "enable"]


def device_path(name: str) -> str:
    return f"/dev/mapper/{name}"


def create(name: str, loop_dev: str) -> str:
    size = sectors(loop_dev)
    _cmd.run(["udevadm", "settle"], check=False)
    try:
        _dmsetup("create", name, table=linear_table(loop_dev, size))
    except CommandError as exc:
        raise DeviceError(f"dmsetup create {name} on {loop_dev} failed: {exc}") from exc
    _dmsetup("mknodes", name, check=False)
    _cmd.run(["udevadm", "settle"], check=False)
    return device_path(name)


def swap_table(name: str, table: str, *, prime: bool = False) -> None:
    """suspend --nolockfs → load → resume, resuming even when load fails."""
    if prime:
        _dmsetup("suspend", "--nolockfs", name, check=False)
        _dmsetup("resume", name, check=False)
    try:
        _dmsetup("suspend", "--nolockfs", name)
    except CommandError as exc:
        raise FaultError(f"dmsetup suspend {name} failed: {exc}") from exc
    load_error: CommandError | None = None
    try:
        _dmsetup("load", name, table=table)
    except CommandError as exc:
        load_error = exc
    finally:
        resumed = _dmsetup("resume", name, check=False)
    if load_error is not None:
        raise FaultError(f"dmsetup load {name} failed (device resumed on its old table): {load_error}")
    if resumed.returncode != 0:
        raise FaultError(f"dmsetup resume {name} failed: {resumed.stderr.strip()}")


# lose-unsynced state per dm device: (base copy, log file, log loop device)
_LOGGED: dict[str, tuple[Path, Path, str]] = {}


def set_mode(name: str, loop_dev: str, mode: FaultMode, image: Path | None = None) -> str:
    size = sectors(loop_dev)
    if name in _LOGGED and mode.kind != "off":
        _end_logging(name, loop_dev, size, keep_everything=True)   # no power cut: nothing lost
    if mode.kind == "lose-unsynced":
        if image is None:
            raise FaultError("lose-unsynced on dm needs the disk's image (its copy is the replay's base)")
        return _start_logging(name, loop_dev, size, image)
    swap_table(name, table_for(mode, loop_dev, size), prime=mode.kind == "delay")
    if mode.kind == "bad-blocks":
        for words in dust_messages(mode):
            _dmsetup("message", name, "0", *words.split())
    return _dmsetup("table", name).stdout.strip()


def _start_logging(name: str, loop_dev: str, size: int, image: Path) -> str:
    base, log = image.with_suffix(".base"), image.with_suffix(".log-writes")
    _dmsetup("suspend", name)   # quiescent (and flushed): the copy is the device as logging begins
    try:
        _cmd.run(["cp", "--sparse=always", str(image), str(base)], timeout_s=600)
        with open(log, "wb") as fh:
            fh.truncate(max(image.stat().st_size, 64 << 20))
        log_dev = loopdev.attach(log, direct_io_on=False)
        _LOGGED[name] = (base, log, log_dev)
        _dmsetup("load", name, table=table_for(FaultMode("lose-unsynced"), loop_dev, size, log_dev))
    finally:
        _dmsetup("resume", name, check=False)
    return _dmsetup("table", name).stdout.strip()


def power_cut(name: str, loop_dev: str) -> dict:
    """No more writes land (flakey drop_writes + error_reads); under lose-unsynced, the log says
    what the cut loses (the data of the writes after the last flush)."""
    size = sectors(loop_dev)
    lost = 0
    if name in _LOGGED:
        _base, log, _dev = _LOGGED[name]
        swap_table(name, table_for(FaultMode("off"), loop_dev, size))
        sectorsize, entries = dm_logwrites.parse_log(str(log))
        lost = sum(e.nr_sectors * sectorsize for e in dm_logwrites.durable(entries)[1])
    else:
        swap_table(name, table_for(FaultMode("off"), loop_dev, size))
    return {"dropped_bytes": lost, "state": _dmsetup("table", name).stdout.strip()}


def _end_logging(name: str, loop_dev: str, size: int, *, keep_everything: bool) -> None:
    """Stop logging; after a power cut (``keep_everything`` False) the device's data becomes the
    base copy with the durable entries replayed onto it."""
    base, log, log_dev = _LOGGED.pop(name)
    try:
        if not keep_everything:
            _dmsetup("suspend", "--nolockfs", name, check=False)
            try:
                sectorsize, entries = dm_logwrites.parse_log(str(log))
                kept, _lost = dm_logwrites.durable(entries)
                fd = os.open(loop_dev, os.O_WRONLY)   # beneath the dm device: the data itself
                try:
                    with open(base, "rb") as src:
                        pos = 0
                        while chunk := src.read(8 << 20):
                            os.pwrite(fd, chunk, pos)
                            pos += len(chunk)
                    dm_logwrites.replay(str(log), sectorsize, kept, fd)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _dmsetup("load", name, table=linear_table(loop_dev, size))
            finally:
                _dmsetup("resume", name, check=False)
        else:
            swap_table(name, linear_table(loop_dev, size))
    finally:
        loopdev.detach(log_dev)
        for path in (base, log):
            path.unlink(missing_ok=True)


def power_on(name: str, loop_dev: str) -> str:
    """After a power cut: the durable data back (lose-unsynced), the linear table."""
    size = sectors(loop_dev)
    if name in _LOGGED:
        _end_logging(name, loop_dev, size, keep_everything=False)
    else:
        swap_table(name, linear_table(loop_dev, size))
    return _dmsetup("table", name).stdout.strip()


def resume_quietly(name: str) -> None:
    _dmsetup("resume", name, check=False)


def remove(name: str) -> None:
    resume_quietly(name)
    _cmd.run(["udevadm", "settle"], check=False)
    proc = _dmsetup("remove", "--retry", name, check=False)
    if proc.returncode != 0 and Path(device_path(name)).exists():
        raise DeviceError(f"dmsetup remove {name} failed: {proc.stderr.strip()}")


def list_devices(prefix: str) -> list[str]:
    if not available()[0]:
        return []
    proc = _dmsetup("ls", check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip() and "No devices" not in line]
    return [n for n in names if n.startswith(prefix)]
