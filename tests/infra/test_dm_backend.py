"""The dm backend (table swaps) — runs wherever /dev/mapper/control works; skips here with that reason."""

from __future__ import annotations

import errno

import pytest

from infra import dm
from infra.device_probe import device_healthy, probe_device
from infra.lab import Lab, NodeSpec, Topology
from tests.infra.conftest import start_writer, wait_log

pytestmark = pytest.mark.system


@pytest.fixture
def dm_lab(node_image):
    ok, reason = dm.available()
    if not ok:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1", "d2")),), disk_size_mb=128, backend="dm")) as lab:
        yield lab


def test_dm_error_table_gives_eio_and_heal_restores(dm_lab):
    lab = dm_lab
    disk = lab.disk("n1", "d1")
    assert disk.block_dev.startswith("/dev/mapper/jbodlab-")
    writer = start_writer(lab, "n1", "d1")
    wait_log(lab, writer, "READY")
    fault = lab.disk_fault("n1", "d1", "error")
    rec = fault.inject()
    assert rec.backend == "dm" and " error" in rec.state_after_inject
    _, _, err_no, _ = wait_log(lab, writer, "ERR")
    assert int(err_no) == errno.EIO and rec.probe_errno == errno.EIO
    fault.heal()
    assert " linear " in fault.record.state_after_heal
    assert fault.record.device_healthy_after_heal and device_healthy(disk)


def test_dm_load_failure_still_resumes(dm_lab):
    name = f"jbodlab-{dm_lab.lab_id}-n1--d2"
    from infra.errors import FaultError
    with pytest.raises(FaultError, match="resumed"):
        dm.swap_table(name, "0 1 no-such-target\n")
    assert "ACTIVE" in __import__("subprocess").run(["dmsetup", "info", name], capture_output=True,
                                                    text=True).stdout
    assert probe_device(dm_lab.disk("n1", "d2"), "read") is None, "device usable: it was resumed"


def test_dm_error_writes_and_delay(dm_lab):
    disk = dm_lab.disk("n1", "d2")
    w = dm_lab.disk_fault("n1", "d2", "error-writes")
    w.inject()
    assert probe_device(disk, "write") == errno.EIO and probe_device(disk, "read") is None
    w.heal()
    d = dm_lab.disk_fault("n1", "d2", "delay", delay_ms=50)
    rec = d.inject()
    assert rec.probe_latency_ms >= 50
    d.heal()


def _write_files(lab) -> None:
    from tests.infra.conftest import container_python
    lab.start_node("n1")
    code = ("import os\nfor n in ('a','b'):\n fd=os.open('/jbodlab/disks/d1/data/'+n,os.O_CREAT|os.O_WRONLY,0o644)\n"
            " os.write(fd,b'z'*1048576);os.fsync(fd);os.close(fd)")
    assert container_python(lab, "n1", code).returncode == 0


def test_dm_file_ranges_fail_only_that_file(dm_lab):
    from tests.infra.conftest import container_python
    _write_files(dm_lab)
    disk = dm_lab.disk("n1", "d1")
    fault = dm_lab.disk_fault("n1", "d1", "error-reads", files=[disk.data_path / "a"])
    rec = fault.inject()
    assert rec.ranges and " flakey " in rec.state_after_inject and " linear " in rec.state_after_inject
    assert rec.probe_errno == errno.EIO and rec.cache_pages[1] == 0
    assert container_python(dm_lab, "n1", "open('/jbodlab/disks/d1/data/a','rb').read()").returncode != 0
    assert container_python(dm_lab, "n1", "open('/jbodlab/disks/d1/data/b','rb').read()").returncode == 0
    fault.heal()


def test_dm_dust_bad_blocks_and_flakey_corruption(dm_lab):
    _write_files(dm_lab)
    disk = dm_lab.disk("n1", "d1")
    bad = dm_lab.disk_fault("n1", "d1", "bad-blocks", files=[disk.data_path / "a"])
    rec = bad.inject()
    assert " dust " in rec.state_after_inject and rec.probe_errno == errno.EIO
    bad.heal()
    corrupt = dm_lab.disk_fault("n1", "d2", "corrupt-reads", p=1.0)
    rec = corrupt.inject()
    assert "corrupt_bio_byte" in rec.state_after_inject and rec.probe_flipped_bits, rec
    corrupt.heal()


def test_dm_log_writes_power_cut_keeps_only_what_was_flushed(dm_lab):
    from tests.infra.conftest import container_python
    _write_files(dm_lab)
    disk = dm_lab.disk("n1", "d1")
    fault = dm_lab.disk_fault("n1", "d1", "lose-unsynced")
    rec = fault.inject()
    assert " log-writes " in rec.state_after_inject
    code = ("import os,mmap\nfd=os.open('/jbodlab/disks/d1/data/b',os.O_WRONLY|os.O_APPEND);os.write(fd,b'S'*4096);"
            "os.fsync(fd)\nfd=os.open('/jbodlab/disks/d1/data/a',os.O_WRONLY|os.O_DIRECT)\n"
            "b=mmap.mmap(-1,4096);b.write(b'Z'*4096);os.pwritev(fd,[b],0)")
    assert container_python(dm_lab, "n1", code).returncode == 0
    dm_lab.docker.kill(dm_lab.container_name("n1"))
    cuts = dm_lab.power_cut("n1")
    assert next(c for c in cuts if c.dir == "d1").dropped_bytes >= 4096
    assert (disk.data_path / "a").read_bytes()[:4096] == b"z" * 4096, "the unflushed write is gone"
    assert (disk.data_path / "b").read_bytes()[-4096:] == b"S" * 4096, "the fsynced append stayed"
    fault.heal()
