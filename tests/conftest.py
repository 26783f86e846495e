"""Shared pytest fixtures and the capability checks that decide skips (one-line reasons), and
the lab mounts a test leaves behind, named at the end of the session."""

from __future__ import annotations

from pathlib import Path

import pytest

# Lab and test mounts (the lab's /var/lib/jbodlab/labs/<id>/…, the FUSE fs "jbodlab-faultfs",
# LoopFs under /tmp/jbodtest-*): a test that leaves one behind is named at the end of the
# session, with the mounts, so a teardown that leaks is found where it leaks.
_MARKS = ("/var/lib/jbodlab/", "jbodlab-faultfs", "/jbodtest-")
_left: dict[str, str] = {}   # mount target -> the first test after which it was there
_at_start: set[str] = set()


def _lab_mounts() -> set[str]:
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return set()
    return {f"{p[0]} on {p[1]}" for p in (line.split() for line in lines)
            if len(p) > 1 and any(m in p[0] or m in p[1] for m in _MARKS)}


def pytest_sessionstart(session) -> None:
    _at_start.update(_lab_mounts())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for mount in _lab_mounts() - _at_start:
        _left.setdefault(mount, item.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    still = _lab_mounts() - _at_start
    for mount in sorted(still):
        terminalreporter.write_line(f"LEFT BEHIND: {mount} (there since {_left.get(mount, 'the session end')})",
                                    red=True)
