"""A real campaign: `jbodlab run A B` (2 scenarios × 1 run, shortened) into one results root,
its progress lines and summary, the Spark analysis of the root; and Ctrl-C mid-run (twice)
leaves no container, mount or loop device of the lab behind.

Needs what the system suite needs (root, dockerd, loop devices).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.system.test_system import _capable

pytestmark = pytest.mark.system
SHORT = ["--set", "workload.duration_ms=17000", "--set", "workload.drain_timeout_ms=8000", "--quiet"]


def _jbodlab(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


@pytest.fixture(autouse=True)
def _needs_a_lab_host():
    reason = _capable()
    if reason:
        pytest.skip(reason)


@pytest.mark.timeout(900)
def test_two_scenario_campaign_lands_in_one_root_that_spark_aggregates(tmp_path):
    root = tmp_path / "campaign"
    proc = subprocess.run(_jbodlab("run", "timeout-not-leader", "follower-dir-fails", "--results", str(root), *SHORT),
                          capture_output=True, text=True, timeout=800)
    out = proc.stdout
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "campaign: 2 runs (2 scenarios × 1)" in out
    assert "[run 1/2 · " in out and "S5 timeout-not-leader seed 0" in out
    assert "[run 2/2 · " in out and "[2/2 · " in out and "ETA" in out
    assert "=== campaign: 2 runs, verdicts:" in out and "acked records lost: 0 in 2 runs" in out
    assert "duplicates (idempotent producers, acks=all): 0" in out
    info = json.loads((root / "campaign.json").read_text())
    assert info["finished"] == 2 and not info["interrupted"] and len(info["runs"]) == 2
    assert (root / "summary.md").read_text().startswith("# campaign summary")
    runs = sorted(p for p in root.iterdir() if (p / "run.json").is_file())
    # run ids start with the UTC start time: sorted = in the order they ran
    assert [json.loads((r / "run.json").read_text())["scenario"] for r in runs] == \
        ["timeout-not-leader", "follower-dir-fails"]
    rep = tmp_path / "rep"
    proc = subprocess.run(_jbodlab("analyze", str(root), "--engine", "spark", "--out", str(rep)),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 run(s), engine spark" in proc.stdout
    import pandas as pd
    service = pd.read_parquet(rep / "summary" / "service_latency.parquet")
    assert set(service["scenario"]) == {"timeout-not-leader", "follower-dir-fails"}
    assert {"before", "during"} <= set(service["window"]) and (service["count"] > 0).all()
    plots = {p.name.split("_")[0] for p in (rep / "plots").iterdir()}
    assert {"latency", "throughput", "timeline", "cdf"} <= plots


def _lab_id(run_root: Path) -> str | None:
    for log in run_root.glob("*/runner.log"):
        for line in log.read_text().splitlines():
            if " lab " in line and ": backend " in line:
                return line.split(" lab ", 1)[1].split(":", 1)[0].strip()
    return None


@pytest.mark.timeout(600)
def test_ctrl_c_heals_tears_down_and_summarises(tmp_path):
    root = tmp_path / "c"
    proc = subprocess.Popen(_jbodlab("run", "follower-dir-fails", "timeout-not-leader", "--results", str(root),
                                     "--set", "workload.duration_ms=20000"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            logs = list(root.glob("*/runner.log"))
            if logs and "f0: error on" in logs[0].read_text():
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        lab = _lab_id(root)
        assert lab, "the runner logged no lab id"
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)            # a second Ctrl-C must not cut the teardown short
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err and "=== campaign: 0 runs" in out
    assert "[run 2/2" not in out                   # the campaign stopped
    info = json.loads((root / "campaign.json").read_text())
    assert info["interrupted"] and info["finished"] == 0
    run = next(p for p in root.iterdir() if (p / "run.json").is_file())
    assert json.loads((run / "run.json").read_text())["error"].startswith("interrupted")
    docker = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
    assert not [n for n in docker.stdout.split() if lab in n], docker.stdout
    assert not Path(f"/var/lib/jbodlab/labs/{lab}").exists()
    assert lab not in Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert lab not in loops, loops
