"""Which event loop a node process runs on (kafka_runtime.event_loop)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

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
                         env={"PATH": "/usr/bin:/bin"}, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    assert out.stdout.split() == ["asyncio", "asyncio.unix_events"]
