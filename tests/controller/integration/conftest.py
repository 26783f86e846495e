"""A real kraft-controller process per test (formatted temp dir, loopback port)."""

from __future__ import annotations

import asyncio

import pytest

from loopdev import small_tmpfs  # noqa: F401  (fixture)
from harness.run.local_processes import ControllerProcess


@pytest.fixture
def make_controller(tmp_path):
    procs: list[ControllerProcess] = []

    def make(start: bool = True, **extra: str) -> ControllerProcess:
        proc = ControllerProcess(str(tmp_path / f"c{len(procs)}"),
                                 extra={k.replace("_", "."): v for k, v in extra.items()})
        proc.format()
        if start:
            proc.start()
        procs.append(proc)
        return proc

    yield make
    for p in procs:
        p.kill()


@pytest.fixture
def controller(make_controller):
    return make_controller()


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))

