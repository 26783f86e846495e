"""Which event loop a node process runs on (kafka_runtime.event_loop)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_runtime import event_loop

pytestmark = pytest.mark.unit


def test_uvloop_by_default(monkeypatch):
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.loop_kind() == "uvloop"
    loop = event_loop.new_event_loop()
    try:
        assert type(loop).__module__.startswith("uvloop")

        async def kind():
            return event_loop.running_loop_kind()
        assert loop.run_until_complete(kind()) == "uvloop"
    finally:
        loop.close()


def test_the_standard_loop_on_request(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, " AsyncIO ")
    assert event_loop.loop_kind() == "asyncio"
    loop = event_loop.new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "trio")
    with pytest.raises(ValueError, match="JBODLAB_EVENT_LOOP='trio'.*uvloop, asyncio"):
        event_loop.loop_kind()


def test_without_uvloop_installed_the_standard_loop_runs():
    # a fresh interpreter where importing uvloop fails
    code = ("import sys; sys.modules['uvloop'] = None\n"
            "from kafka_runtime import event_loop\n"
            "print(event_loop.loop_kind(), type(event_loop.new_event_loop()).__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}, cwd=str(Path(__file__).parents[2]))
    assert out.stdout.split() == ["asyncio", "asyncio.unix_events"]


@pytest.mark.parametrize("module", ["broker_impl", "controller_impl"])
def test_a_node_with_an_unknown_loop_exits_2_with_one_line(tmp_path, module):
    cfg = tmp_path / "server.properties"
    role = "broker" if module == "broker_impl" else "controller"
    cfg.write_text(f"process.roles={role}\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:1\n"
                   f"log.dirs={tmp_path / 'd'}\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    out = subprocess.run([sys.executable, "-m", module, str(cfg)], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", event_loop.ENV: "trio"}, cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"kraft-{role}: JBODLAB_EVENT_LOOP='trio': expected one of uvloop, asyncio"]
