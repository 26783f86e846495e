"""Wake-up benchmark (not a test): what handing one small message to another thread or process
costs on this machine, the floor under every request the brokers serve.

    python bench/wakeup_bench.py [--round-trips 20000] [--out results/bench/wakeup.json]

An acks=all produce of one small batch at replication factor 3 is, at the least, a dozen
hand-overs between threads and processes that each wake the other side:

- the client's request to the leader and its answer;
- two follower fetch answers and the two fetches that move the high watermark;
- the leader's append hop to its dir worker and back;
- each follower's apply hop to its dir worker and back.

This bench times each kind of hand-over in a ping-pong of small messages: one side sends, the
other wakes, answers, and the first wakes again. It reports the wall time of a round trip and
the CPU both sides spend on it (user + system, from ``/proc``):

1. ``threads``: two Python threads with ``queue.SimpleQueue`` (the dir worker's queue);
2. ``processes_pipe``: two processes over a pipe pair (``os.read``/``os.write``);
3. ``processes_tcp``: two processes over a loopback TCP connection, 100-byte messages, with
   TCP_NODELAY (what a Kafka connection on loopback is).

Each line prints its figures; the JSON goes to ``--out``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_io import cpu_s as _cpu_s, write_result  # noqa: E402

MSG = b"x" * 100


def threads(n: int) -> dict:
    """A SimpleQueue each way between the main thread and a worker."""
    there: queue.SimpleQueue = queue.SimpleQueue()
    back: queue.SimpleQueue = queue.SimpleQueue()

    def worker() -> None:
        while True:
            item = there.get()
            if item is None:
                return
            back.put(item)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    for _ in range(200):   # warm
        there.put(1)
        back.get()
    c0, t0 = _cpu_s(), time.perf_counter()
    for _ in range(n):
        there.put(1)
        back.get()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    there.put(None)
    t.join()
    return {"round_trip_us": round(wall / n * 1e6, 1), "cpu_us_per_round_trip": round(cpu / n * 1e6, 1)}


def _pipe_echo(r: int, w: int) -> None:
    while True:
        data = os.read(r, 4096)
        if not data:
            return
        os.write(w, data)


def processes_pipe(n: int) -> dict:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    p = mp.get_context("fork").Process(target=_pipe_echo, args=(r1, w2), daemon=True)
    p.start()
    for _ in range(200):
        os.write(w1, MSG)
        os.read(r2, 4096)
    c0, pc0, t0 = _cpu_s(), _cpu_s(p.pid), time.perf_counter()
    for _ in range(n):
        os.write(w1, MSG)
        os.read(r2, 4096)
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - c0 + _cpu_s(p.pid) - pc0
    os.close(w1)
    p.join(5)
    for fd in (r1, r2, w2):
        os.close(fd)
    return {"round_trip_us": round(wall / n * 1e6, 1), "cpu_us_per_round_trip": round(cpu / n * 1e6, 1)}


def _tcp_echo(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = s.recv(4096)
            if not data:
                return
            s.sendall(data)


def processes_tcp(n: int) -> dict:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        p = mp.get_context("fork").Process(target=_tcp_echo, args=(srv.getsockname()[1],), daemon=True)
        p.start()
        conn, _ = srv.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(200):
            conn.sendall(MSG)
            conn.recv(4096)
        c0, pc0, t0 = _cpu_s(), _cpu_s(p.pid), time.perf_counter()
        for _ in range(n):
            conn.sendall(MSG)
            conn.recv(4096)
        wall = time.perf_counter() - t0
        cpu = _cpu_s() - c0 + _cpu_s(p.pid) - pc0
    p.join(5)
    return {"round_trip_us": round(wall / n * 1e6, 1), "cpu_us_per_round_trip": round(cpu / n * 1e6, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round-trips", type=int, default=20000)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "wakeup.json"))
    args = ap.parse_args()
    out: dict = {"round_trips": args.round_trips, "cpus": os.cpu_count()}
    for name, fn in (("threads", threads), ("processes_pipe", processes_pipe), ("processes_tcp", processes_tcp)):
        out[name] = fn(args.round_trips)
        print(f"{name:15s} round trip {out[name]['round_trip_us']:8.1f} us   "
              f"CPU (both sides) {out[name]['cpu_us_per_round_trip']:8.1f} us", flush=True)
    write_result(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
