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
"""

from __future__ import annotations

import os
from pathlib import Path

from infra import _cmd
from infra.errors import CommandError, DeviceError, FaultError
from infra.faultmodes import FaultMode

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


def table_for(mode: FaultMode, loop_dev: str, size: int) -> str:
    """The dm table that realises ``mode`` on ``loop_dev`` (``size`` sectors)."""
    if mode.kind == "ok":
        return linear_table(loop_dev, size)
    if mode.kind in ("error", "removed"):
        return f"0 {size} error\n"
    if mode.kind == "error-writes":
        return f"0 {size} flakey {loop_dev} 0 0 180 1 error_writes\n"
    if mode.kind == "error-reads":  # kernel >= 6.5
        return f"0 {size} flakey {loop_dev} 0 0 180 1 error_reads\n"
    if mode.kind == "delay":
        return f"0 {size} delay {loop_dev} 0 {int(round(mode.delay_ms))}\n"
    if mode.kind == "flaky":
        # dm-flakey has no per-bio probability: approximate p as the down share of a 10 s cycle
        down = max(1, round(10 * mode.p))
        return f"0 {size} flakey {loop_dev} 0 {max(0, 10 - down)} {down}\n"
    raise FaultError(f"dm backend cannot realise mode {mode}")


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


def set_mode(name: str, loop_dev: str, mode: FaultMode) -> str:
    table = table_for(mode, loop_dev, sectors(loop_dev))
    swap_table(name, table, prime=mode.kind == "delay")
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
