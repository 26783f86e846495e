"""The lab disk's flush path: with a write-back cache model a guest flush reaches the FUSE
daemon and its fault mode, and only with host sync on (``infra.fusefs --host-sync``) does the
daemon also sync the backing file on the host; with a write-through model the kernel sends no
flushes at all. The model is set at every attach (the loop device keeps it across a detach).
Real daemon (both implementations: native and ``infra.fusefs``), loop device and ext4; no
containers."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from loopdev import lab_disk_skip_reason  # noqa: E402

from infra import faultfs_build  # noqa: E402
from infra.disks import FuseBackend, create_disk, destroy_disk  # noqa: E402
from infra.faultmodes import FaultMode  # noqa: E402
from infra.fuse_daemon import FuseDaemon  # noqa: E402
from infra.loopdev import write_cache  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def make_disk():
    reason = lab_disk_skip_reason()
    if reason:
        pytest.skip(reason)
    made = []

    def make(*, host_sync: bool, cache: str, impl: str | None = None):
        lab = Path(tempfile.mkdtemp(prefix="jbodtest-hostsync-"))
        daemon = FuseDaemon(lab, host_sync=host_sync, impl=impl)
        made.append((lab, daemon, []))
        daemon.start()
        disk = create_disk(FuseBackend(daemon), lab_id="hostsync", lab_dir=lab, node="n1", dirname="d1",
                           size_mb=64, fstype="ext4", cache=cache)
        made[-1][2].append(disk)
        return daemon, disk

    def destroy(daemon, disk) -> None:
        for _lab, d, disks in made:
            if d is daemon and disk in disks:
                disks.remove(disk)
        destroy_disk(FuseBackend(daemon), disk)

    make.destroy = destroy
    yield make
    for lab, daemon, disks in made:
        for disk in disks:
            destroy_disk(FuseBackend(daemon), disk)
        daemon.stop()
        shutil.rmtree(lab, ignore_errors=True)


@pytest.fixture(params=[(False, "native"), (True, "native"), (False, "python"), (True, "python")],
                ids=["host-sync-off-native", "host-sync-on-native", "host-sync-off-python", "host-sync-on-python"])
def lab_disk(request, make_disk):
    host_sync, impl = request.param
    if impl == "native":
        try:
            faultfs_build.ensure_built()
        except faultfs_build.BuildError as exc:
            pytest.skip(f"native FUSE daemon cannot be built here: {exc}")
    daemon, disk = make_disk(host_sync=host_sync, cache="write-back", impl=impl)
    assert daemon.active_impl == impl
    yield daemon, disk, host_sync


def _append_fsync(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_guest_flushes_reach_the_fault_mode_and_the_host_only_with_host_sync(lab_disk):
    daemon, disk, host_sync = lab_disk
    image = disk.image.name
    before = daemon.get(image)
    for _ in range(5):
        _append_fsync(Path(disk.data_path) / "log")
    after = daemon.get(image)
    flushes = after["ops"]["fsync"] - before["ops"]["fsync"]
    synced = after["host_syncs"] - before["host_syncs"]
    assert flushes >= 5, f"5 guest fsyncs sent only {flushes} flushes to the daemon"
    if host_sync:
        assert synced == flushes, f"host sync on: {synced} host syncs for {flushes} flushes"
    else:
        assert synced == 0, f"host sync off, yet {synced} host syncs"
    # a flush still passes the fault mode: under error-writes the guest's fsync fails with EIO
    daemon.set_mode(image, FaultMode("error-writes"))
    with pytest.raises(OSError) as err:
        _append_fsync(Path(disk.data_path) / "log")
    assert err.value.errno in (5, 30), err.value   # EIO, or EROFS once ext4 aborted its journal
    assert daemon.get(image)["injected"]["fsync"] + daemon.get(image)["injected"]["write"] > 0
    daemon.set_mode(image, FaultMode("ok"))


def test_write_through_disks_get_no_flushes_and_every_attach_sets_the_model(make_disk):
    daemon, disk = make_disk(host_sync=True, cache="write-through")
    assert write_cache(disk.loop_dev) == "write-through"
    before = daemon.get(disk.image.name)
    for _ in range(5):
        _append_fsync(Path(disk.data_path) / "log")
    after = daemon.get(disk.image.name)
    assert after["ops"]["write"] > before["ops"]["write"]
    assert after["ops"]["fsync"] == before["ops"]["fsync"], "a write-through device got flushes"
    # the next disk made on the same loop device (freed by the teardown) gets its own model
    loop = disk.loop_dev
    make_disk.destroy(daemon, disk)
    daemon2, disk2 = make_disk(host_sync=False, cache="write-back")
    assert write_cache(disk2.loop_dev) == "write-back", f"{disk2.loop_dev} (was {loop}) kept write-through"
