"""A peer whose name no longer resolves must not hold up connections to the live ones.

uvloop resolves names on libuv's pool of 4 threads. A dead container's name can go
unanswered by docker's DNS until glibc's timeout (5 s, measured in S12/S13); a retry loop that
started a fresh lookup on every attempt filled the pool, and the lookup of a live controller's
name waited behind them: brokers fenced in S12 ("cannot connect to controller-3002:
TimeoutError()" while 3002 led), voters stuck in S13. Here, for real: a private mount and
network namespace whose resolv.conf points at a DNS server that never answers, a live name in
its /etc/hosts, and a TCP listener for it. The naive attempt loop reproduces the starvation
(so this test can fail); ``open_stream`` (one lookup per name in flight) does not.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r"""
    import asyncio, os, socket, subprocess, sys, tempfile, threading, time
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    tmp = tempfile.mkdtemp()
    with open(f"{tmp}/resolv.conf", "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n")
    with open(f"{tmp}/hosts", "w") as f:
        f.write("127.0.0.1 localhost\n127.0.0.1 live-peer\n")
    for name in ("resolv.conf", "hosts"):
        subprocess.run(["mount", "--bind", f"{tmp}/{name}", f"/etc/{name}"], check=True)
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # a DNS server that never answers
    hole.bind(("127.0.0.1", 53))
    threading.Thread(target=lambda: [hole.recv(512) for _ in iter(int, 1)], daemon=True).start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    import uvloop
    from kafka_runtime.client import ClientError, open_stream

    async def naive(host, timeout_s):   # the connect before: a new lookup every attempt
        return await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)

    async def fixed(host, timeout_s):
        return await open_stream(host, port, timeout_s)

    async def trial(connect):
        for _ in range(6):   # a retry loop on the dead peer, 0.2 s per attempt
            try:
                await connect("dead-peer", 0.2)
            except (ClientError, OSError, asyncio.TimeoutError):
                pass
        t = time.monotonic()
        try:
            _, writer = await connect("live-peer", 0.5)
            writer.close()
            return f"ok {time.monotonic() - t:.3f}"
        except (ClientError, OSError, asyncio.TimeoutError) as exc:
            return f"failed {time.monotonic() - t:.3f} {exc!r}"

    print("naive", uvloop.run(trial(naive)), flush=True)
    time.sleep(2.5)   # the naive loop's lookups drain
    print("fixed", uvloop.run(trial(fixed)), flush=True)
    os._exit(0)
""")


def test_a_dead_name_does_not_starve_the_lookup_of_a_live_one():
    if os.geteuid() != 0:
        pytest.skip("needs root: a private mount namespace to point resolv.conf at a silent DNS server")
    if not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs unshare(1) and ip(8)")
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pytest.skip("uvloop is not installed: the resolver pool under test is libuv's")
    proc = subprocess.run(["unshare", "--mount", "--net", "--", sys.executable, "-c", SCRIPT],
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["naive"].startswith("failed"), f"the starvation did not reproduce: {proc.stdout}"
    assert lines["fixed"].startswith("ok"), proc.stdout
    print(proc.stdout)
