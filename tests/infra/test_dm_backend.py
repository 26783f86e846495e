"""The dm backend (table swaps) — runs wherever /dev/mapper/control works; skips here with that reason."""

from __future__ import annotations

import errno

import pytest

from infra import dm
from infra.faults import device_healthy, probe_device
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
