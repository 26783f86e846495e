"""Network faults between real containers: partition both ways, isolate, loss; heal restores."""

from __future__ import annotations

import pytest

from infra.errors import CapabilityError
from infra.lab import Lab, NodeSpec, Topology
from infra.netfaults import netem_available

pytestmark = pytest.mark.system

ECHO_SERVER = r"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 9000)); s.listen()
def serve(c):
    with c:
        while True:
            d = c.recv(100)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

CLIENT = ("import socket,sys\ntry:\n s=socket.create_connection(('{host}',9000),timeout=1.0);s.settimeout(1.0)\n"
          " s.sendall(b'ping');print(s.recv(10).decode())\nexcept OSError as e:\n print('FAIL',type(e).__name__)")

# one long-lived connection from a to b: each line on stdin is echoed, or FAIL after a 1 s timeout
PERSISTENT = ("import socket,sys,time\ns=socket.create_connection(('b',9000),timeout=2.0)\nprint('UP',flush=True)\n"
              "for line in sys.stdin:\n try:\n  s.sendall(b'x');s.settimeout(1.0);print(s.recv(10).decode(),flush=True)\n"
              " except OSError as e:\n  print('FAIL',type(e).__name__,flush=True)")


@pytest.fixture(scope="module")
def lab(node_image):
    with Lab.create(Topology(nodes=(NodeSpec("a", ()), NodeSpec("b", ()), NodeSpec("c", ())))) as lab:
        for n in ("a", "b", "c"):
            lab.start_node(n, ["python3", "-c", ECHO_SERVER])
        yield lab


def talk(lab, src: str, dst: str) -> str:
    r = lab.docker.exec(lab.container_name(src), ["python3", "-c", CLIENT.format(host=dst)], timeout_s=30)
    return r.stdout.strip() or r.stderr.strip()


def test_partition_cuts_both_ways_and_heal_restores(lab):
    import subprocess
    assert talk(lab, "a", "b") == "ping" and talk(lab, "b", "a") == "ping"
    conn = subprocess.Popen(["docker", "exec", "-i", lab.container_name("a"), "python3", "-c", PERSISTENT],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert conn.stdout.readline().strip() == "UP"
        conn.stdin.write("1\n"); conn.stdin.flush()
        assert conn.stdout.readline().strip() == "x"
        part = lab.partition("a", "b")
        rec = part.inject()
        assert rec.injected_ns and len(rec.rules) == 4
        assert talk(lab, "a", "b").startswith("FAIL") and talk(lab, "b", "a").startswith("FAIL")
        assert talk(lab, "a", "c") == "ping" and talk(lab, "c", "b") == "ping", "only a<->b is cut"
        conn.stdin.write("2\n"); conn.stdin.flush()
        assert conn.stdout.readline().startswith("FAIL"), "an established connection stalls too"
        part.heal()
        part.heal()  # idempotent
        assert talk(lab, "a", "b") == "ping" and talk(lab, "b", "a") == "ping"
    finally:
        conn.kill()
        conn.wait()


def test_isolate_and_loss(lab):
    iso = lab.isolate("c")
    iso.inject()
    assert talk(lab, "a", "c").startswith("FAIL") and talk(lab, "c", "b").startswith("FAIL")
    assert talk(lab, "a", "b") == "ping"
    iso.heal()
    assert talk(lab, "a", "c") == "ping" and talk(lab, "c", "b") == "ping"
    loss = lab.netem("a", loss_pct=100)
    loss.inject()
    assert talk(lab, "a", "b").startswith("FAIL")
    loss.heal()
    assert talk(lab, "a", "b") == "ping"


def test_delay(lab):
    ok, reason = netem_available()
    if not ok:
        with pytest.raises(CapabilityError, match="netem"):
            lab.netem("a", delay_ms=100)
        pytest.skip(reason)
    import time
    d = lab.netem("a", delay_ms=100)
    d.inject()
    t0 = time.monotonic()
    assert talk(lab, "a", "b") == "ping"
    assert time.monotonic() - t0 >= 0.1
    d.heal()
