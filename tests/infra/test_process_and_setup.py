"""Process faults, psutil samples, the daemon's stats and exit events, and the idempotent
`jbodlab setup` (warm = no rebuild)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra import image
from infra.errors import ContainerError
from infra.lab import Lab, NodeSpec, Topology
from infra.procfaults import SELF, ResourceSample

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]


def test_pause_resume_kill_restart_and_sample(node_image):
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1",)),), disk_size_mb=32)) as lab:
        name = lab.start_node("n1", ["python3", "-c", "import time\nwhile True: sum(range(10000)); time.sleep(0.001)"])
        deadline = time.monotonic() + 10
        s = lab.sample("n1")
        while s.processes < 2 and time.monotonic() < deadline:  # docker-init first, then python
            time.sleep(0.05)
            s = lab.sample("n1")
        assert s.processes >= 2 and s.rss_bytes > 0
        # the runner's once-a-second round: the same tree, plus the harness's own
        got = lab.sample_all(["n1"], include_self=True)
        assert got["n1"].processes == s.processes and got["n1"].cpu_user_s >= s.cpu_user_s
        assert got[SELF].processes >= 1 and got[SELF].cpu_user_s > 0
        stats = lab.docker.stats(name)
        assert stats["memory_stats"]["usage"] > 0 and stats["pids_stats"]["current"] >= 2
        exits = lab.docker.watch_exits(lab.lab_id)
        pause = lab.process_fault("n1", "pause")
        pause.inject()
        assert lab.docker.state(name) == "paused"
        pause.heal()
        pause.heal()
        assert lab.docker.state(name) == "running"
        restart = lab.process_fault("n1", "restart")
        restart.inject()
        assert lab.docker.state(name) == "running"
        # the cached pid is gone with the old process: the new container process is found
        deadline = time.monotonic() + 10
        got = lab.sample_all(["n1"])
        while (not isinstance(got["n1"], ResourceSample) or got["n1"].processes < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
            got = lab.sample_all(["n1"])
        assert got["n1"].processes >= 2 and got["n1"].container == name
        assert lab.docker.pid(name) == lab._tree_sampler._roots[name].pid
        lab.process_fault("n1", "kill", "KILL").inject()
        assert lab.docker.state(name) == "exited"
        assert isinstance(lab.sample_all(["n1"])["n1"], ContainerError)   # nothing to sample, said why
        seen = []
        deadline = time.monotonic() + 10
        while not any(e.exit_code == 137 for e in seen) and time.monotonic() < deadline:
            seen += exits.drain()
            time.sleep(0.05)
        exits.close()
        # the restart stopped it once (SIGTERM to docker-init), the kill once more: both streamed
        assert [e.name for e in seen] == [name, name] and seen[-1].exit_code == 137, seen


def test_setup_warm_is_a_no_op_and_image_is_labelled(node_image):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "setup", "--skip-packages"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "up to date" in out.stdout and "building" not in out.stdout
    label = subprocess.run(["docker", "image", "inspect", "-f",
                            '{{index .Config.Labels "jbodlab.source-hash"}}', node_image],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert label == image.source_hash(ROOT)
    r = subprocess.run(["docker", "run", "--rm", "--network", "none", node_image, "python", "-c",
                        "import kio, crc32c, kafka_common, broker_impl, controller_impl; print('ok')"],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr
