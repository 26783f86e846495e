"""Hostile frames per listener: 100k fuzzed frames each at real processes, crashes must be 0.

    .venv/bin/python bench/fuzz_bench.py [--frames 100000] [--concurrency 4] [--seed 1]
        [--listeners controller,controller-sasl,broker,broker-sasl] [--out FILE]

Each listener runs in its own real process(es) on loopback (a kraft-controller; a
kraft-controller + one kraft-broker for the broker's client listener), with
``socket.request.max.bytes=65536``. The frames come from ``testkit.fuzz`` (every
class: random, header, valid, mutate, truncate, length, tags, size, known — issue 11's frame
among them) drawn with ``random``, thrown by ``--concurrency`` connections at once, each
probed with an ApiVersions request after the frame. On a SASL listener half the frames come
before logging in and half after (as ``broker``/``admin``, super users, so the frames reach
every API).

Prints and writes ``results/bench/fuzz.json`` per listener: frames/s, the process's RSS
before and after (and the peak sampled each second), connections the server closed,
frames answered, slow (no answer within 5 s: a valid request that waits, e.g. a Fetch
long-poll), crashes (the process died: must be 0), bytes its log (stderr + events file)
grew by, and whether it still answers ApiVersions and a real request afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from kafka_runtime.controller_client import MetadataReader  # noqa: E402

from harness.run.local_processes import ControllerProcess  # noqa: E402
from testkit import fuzz  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402

MAX_FRAME = 65536
SASL_CTRL = {"authorizer.enabled": "true", "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
             "sasl.plain.users": "broker:b-pw,alice:a-pw", "super.users": "User:broker"}


class Target:
    def __init__(self, name: str, base: str) -> None:
        self.name = name
        self.kind = "controller" if name.startswith("controller") else "broker"
        sasl = name.endswith("sasl")
        if self.kind == "controller":
            self.proc = ControllerProcess(base, extra={"socket.request.max.bytes": str(MAX_FRAME),
                                                       **(SASL_CTRL if sasl else {})})
            self.proc.format()
            self.proc.start()
            self.port, self.login, self._kill = self.proc.port, ("broker", "b-pw") if sasl else None, self.proc.kill
            self.logs = [self.proc.stderr_path, self.proc.events_path]
        else:
            import pathlib
            from testkit.cluster import Cluster
            cluster = Cluster(pathlib.Path(base), n_brokers=1, sasl=sasl,
                              broker_extra={"socket.request.max.bytes": str(MAX_FRAME)})
            cluster.prepare()
            cluster.start()
            self.proc = cluster.brokers[0]
            self.port, self.login, self._kill = self.proc.port, ("admin", "ad-pw") if sasl else None, cluster.kill
            self.logs = [self.proc.stderr_path, self.proc.events_path]

    def kill(self) -> None:
        self._kill()

    def log_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.logs if os.path.exists(p))

    async def serves(self) -> bool:
        try:
            client = await KafkaClient.connect("127.0.0.1", self.port, sasl=self.login, timeout_s=20)
        except Exception:
            return False
        try:
            if self.kind == "controller":
                await MetadataReader(client).fetch_once(0)
            else:
                resp = await client.request(client.build(3, 1, 12, topics=None, allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False), timeout_s=20)
                if not resp.brokers:
                    return False
            return True
        except Exception:
            return False
        finally:
            await client.close()

    async def table(self) -> dict[int, tuple[int, int]]:
        client = await KafkaClient.connect("127.0.0.1", self.port, sasl=self.login)
        try:
            return client.versions
        finally:
            await client.close()


async def throw_many(target: Target, corpus: fuzz.Corpus, frames: int, concurrency: int, seed: int,
                     login: tuple[str, str] | None, crashed: list[str]) -> list[fuzz.ThrowStats]:
    per = [frames // concurrency + (1 if i < frames % concurrency else 0) for i in range(concurrency)]

    async def worker(i: int) -> fuzz.ThrowStats:
        thrower = fuzz.Thrower("127.0.0.1", target.port, sasl=login, timeout_s=5)
        ch = fuzz.RandomChooser(random.Random(seed * 1000 + i))
        try:
            for n in range(per[i]):
                if crashed:
                    break
                await thrower.throw(fuzz.make_case(ch, corpus))
                if n % 200 == 0 and not target.proc.alive():
                    crashed.append(f"died after {thrower.stats.frames} frames of worker {i}")
        finally:
            await thrower.close()
        return thrower.stats

    return list(await asyncio.gather(*(worker(i) for i in range(concurrency))))


async def sample_rss(target: Target, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], fuzz.rss_bytes(target.proc.proc.pid))
        except (OSError, RuntimeError, AttributeError):
            return
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass


def bench_listener(name: str, frames: int, concurrency: int, seed: int) -> dict:
    base = tempfile.mkdtemp(prefix=f"jbodlab-fuzz-{name}-")
    target = Target(name, base)
    try:
        extra = {}
        if target.kind == "broker":
            from broker_impl.api.legacy_produce import REQUEST_CLASSES
            extra = dict(REQUEST_CLASSES)
        corpus = fuzz.Corpus.build(asyncio.run(target.table()), seed=seed, extra_classes=extra,
                                   max_frame_bytes=MAX_FRAME)
        asyncio.run(target.serves())
        rss_before = fuzz.rss_bytes(target.proc.proc.pid)
        log_before = target.log_bytes()
        phases = [None] if target.login is None else [None, target.login]
        crashed: list[str] = []
        stats: list[fuzz.ThrowStats] = []
        peak = [rss_before]

        async def run_all() -> float:
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_rss(target, peak, stop))
            t0 = time.monotonic()
            for k, login in enumerate(phases):
                n = frames // len(phases) + (frames % len(phases) if k == 0 else 0)
                stats.extend(await throw_many(target, corpus, n, concurrency, seed + k, login, crashed))
            elapsed = time.monotonic() - t0
            stop.set()
            await sampler
            return elapsed

        elapsed = asyncio.run(run_all())
        alive = target.proc.alive()
        serves = alive and asyncio.run(target.serves())
        rss_after = fuzz.rss_bytes(target.proc.proc.pid) if alive else 0
        total = sum(s.frames for s in stats)
        by_kind: dict[str, int] = {}
        for s in stats:
            for k, v in s.by_kind.items():
                by_kind[k] = by_kind.get(k, 0) + v
        return {
            "listener": name, "frames": total, "seconds": round(elapsed, 1),
            "frames_per_s": round(total / elapsed, 1) if elapsed else 0.0,
            "rss_before_mib": round(rss_before / 2**20, 1), "rss_after_mib": round(rss_after / 2**20, 1),
            "rss_peak_mib": round(peak[0] / 2**20, 1),
            "closed": sum(s.closed for s in stats), "answered": sum(s.answered for s in stats),
            "slow": sum(s.slow for s in stats), "refused": sum(s.refused for s in stats),
            "connections": sum(s.connections for s in stats),
            "crashes": 0 if alive and not crashed else 1, "crash_detail": crashed or ([] if alive else ["dead at end"]),
            "serves_after": bool(serves), "log_bytes": target.log_bytes() - log_before,
            "by_kind": by_kind, "sasl_phases": ["before-login"] + (["after-login"] if target.login else []),
            "exit_code": None if alive else target.proc.proc.returncode,
        }
    finally:
        target.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000, help="frames per listener")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--listeners", default="controller,controller-sasl,broker,broker-sasl")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "fuzz.json"))
    args = ap.parse_args()
    results = []
    for name in args.listeners.split(","):
        print(f"{name}: {args.frames} frames, {args.concurrency} connections at once ...", flush=True)
        r = bench_listener(name, args.frames, args.concurrency, args.seed)
        results.append(r)
        print(f"{name}: {r['frames']} frames in {r['seconds']} s = {r['frames_per_s']} frames/s; "
              f"RSS {r['rss_before_mib']} -> {r['rss_after_mib']} MiB (peak {r['rss_peak_mib']}); "
              f"closed {r['closed']}, answered {r['answered']}, slow {r['slow']}, refused {r['refused']}; "
              f"crashes {r['crashes']}; log +{r['log_bytes']} bytes; serves after: {r['serves_after']}",
              flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
                   "frames_per_listener": args.frames, "concurrency": args.concurrency, "seed": args.seed,
                   "results": results}, f, indent=2)
    print(f"written {args.out}")
    return 0 if all(r["crashes"] == 0 and r["serves_after"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
