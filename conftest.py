"""Suite-wide (tests/): a SIGTERM — CI's or `timeout`'s, a cancelled job — stops
the session the way Ctrl-C does (KeyboardInterrupt, once), so the lab runner heals and tears
its lab down and the fixtures' finalizers run. SIGTERM's default ends the process at once and
left a running system test's lab behind: its mounts, loop devices, containers and FUSE daemon
(`jbodlab run` has done this since it was written: ``harness.cli.run.InterruptOnce``)."""

from __future__ import annotations

import signal

from harness.cli.run import InterruptOnce


def pytest_configure(config) -> None:
    signal.signal(signal.SIGTERM, InterruptOnce())
