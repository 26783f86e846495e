"""`jbodlab cleanup` after a SIGKILL of the process that provisioned a lab leaves nothing behind,
and never touches live labs or other tests' loop devices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from infra import cpu_group, loopdev
from infra.cleanup import cleanup, fusefs_daemons, survey
from infra.docker import Docker
from infra.lab import Lab, NodeSpec, Topology
from infra.mounts import mounts_under
from infra.naming import LABS_ROOT
from tests.infra.conftest import cpu_group_skip_reason, fuse_skip_reason

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]

PROVISION = r"""
import sys, time
from infra.lab import Lab, NodeSpec, Topology
from tests.infra.conftest import WRITER
lab = Lab.create(Topology(nodes=(NodeSpec("n1", ("d1", "d2")), NodeSpec("n2", ("d1",))), disk_size_mb=64,
                          backend="fuse"))
lab.start_node("n1", ["python3", "-c", WRITER, lab.container_log_dir("n1", "d1") + "/log", "0.01"])
lab.start_node("n2")
lab.disk_fault("n2", "d1", "delay", delay_ms=200).inject()   # a slow disk in flight when we die
lab.partition("n1", "n2").inject()
print("LAB", lab.lab_id, flush=True)
time.sleep(600)
"""


def _traces(lab_id: str) -> dict[str, object]:
    root = LABS_ROOT / lab_id
    return {
        "containers": Docker().containers(lab_id),
        "networks": Docker().networks(lab_id),
        "mounts": [m.target for m in mounts_under(root)],
        "loops": loopdev.loops_for(root),
        "daemons": [pid for pid, lab in fusefs_daemons() if lab == lab_id],
        "cgroups": [str(p) for p in cpu_group.leftovers().get(lab_id, [])],
        "dir": root.exists(),
    }


@pytest.fixture
def jbodtest_loop():
    """Another test's loop device (prefix jbodtest-): cleanup must leave it alone."""
    fd, path = tempfile.mkstemp(prefix="jbodtest-infra-", suffix=".img", dir="/var/tmp")
    os.ftruncate(fd, 8 << 20)
    os.close(fd)
    dev = loopdev.attach(Path(path), direct_io_on=False)
    yield dev, path
    loopdev.detach(dev)
    os.unlink(path)


def test_cleanup_after_sigkill_leaves_nothing(node_image, jbodtest_loop):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.Popen([sys.executable, "-c", PROVISION], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        line = proc.stdout.readline()
        assert line.startswith("LAB "), f"provisioning failed: {line!r}"
        lab_id = line.split()[1]
        before = _traces(lab_id)
        assert len(before["containers"]) == 2 and before["loops"] and before["daemons"] and before["mounts"]
        assert before["cgroups"] or cpu_group_skip_reason(), "the containers' CPU cgroup was not made"
        assert survey()[lab_id].live, "the owner still runs: the lab is live"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not survey()[lab_id].live
    for pid in before["daemons"]:  # the worst case: the FUSE daemon is wedged too
        os.kill(pid, signal.SIGSTOP)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--lab", lab_id], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    after = _traces(lab_id)
    assert after == {"containers": [], "networks": [], "mounts": [], "loops": [], "daemons": [], "cgroups": [],
                     "dir": False}
    dev, path = jbodtest_loop
    assert loopdev.backing_file(dev) == path, "a jbodtest- loop device was touched"
    # a second run finds nothing (idempotent)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--lab", lab_id], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "nothing to clean" in out.stdout


def test_default_cleanup_leaves_live_labs_alone(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1",)),), disk_size_mb=32, backend="fuse",
                             network=False)) as lab:
        chosen = cleanup(dry_run=True)
        assert lab.lab_id not in {c.lab_id for c in chosen}
        assert survey()[lab.lab_id].live
        assert lab.disk("n1", "d1").data_path.is_dir()
    assert _traces(lab.lab_id)["dir"] is False
    time.sleep(0)  # destroy() ran: nothing of the lab left
    assert _traces(lab.lab_id) == {"containers": [], "networks": [], "mounts": [], "loops": [], "daemons": [],
                                   "cgroups": [], "dir": False}


def _persistent_lab_from_another_process(dirs: tuple[str, ...]) -> str:
    """A persistent lab (node n1 with these fuse disks, no network) made by a process that
    has exited since: its id."""
    code = ("from infra.lab import Lab, NodeSpec, Topology\n"
            f"lab = Lab.create(Topology(nodes=(NodeSpec('n1', {dirs!r}),), disk_size_mb=32, backend='fuse',"
            " network=False), persistent=True)\nprint(lab.lab_id)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_persistent_lab_outlives_its_creator_and_loads_elsewhere(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    lab_id = _persistent_lab_from_another_process(("d1", "d2"))
    try:
        assert survey()[lab_id].live, "a persistent lab is live after its creator exited"
        assert lab_id not in {c.lab_id for c in cleanup(dry_run=True)}
        lab = Lab.load(lab_id)
        assert set(lab.disks) == {("n1", "d1"), ("n1", "d2")}
        rec = lab.disk_fault("n1", "d2", "error").inject()
        assert rec.first_io_error_observed_ns is not None
        lab.destroy()
        assert _traces(lab_id)["dir"] is False
    finally:
        cleanup(lab_ids=[lab_id])


def test_cleanup_after_the_fuse_daemon_died(node_image):
    """kill -9 of the daemon: auto_unmount drops the FUSE mount under the loop devices, whose
    backing paths then point into a detached mount; cleanup still finds them (lab.json)."""
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    lab = Lab.create(Topology(nodes=(NodeSpec("n1", ("d1", "d2")),), disk_size_mb=32, backend="fuse",
                              network=False))
    try:
        loops = [d.loop_dev for d in lab.disks.values()]
        os.kill(lab.daemon.pid(), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(m.target.endswith("/fuse") for m in mounts_under(LABS_ROOT / lab.lab_id)) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        cleanup(lab_ids=[lab.lab_id])
        assert _traces(lab.lab_id) == {"containers": [], "networks": [], "mounts": [], "loops": [],
                                       "daemons": [], "cgroups": [], "dir": False}
        assert all(loopdev.backing_file(dev) is None or not loopdev.backing_file(dev).endswith(
            ("n1--d1.img", "n1--d2.img")) for dev in loops), "loop devices of the dead daemon detached"
    finally:
        cleanup(lab_ids=[lab.lab_id])


def test_cleanup_says_what_it_could_not_check_when_dockerd_does_not_answer(node_image):
    """A stopped dockerd keeps the lab's containers (they come back when it starts): cleanup
    still removes the disks and mounts, but says the containers were not checked and exits 1
    instead of "nothing left" (seen on a host whose dockerd had died with a lab running)."""
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    lab_id = _persistent_lab_from_another_process(("d1",))
    no_daemon = dict(os.environ, DOCKER_HOST="unix:///nonexistent/jbodlab-test-docker.sock")
    try:
        out = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--lab", lab_id], cwd=ROOT,
                             capture_output=True, text=True, timeout=180, env=no_daemon)
        print(out.stdout)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "NOT CHECKED: lab containers and networks" in out.stdout
        assert "could not check" in out.stdout and "nothing left" not in out.stdout
        traces = _traces(lab_id)   # the real daemon answers here: nothing of the lab is left
        assert traces == {"containers": [], "networks": [], "mounts": [], "loops": [], "daemons": [],
                          "cgroups": [], "dir": False}
        out = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--lab", lab_id], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, env=no_daemon)
        assert out.returncode == 1 and "nothing to clean" not in out.stdout, out.stdout
    finally:
        cleanup(lab_ids=[lab_id])
