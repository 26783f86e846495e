"""Data-plane benchmark (not a test): librdkafka produce throughput and latency against the
broker's client listener.

    .venv/bin/python bench/dataplane_bench.py [--records 200000] [--value-bytes 1024] [--out FILE]

The broker runs in its own process (the same real parts as tests/dataplane: KafkaServer,
BrokerApi, MetadataImage replayed from the pure controller's records, PartitionLogs in a
temp dir; no fsync per append, Kafka's default flush policy). confluent-kafka (librdkafka
2.16) produces from this process with acks=1:

1. **Throughput**: N records of V bytes with librdkafka's defaults (linger 5 ms, large
   batches), then N/2 with ``batch.size=16384`` (many small requests): MB/s and records/s
   from first produce() to flush() returning; the broker process's CPU seconds per MB
   (``time.process_time`` in the broker); the log end offset is checked against N.
2. **Latency**: sequential produce + flush of single records (one request each): p50/p99
   of the client-observed round trip.
3. **Profile**: the throughput run repeated with cProfile enabled in the broker; the top
   functions by own time are printed (profiling slows the run; its figures are not used).

Both processes share the machine's cores; the figures are for comparing builds, not for
asserting anything.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import multiprocessing as mp
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from testkit.cluster import produce_waiting  # noqa: E402

TOPIC = "bench"


def _broker_main(conn, tmp: str, partitions: int) -> None:
    from tests.dataplane.inprocess_broker import Broker

    async def run() -> None:
        broker = Broker(Path(tmp))
        await broker.start()
        await broker.create_topic(TOPIC, partitions)
        conn.send(("port", broker.server.port))
        loop = asyncio.get_running_loop()
        profiler: cProfile.Profile | None = None
        while True:
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "leo":
                conn.send(("leo", broker.lm.get_log(TOPIC, 0).log_end_offset))
            elif cmd == "cpu":
                conn.send(("cpu", time.process_time()))
            elif cmd == "profile_on":
                profiler = cProfile.Profile()
                profiler.enable()
                conn.send(("ok", None))
            elif cmd == "profile_off":
                assert profiler is not None
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
                conn.send(("profile", out.getvalue()))
            elif cmd == "stop":
                await broker.stop()
                conn.send(("stopped", None))
                return

    asyncio.run(run())


class BrokerProcess:
    def __init__(self, tmp: str, partitions: int) -> None:
        self.conn, child = mp.Pipe()
        self.proc = mp.get_context("spawn").Process(target=_broker_main, args=(child, tmp, partitions), daemon=True)
        self.proc.start()
        kind, self.port = self.conn.recv()
        assert kind == "port"

    def ask(self, cmd: str):
        self.conn.send(cmd)
        return self.conn.recv()[1]

    def stop(self) -> None:
        try:
            self.ask("stop")
        finally:
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(5)


def throughput(bootstrap: str, n: int, value_bytes: int, batch_size: int | None = None) -> dict:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
            "queue.buffering.max.messages": max(100_000, n), "queue.buffering.max.kbytes": 2_000_000}
    if batch_size is not None:
        conf["batch.size"] = batch_size
    p = Producer(conf)
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    failed = []

    def on_delivery(err, _msg):
        if err:
            failed.append(err)
    start = time.perf_counter()
    for i in range(n):
        produce_waiting(p, TOPIC, value, on_delivery=on_delivery)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0 and not failed, f"{left} undelivered, errors {failed[:3]}"
    mb = n * value_bytes / 1e6
    return {"records": n, "value_bytes": value_bytes, "seconds": round(elapsed, 3),
            "mb_per_s": round(mb / elapsed, 1), "records_per_s": round(n / elapsed), "mb": mb}


def latency(bootstrap: str, n: int, value_bytes: int) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "enable.idempotence": False})
    value = b"x" * value_bytes
    p.produce(TOPIC, value)
    p.flush(30)  # connection + metadata warm-up
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        p.produce(TOPIC, value)
        assert p.flush(30) == 0
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"requests": n, "p50_ms": round(statistics.median(samples), 3),
            "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 3), "max_ms": round(samples[-1], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--latency-requests", type=int, default=2000)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--out", default="results/bench/dataplane.json")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="jbodlab-dataplane-bench-") as tmp:
        broker = BrokerProcess(tmp, 1)
        try:
            bootstrap = f"127.0.0.1:{broker.port}"
            throughput(bootstrap, min(20_000, args.records), args.value_bytes)  # warm-up
            cpu0, leo_before = broker.ask("cpu"), broker.ask("leo")
            tp = throughput(bootstrap, args.records, args.value_bytes)
            cpu1 = broker.ask("cpu")
            assert broker.ask("leo") - leo_before == args.records, "not every record reached the log"
            cpu2, leo2 = broker.ask("cpu"), broker.ask("leo")
            small = throughput(bootstrap, args.records // 2, args.value_bytes, batch_size=16384)
            cpu3 = broker.ask("cpu")
            assert broker.ask("leo") - leo2 == args.records // 2, "not every record reached the log"
            small["broker_cpu_s"] = round(cpu3 - cpu2, 3)
            small["broker_cpu_s_per_mb"] = round((cpu3 - cpu2) / small.pop("mb"), 5)
            tp["broker_cpu_s"] = round(cpu1 - cpu0, 3)
            tp["broker_cpu_s_per_mb"] = round((cpu1 - cpu0) / tp.pop("mb"), 5)
            leo0 = broker.ask("leo")
            lat = latency(bootstrap, args.latency_requests, args.value_bytes)
            appended = broker.ask("leo") - leo0
            assert appended == args.latency_requests + 1, f"latency run appended {appended} records"
            profile = None
            if not args.no_profile:
                broker.ask("profile_on")
                throughput(bootstrap, args.records // 2, args.value_bytes)
                profile = broker.ask("profile_off")
        finally:
            broker.stop()
    result = {"throughput_acks1": tp, "throughput_acks1_batch16k": small, "latency_acks1_single_record": lat,
              "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()}}
    print(json.dumps(result, indent=2))
    if profile:
        print("\nbroker profile (throughput run, top functions by own time):")
        print("\n".join(profile.splitlines()[:45]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
