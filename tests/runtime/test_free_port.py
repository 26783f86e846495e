"""The test clusters' listener ports: outside the kernel's ephemeral range (a port the kernel
hands to ``bind(0)`` can go to another process's outgoing connection before the child
binds it — CI once lost a broker that way), never one that is in use, never the same twice."""

from __future__ import annotations

import socket

import pytest

from harness.run import local_processes as processes

pytestmark = pytest.mark.unit


def test_ports_are_below_the_ephemeral_range_and_distinct():
    low = processes.ephemeral_low()
    ports = [processes.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports)


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real_randint = processes.random.randint
        calls = []

        def randint(a, b):
            calls.append(a)
            return busy if len(calls) == 1 else real_randint(a, b)
        monkeypatch.setattr(processes.random, "randint", randint)
        monkeypatch.setattr(processes, "_handed_out", set())
        assert processes.free_port() != busy
        assert len(calls) >= 2
