"""The console scripts as a user runs them: `jbodlab demo`, `kraft-controller FILE`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.run.local_processes import REPO, ControllerProcess

pytestmark = pytest.mark.integration
BIN = os.path.dirname(sys.executable)


def test_jbodlab_demo_runs_end_to_end_and_exits_zero(tmp_path):
    out = subprocess.run([os.path.join(BIN, "jbodlab"), "demo", "--workdir", str(tmp_path / "demo")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK" in out.stdout and "FAILED" not in out.stdout
    assert "leader moves:" in out.stdout and "PartitionChangeRecord" in out.stdout


def test_kraft_controller_script_serves_and_stops_cleanly_on_sigterm(tmp_path):
    proc = ControllerProcess(str(tmp_path / "c"))
    proc.format()
    p = subprocess.Popen([os.path.join(BIN, "kraft-controller"), proc.config_path], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import socket
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", proc.port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.poll() else ""
                time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        assert "stopped" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
