"""Broker benchmark (not a test): real kraft-controller + kraft-brokers on loopback, librdkafka.

    .venv/bin/python bench/broker_bench.py [--records 300000] [--value-bytes 1024]
                                          [--eio-partitions 1000] [--skip-eio] [--out FILE]

1. **Throughput**, confluent-kafka (librdkafka 2.16) producing N records of V bytes with its
   defaults (linger 5 ms) to one partition led by broker 1:
   a) acks=1, RF=1;  b) acks=all, RF=3 (min.insync.replicas=2, followers fetching).
   MB/s and records/s from the first produce() to flush() returning (after one warm-up
   record, so connections and InitProducerId are not counted); p50/p99 of the
   delivery latency under that load (delivery callback − produce call); CPU seconds per MB
   of the broker processes (+ controller) from /proc/<pid>/stat, and of the client.
2. **Latency**, one record at a time (produce + flush), acks=1 RF=1 and acks=all RF=3: p50/p99.
3. **Profile**: both loads again with py-spy (sampling, idle excluded) attached to the
   leader and, for acks=all, a follower: share of samples by package and top leaf frames
   (sampling slows the run a little; its figures are not reported).
4. **EIO → controller commit** (issue 3's figure): one broker, 3 dirs, the first an ext4
   loop fs holding ``--eio-partitions`` partitions (a topic of 3× that many, RF=1, least
   loaded placement), probe on (``log.dir.probe.interval.ms``=1000, the default); the fs is
   shut down (EXT4_IOC_SHUTDOWN → EIO) while idle; measured: EIO → broker's ``dir_offline``
   event → controller's ``broker_log_dirs_changed`` event (written after the records are
   committed and fsynced). Needs root + loop devices (skipped otherwise, said so).

Prints one line per figure and writes ``results/bench/broker.json``. All processes share
the machine's 2 cores; figures are for comparing builds, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bench_io import cpu_s, write_result  # noqa: E402
from loopdev import LoopFs, skip_reason as loop_skip_reason  # noqa: E402

from testkit.cluster import Cluster, produce_waiting, wait_until  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402



def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")


class Sampler:
    """py-spy (``record --format raw``, idle frames excluded) attached to one broker process
    for the duration of a run; falls back to nothing when py-spy is missing."""

    def __init__(self, pid: int, out: str, rate: int = 250) -> None:
        self.out = out
        self.proc = None
        if os.path.exists(PY_SPY):
            self.proc = subprocess.Popen([PY_SPY, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                                          "--output", out, "--nonblocking"], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        return summarise_stacks(self.out) if os.path.exists(self.out) else None


def _pkg(frame: str) -> str:
    for key, name in (("kio/", "kio (entity encode/decode)"), ("asyncio/", "asyncio (loop, transports, streams)"),
                      ("selectors", "asyncio (loop, transports, streams)"),
                      ("broker_impl/api/", "broker_impl.api (client handlers, purgatory)"),
                      ("broker_impl/storage/", "broker_impl.storage (segments, crc, writes)"),
                      ("broker_impl/replication/", "broker_impl.replication (fetcher, mover)"),
                      ("broker_impl/runtime/", "broker_impl.runtime (view, ISR glue)"),
                      ("broker_impl/state/", "broker_impl.state (pure core, LeaderIsr)"),
                      ("kafka_runtime/", "kafka_runtime (server, client)"),
                      ("kafka_common/", "kafka_common (framing, wire, batch headers)")):
        if key in frame:
            return name
    return "other"


def summarise_stacks(path: str, top: int = 15) -> dict:
    """Collapsed stacks → share of samples by the leaf frame (own time) and by the package of
    the innermost project/library frame."""
    own: dict[str, int] = {}
    by_pkg: dict[str, int] = {}
    total = 0
    pending = ""   # a frame name with a newline in it (py-spy prints it as is) spans lines
    with open(path, errors="replace") as f:   # py-spy writes frame names as their bytes
        for line in f:
            stack, _, count = (pending + line.rstrip("\n")).rpartition(" ")
            if not count.isdigit():
                pending += line.rstrip("\n") + " "
                continue
            pending = ""
            if not stack:
                continue
            n = int(count)
            total += n
            frames = stack.split(";")
            leaf = frames[-1]
            own[leaf] = own.get(leaf, 0) + n
            pkg = "other"
            for fr in reversed(frames):
                pkg = _pkg(fr)
                if pkg != "other":
                    break
            by_pkg[pkg] = by_pkg.get(pkg, 0) + n
    rows = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    return {"samples": total,
            "share_by_package": {k: round(v / total, 3) for k, v in sorted(by_pkg.items(), key=lambda kv: -kv[1])},
            "top_own": [{"frame": k, "share": round(v / total, 3)} for k, v in rows]}


def throughput(cluster: Cluster, topic: str, acks: str, n: int, value_bytes: int) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "linger.ms": 5})
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    lat: list[float] = []
    errors: list = []

    # warm up: connections, metadata and (idempotence) InitProducerId, which librdkafka
    # issues ~0.5 s after start: not part of the steady-state figures
    p.produce(topic, value, partition=0)
    assert p.flush(30) == 0, "warm-up record not delivered"
    pids = [b.proc.pid for b in cluster.brokers if b.proc] + [cluster.ctrl.proc.pid]
    cpu0 = sum(cpu_s(pid) for pid in pids)
    client0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        produce_waiting(p, topic, value, partition=0,
                        on_delivery=lambda err, msg, t=t: (errors.append(err) if err else
                                                           lat.append(time.perf_counter() - t)))
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    cpu = sum(cpu_s(pid) for pid in pids) - cpu0
    client_cpu = time.process_time() - client0
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:3]}"
    mb = n * value_bytes / 1e6
    return {"records": n, "value_bytes": value_bytes, "seconds": round(elapsed, 3),
            "mb_per_s": round(mb / elapsed, 2), "records_per_s": round(n / elapsed),
            "delivery_latency_p50_ms": round(pct(lat, 0.5) * 1000, 2),
            "delivery_latency_p99_ms": round(pct(lat, 0.99) * 1000, 2),
            "server_cpu_s_per_mb": round(cpu / mb, 4), "client_cpu_s_per_mb": round(client_cpu / mb, 4)}


def sequential_latency(cluster: Cluster, topic: str, acks: str, n: int = 300) -> dict:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "linger.ms": 0})
    lat = []
    p.produce(topic, b"warm-up", partition=0)
    assert p.flush(30) == 0
    for i in range(n):
        t = time.perf_counter()
        p.produce(topic, b"x" * 100, partition=0)
        assert p.flush(10) == 0
        lat.append(time.perf_counter() - t)
    return {"records": n, "p50_ms": round(pct(lat, 0.5) * 1000, 2), "p99_ms": round(pct(lat, 0.99) * 1000, 2)}


def setup_topics(cluster: Cluster) -> None:
    cluster.create_topic("rf1", {0: [1]})
    cluster.create_topic("rf3", {0: [1, 2, 3]})
    cluster.wait_image(lambda im: all(t in im.topic_ids for t in ("rf1", "rf3")) and
                       len(im.partition(im.topic_ids["rf3"], 0).isr) == 3, 30, "bench topics")
    wait_until(lambda: cluster.produce_raw(cluster.brokers[0], "rf3", 0, [b"warm"])[0] == 0, 30, "rf3 writable")
    wait_until(lambda: cluster.produce_raw(cluster.brokers[0], "rf1", 0, [b"warm"], acks=1)[0] == 0, 30, "rf1 writable")


def run_cluster_bench(args, work: Path) -> dict:
    out: dict = {}
    c = Cluster(work / "plain", session_timeout_ms=9000)
    try:
        c.prepare()
        c.start()
        setup_topics(c)
        out["throughput_acks1_rf1"] = throughput(c, "rf1", "1", args.records, args.value_bytes)
        out["throughput_acksall_rf3"] = throughput(c, "rf3", "all", args.records, args.value_bytes)
        out["latency_sequential_acks1_rf1"] = sequential_latency(c, "rf1", "1")
        out["latency_sequential_acksall_rf3"] = sequential_latency(c, "rf3", "all")
        # where the time goes: the same loads again with py-spy on the leader (and a follower)
        leader, follower = c.brokers[0], c.brokers[1]
        s1 = Sampler(leader.proc.pid, str(work / "leader-acks1.txt"))
        throughput(c, "rf1", "1", args.records, args.value_bytes)
        out["profile_leader_acks1_rf1"] = s1.stop()
        s2 = Sampler(leader.proc.pid, str(work / "leader-acksall.txt"))
        s3 = Sampler(follower.proc.pid, str(work / "follower-acksall.txt"))
        throughput(c, "rf3", "all", args.records, args.value_bytes)
        out["profile_leader_acksall_rf3"] = s2.stop()
        out["profile_follower_acksall_rf3"] = s3.stop()
    finally:
        c.kill()
    return out


def run_eio_bench(args, work: Path) -> dict:
    reason = loop_skip_reason()
    if reason:
        return {"skipped": reason}
    fs = LoopFs(size_mb=512)
    c = Cluster(work / "eio", n_brokers=1, session_timeout_ms=9000,
                broker_extra={"log.dir.probe.interval.ms": "1000", "min.insync.replicas": "1"})
    try:
        fs.setup()
        c.start_with_dir(fs.mnt)
        b = c.brokers[0]
        n = args.eio_partitions * 3
        t0 = time.monotonic()
        c.create_topic("many", {p: [1] for p in range(n)})
        dir_id = b.dir_ids()[fs.mnt]
        im = c.wait_image(lambda im: "many" in im.topic_ids and len(im.partitions_of(im.topic_ids["many"])) == n
                          and all(p.directories[0] != UNASSIGNED for p in im.partitions_of(im.topic_ids["many"]).values()),
                          600, f"{n} partitions placed")
        setup_s = time.monotonic() - t0
        in_dir = sum(1 for p in im.partitions_of(im.topic_ids["many"]).values() if p.directories[0] == dir_id)
        wait_until(lambda: len([x for x in os.listdir(fs.mnt) if x.startswith("many-")]) == in_dir, 120, "logs created")
        time.sleep(2.5)  # idle: only the probe can notice
        t_eio = time.time_ns()
        fs.shutdown()
        ctrl_events = c.ctrl.events_path

        def committed():
            from kafka_runtime.events import read_events
            return [e for e in read_events(ctrl_events) if e["event"] == "broker_log_dirs_changed"]
        wait_until(committed, 60, "controller commit of the offline dir")
        commit = committed()[0]
        broker_ev = [e for e in b.events() if e["event"] in ("probe_failed", "dir_offline") and e["ts_ns"] >= t_eio]
        detected = min((e["ts_ns"] for e in broker_ev), default=None)
        changes = [e for e in __import__("kafka_runtime.events", fromlist=["read_events"]).read_events(ctrl_events)
                   if e["event"] == "partition_change" and e.get("reason") == "log_dir_offline"]
        return {"partitions_in_failed_dir": in_dir, "probe_interval_ms": 1000, "setup_s": round(setup_s, 1),
                "eio_to_broker_detect_ms": round((detected - t_eio) / 1e6, 1) if detected else None,
                "eio_to_controller_commit_ms": round((commit["ts_ns"] - t_eio) / 1e6, 1),
                "detect_to_commit_ms": round((commit["ts_ns"] - detected) / 1e6, 1) if detected else None,
                "partition_changes_committed": len(changes)}
    finally:
        c.kill()
        fs.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--eio-partitions", type=int, default=1000)
    ap.add_argument("--skip-eio", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "broker.json"))
    args = ap.parse_args()
    result: dict = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="jbodtest-bench-") as tmp:
        work = Path(tmp)
        result.update(run_cluster_bench(args, work))
        if not args.skip_eio:
            result["eio_to_commit"] = run_eio_bench(args, work)
    for key, value in result.items():
        if key.startswith("profile_") and value:
            print(f"{key}: {value['samples']} samples; by package {value['share_by_package']}")
            for row in value["top_own"][:10]:
                print(f"    {row['share']:6.1%} {row['frame']}")
        else:
            print(f"{key}: {json.dumps(value)}")
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
