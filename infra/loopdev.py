"""Loop devices: attach with direct I/O, detach, list by backing file (from sysfs, no stat)."""

from __future__ import annotations

from pathlib import Path

from infra import _cmd
from infra.errors import CommandError, DeviceError

SYS_BLOCK = Path("/sys/block")
# the device's cache model, as sysfs names it (queue/write_cache): "write back" — a volatile
# cache, so the kernel sends flushes (each becomes an fsync of the backing file) — or "write
# through" — no volatile cache (a drive with power-loss protection), so the kernel sends none
WRITE_CACHES = {"write-back": "write back", "write-through": "write through"}


def backing_file(dev: str) -> str | None:
    name = Path(dev).name
    try:
        return (SYS_BLOCK / name / "loop" / "backing_file").read_text().strip()
    except OSError:
        return None


def direct_io(dev: str) -> bool:
    try:
        return (SYS_BLOCK / Path(dev).name / "loop" / "dio").read_text().strip() == "1"
    except OSError:
        return False


def list_loops() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device. Reads sysfs only: never hangs on FUSE."""
    out = []
    for entry in sorted(SYS_BLOCK.glob("loop*")):
        bf = backing_file(entry.name)
        if bf:
            out.append((f"/dev/{entry.name}", bf))
    return out


def loops_for(path: Path | str) -> list[str]:
    path = str(path)
    return [dev for dev, bf in list_loops() if bf == path or bf.startswith(path.rstrip("/") + "/")]


def write_cache(dev: str) -> str | None:
    """The device's cache model ("write-back" / "write-through"), or None if unreadable."""
    try:
        text = (SYS_BLOCK / Path(dev).name / "queue" / "write_cache").read_text().strip()
    except OSError:
        return None
    return {v: k for k, v in WRITE_CACHES.items()}.get(text)


def set_write_cache(dev: str, cache: str) -> None:
    """Set the device's cache model. The setting outlives a detach (the next image attached to
    the same loop device inherits it), so every attach sets it."""
    if cache not in WRITE_CACHES:
        raise DeviceError(f"disk cache {cache!r} is unknown (choose from {', '.join(WRITE_CACHES)})")
    try:
        (SYS_BLOCK / Path(dev).name / "queue" / "write_cache").write_text(WRITE_CACHES[cache] + "\n")
    except OSError as exc:
        raise DeviceError(f"cannot set the write cache of {dev} to {WRITE_CACHES[cache]!r}: {exc}") from exc


def attach(image: Path, *, direct_io_on: bool = True, cache: str = "write-back") -> str:
    """Attach ``image`` to a free loop device; with direct I/O it must really be on (DIO=1);
    ``cache``: its cache model (:data:`WRITE_CACHES`), set before anything stacks on it."""
    argv = ["losetup", "--find", "--show"]
    if direct_io_on:
        argv.append("--direct-io=on")
    try:
        dev = _cmd.run([*argv, str(image)], timeout_s=60).stdout.strip()
    except CommandError as exc:
        for leaked in loops_for(image):  # old util-linux attaches and still exits 1
            _cmd.run(["losetup", "-d", leaked], check=False)
        raise DeviceError(f"cannot attach {image} to a loop device: {exc}") from exc
    if direct_io_on and not direct_io(dev):
        detach(dev)
        raise DeviceError(f"loop device {dev} for {image} came up without direct I/O (dio=0)")
    try:
        set_write_cache(dev, cache)
    except DeviceError:
        detach(dev)
        raise
    return dev


def detach(dev: str) -> None:
    proc = _cmd.run(["losetup", "-d", dev], check=False, timeout_s=60)
    if proc.returncode != 0 and backing_file(dev) is not None:
        raise DeviceError(f"cannot detach {dev}: {proc.stderr.strip()}")
