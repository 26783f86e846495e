"""Replication benchmark (not a test): acks=all RF 3 with many partitions per leader, and
service around a dir failure. Real kraft-controller + 3 kraft-brokers × 3 dirs on loopback,
confluent-kafka (librdkafka) clients.

    jbodlab bench replication [-- --part scale|failover|all] [--partitions 1,2,10,100,1000]
                              [--producers 1,4,16] [--seconds 8] [--value-bytes 1024]
                              [--window 1000] [--failover-runs 1] [--out FILE]

1. **scale**: one topic per partition count N (every partition led by broker 1, replicas
   [1, 2, 3], min.insync.replicas=2), P confluent-kafka producers (acks=all, idempotent,
   linger 5 ms), each a closed loop with at most ``--window`` records outstanding, values of
   ``--value-bytes``, spread round-robin over the N partitions, for ``--seconds``. Figures:
   aggregate MB/s, p50/p99 delivery latency (delivery callback − produce call), CPU seconds
   per MB of the three brokers together and of the leader alone (/proc/<pid>/stat). N sweeps
   1, 2, 10, 100, 1000 with one producer; P sweeps 1, 4, 16 at N=1 and N=100. Topics of
   earlier rows stay (idle) while later rows run.
2. **failover** (issue 10's outside-the-lab case): topic of 9 partitions RF 3 (leaders
   spread), broker 1's first data dir an ext4 loop fs; a confluent-kafka producer, acks=all,
   NOT idempotent, 300 records/s round-robin; after 10 s the fs is shut down
   (EXT4_IOC_SHUTDOWN → EIO), 20 s more, then every partition is read back. Figures per
   partition: pre-fault p50, p50/p99 from 2 s after the fault, the first ack of a record sent
   after the fault; over 1 s windows of send time (every 250 ms) from the failover
   (controller commit) on: when a window's p50 is first within 2× the pre-fault p50, the
   highest window p50 / pre-fault p50 in the first 3 s, from when every later window stays
   within 2×, and the windows that do not (on a shared machine a hiccup shows in every
   partition at once); plus lost acked records and duplicates.
   Then every broker is stopped (SIGTERM, controlled shutdown; broker 1 with its dir
   offline) while ``--hogs`` busy processes (2) load the cores: seconds per stop.
   Needs root + loop devices (skipped otherwise, said so).

Prints a table per part and writes ``results/bench/replication.json``. The machine's 2
cores are shared by clients and brokers: figures compare builds, they are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

from loopdev import LoopFs, skip_reason as loop_skip_reason  # noqa: E402

from testkit.cluster import Cluster, wait_until  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
BROKER = {"replica.fetch.wait.max.ms": "500", "replica.lag.time.max.ms": "30000",
          "min.insync.replicas": "2", "log.dir.probe.interval.ms": "1000"}


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


# ---------------------------------------------------------------------------- scale
class ClosedLoopProducer:
    """One confluent-kafka producer thread with at most ``window`` records outstanding."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, value: bytes, window: int, offset: int,
                 idempotent: bool) -> None:
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                           "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic, self.partitions, self.value, self.window = topic, partitions, value, window
        self.next = offset
        self.outstanding = 0
        self.lat: list[float] = []
        self.errors: list = []
        self.delivered = 0
        self.measuring = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg, t: float) -> None:
        self.outstanding -= 1
        if err:
            self.errors.append(str(err))
        elif self.measuring:
            self.delivered += 1
            self.lat.append(time.perf_counter() - t)

    def warm(self) -> int:
        """One record per partition; returns how many were not delivered within 30 s."""
        for i in range(self.partitions):
            self.p.produce(self.topic, b"warm", partition=i)
        return self.p.flush(30)

    def _run(self) -> None:
        p = self.p
        while not self.stop.is_set():
            if self.outstanding >= self.window:
                p.poll(0.001)
                continue
            t = time.perf_counter()
            try:
                p.produce(self.topic, self.value, partition=self.next % self.partitions,
                          on_delivery=lambda err, msg, t=t: self._cb(err, msg, t))
            except BufferError:
                p.poll(0.005)
                continue
            self.outstanding += 1
            self.next += 1
            p.poll(0)
        p.flush(10)


def scale_row(c: Cluster, topic: str, partitions: int, producers: int, args) -> dict:
    value = os.urandom(args.value_bytes // 2).hex().encode()[:args.value_bytes]
    ps = [ClosedLoopProducer(c.bootstrap, topic, partitions, value, args.window, i * 7919, args.idempotent)
          for i in range(producers)]
    undelivered = sum(p.warm() for p in ps)   # a build that cannot ack them still gets its row measured
    for p in ps:
        p.thread.start()
    time.sleep(1.0)  # ramp: connections busy, windows full
    samplers = []
    if partitions in args.profile_at and producers == 1:
        from broker_bench import Sampler
        samplers = [(role, Sampler(b.proc.pid, f"/tmp/jbodlab-repl-bench-{role}-{partitions}.txt"))
                    for role, b in (("leader", c.brokers[0]), ("follower", c.brokers[1]))]
    pids = [b.proc.pid for b in c.brokers]
    cpu0 = [cpu_s(pid) for pid in pids]
    for p in ps:
        p.measuring = True
    t0 = time.perf_counter()
    time.sleep(args.seconds)
    for p in ps:
        p.measuring = False
    elapsed = time.perf_counter() - t0
    cpu = [cpu_s(pid) - c0 for pid, c0 in zip(pids, cpu0)]
    delivered = sum(p.delivered for p in ps)
    profiles = {role: smp.stop() for role, smp in samplers}
    for p in ps:
        p.stop.set()
    for p in ps:
        p.thread.join(150)
    lat = [x for p in ps for x in p.lat]
    errors = [e for p in ps for e in p.errors]
    mb = delivered * args.value_bytes / 1e6
    return {"partitions": partitions, "producers": producers, "seconds": round(elapsed, 2),
            "records": delivered, "mb_per_s": round(mb / elapsed, 2),
            "p50_ms": round(pct(lat, 0.5) * 1000, 1), "p99_ms": round(pct(lat, 0.99) * 1000, 1),
            "brokers_cpu_s_per_mb": round(sum(cpu) / mb, 4) if mb else None,
            "leader_cpu_s_per_mb": round(cpu[0] / mb, 4) if mb else None,
            "errors": len(errors), "first_errors": errors[:3], "warm_up_undelivered_after_30s": undelivered, **({"profile": profiles} if profiles else {})}


def run_scale(args, work: Path) -> dict:
    counts = [int(x) for x in args.partitions.split(",")]
    producer_counts = [int(x) for x in args.producers.split(",")]
    c = Cluster(work / "scale", session_timeout_ms=9000, broker_extra=dict(BROKER))
    rows = []
    try:
        c.prepare()
        c.start()
        for n in counts:
            topic = f"s{n}"
            c.create_topic(topic, {p: [1, 2, 3] for p in range(n)})
            c.wait_image(lambda im: topic in im.topic_ids and len(im.partitions_of(im.topic_ids[topic])) == n
                         and all(len(p.isr) == 3 for p in im.partitions_of(im.topic_ids[topic]).values()),
                         300, f"{topic}: {n} partitions with full ISRs")
            for pc in (producer_counts if n in (1, 100) else [1]):
                row = scale_row(c, topic, n, pc, args)
                print(f"  scale: {json.dumps({k: v for k, v in row.items() if k != 'profile'})}", flush=True)
                for role, prof in (row.get("profile") or {}).items():
                    if prof:
                        print(f"    profile {role} ({prof['samples']} samples, py-spy; figures of this row are"
                              f" slowed by it): {prof['share_by_package']}")
                        for r in prof["top_own"][:12]:
                            print(f"      {r['share']:6.1%} {r['frame']}")
                rows.append(row)
    finally:
        c.kill()
    return {"rows": rows, "seconds_per_row": args.seconds, "window": args.window, "value_bytes": args.value_bytes}


# ---------------------------------------------------------------------------- failover
class RateProducer:
    """acks=all, NOT idempotent (as the issue's client), ``rate`` records/s round-robin."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                           "linger.ms": 5})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.sent: list[tuple[int, int, float]] = []          # (seq, partition, t)
        self.acked: dict[int, float] = {}                     # seq → ack time
        self.errors: list[tuple[int, str, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg, seq: int) -> None:
        now = time.monotonic()
        if err:
            self.errors.append((seq, str(err), now))
        else:
            self.acked[seq] = now

    def _run(self) -> None:
        seq, t0 = 0, time.monotonic()
        while not self.stop.is_set():
            due = t0 + seq / self.rate
            now = time.monotonic()
            if now < due:
                self.p.poll(min(due - now, 0.01))
                continue
            part = seq % self.partitions
            self.p.produce(self.topic, f"v-{seq}".encode(), partition=part,
                           on_delivery=lambda err, msg, s=seq: self._cb(err, msg, s))
            self.sent.append((seq, part, now))
            seq += 1
            self.p.poll(0)
        self.p.flush(120)


def read_back(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> dict[bytes, int]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-readback", "enable.auto.commit": False})
    counts: dict[bytes, int] = {}
    try:
        ends = {}
        for i in range(partitions):
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, i), timeout=10)
            ends[i] = hi
        c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
        pos = {i: 0 for i in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(pos[i] < ends[i] for i in pos) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            pos[m.partition()] = m.offset() + 1
            counts[m.value()] = counts.get(m.value(), 0) + 1
    finally:
        c.close()
    return counts


def failover_run(args, work: Path) -> dict:
    fs = LoopFs(size_mb=256)
    c = Cluster(work, session_timeout_ms=9000, broker_extra=dict(BROKER))
    try:
        fs.setup()
        c.start_with_dir(fs.mnt)
        b1 = c.brokers[0]
        n = 9
        c.create_topic("svc", {p: [(p + k) % 3 + 1 for k in range(3)] for p in range(n)})
        im = c.wait_image(lambda im: "svc" in im.topic_ids and all(
            len(p.isr) == 3 and UNASSIGNED not in p.directories
            for p in im.partitions_of(im.topic_ids["svc"]).values()), 60, "svc ISRs full, replicas placed")
        d0 = b1.dir_ids()[fs.mnt]
        tid = im.topic_ids["svc"]
        in_dir = sorted(p for p, reg in im.partitions_of(tid).items() if reg.directory(1) == d0)
        leaders0 = {p: reg.leader for p, reg in im.partitions_of(tid).items()}
        prod = RateProducer(c.bootstrap, "svc", n, args.rate)
        prod.thread.start()
        time.sleep(3 + args.before_s)
        fault = time.monotonic()
        fault_ns = time.time_ns()
        fs.shutdown()
        time.sleep(args.after_s)
        prod.stop.set()
        prod.thread.join(150)
        end = time.monotonic()
        from kafka_runtime.events import read_events
        commits = [e for e in read_events(c.ctrl.events_path)
                   if e["event"] == "broker_log_dirs_changed" and e["ts_ns"] >= fault_ns]
        failover = fault + (commits[0]["ts_ns"] - fault_ns) / 1e9 if commits else None
        im = c.image()
        leaders1 = {p: reg.leader for p, reg in im.partitions_of(tid).items()}
        counts = read_back(c.bootstrap, "svc", n)
        # controlled shutdown of every broker (broker 1 with its dir offline) while
        # ``--hogs`` busy processes load the cores
        import subprocess
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
        stops = []
        try:
            time.sleep(0.5 if hogs else 0)
            t_stop = time.monotonic()
            for b in c.brokers:
                t = time.monotonic()
                rc = b.stop(30)
                stopped = [e for e in b.events() if e["event"] == "stopped"]
                stops.append({"broker": b.node_id, "rc": rc, "seconds": round(time.monotonic() - t, 2),
                              "steps_ms": stopped[-1]["steps_ms"] if stopped else None})
            stop_all_s = time.monotonic() - t_stop
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    finally:
        c.kill()
        fs.cleanup()

    warm_end = min(t for _s, _p, t in prod.sent) + 3
    per: dict[int, dict] = {}
    for p in range(n):
        rows = [(s, t, prod.acked.get(s)) for s, part, t in prod.sent if part == p]
        pre = [a - t for _s, t, a in rows if a is not None and warm_end <= t < fault]
        during = [a - t for _s, t, a in rows if a is not None and t >= fault + 2]
        after_fault = [a for _s, t, a in rows if a is not None and t >= fault]
        p50_pre = statistics.median(pre) if pre else float("nan")
        # recovery: from the failover on, the first 1 s window of sends after which every
        # later window's p50 stays within 2x the pre-fault p50
        rec = back = None
        over: list = []
        early: list = []
        if failover is not None and pre:
            wins = []
            t = failover
            while t + 1 <= end - 1:
                w = [(a - st) if a is not None else float("inf") for _s, st, a in rows if t <= st < t + 1]
                wins.append((t, statistics.median(w) if w else 0.0))
                t += 0.25
            for i, (t, _m) in enumerate(wins):
                if all(m <= 2 * p50_pre for _t, m in wins[i:]):
                    rec = t - failover
                    break
            over = [(round(t - failover, 2), round(m * 1000, 1)) for t, m in wins if m > 2 * p50_pre]
            back = next((t - failover for t, m in wins if m <= 2 * p50_pre), None)
            early = [m / p50_pre for t, m in wins if t < failover + 3]
        per[p] = {"leader": f"{leaders0[p]}->{leaders1.get(p)}", "in_failed_dir": p in in_dir,
                  "pre_p50_ms": round(p50_pre * 1000, 1),
                  "during_p50_ms": round(pct(during, 0.5) * 1000, 1) if during else None,
                  "during_p99_ms": round(pct(during, 0.99) * 1000, 1) if during else None,
                  "first_ack_after_fault_ms": round((min(after_fault) - fault) * 1000) if after_fault else None,
                  "back_within_2x_after_failover_ms": None if back is None else round(back * 1000),
                  "max_p50_ratio_first_3s": round(max(early), 2) if early else None,
                  "sustained_within_2x_after_failover_ms": None if rec is None else round(rec * 1000),
                  "unacked_sent_after_fault": sum(1 for _s, t, a in rows if t >= fault and a is None),
                  "windows_over_2x": over[:20]}
    acked_values = {f"v-{s}".encode() for s in prod.acked}
    lost = sum(1 for v in acked_values if v not in counts)
    dups = sum(k - 1 for k in counts.values() if k > 1)
    return {"fault_to_failover_ms": round((failover - fault) * 1000) if failover else None,
            "partitions_in_failed_dir": in_dir, "sent": len(prod.sent), "acked": len(prod.acked),
            "errors": len(prod.errors), "lost_acked": lost, "duplicates": dups, "per_partition": per,
            "broker_stop": stops, "stop_all_s": round(stop_all_s, 2)}


def run_failover(args, work: Path) -> dict:
    reason = loop_skip_reason()
    if reason:
        return {"skipped": reason}
    runs = []
    for i in range(args.failover_runs):
        r = failover_run(args, work / f"failover{i}")
        print(f"  failover run {i}: fault→failover {r['fault_to_failover_ms']} ms, acked {r['acked']}/{r['sent']}, "
              f"lost {r['lost_acked']}, duplicates {r['duplicates']}, errors {r['errors']}, stops {r['broker_stop']}",
              flush=True)
        for p, row in r["per_partition"].items():
            print(f"    p{p}: {json.dumps(row)}", flush=True)
        runs.append(r)
    return {"runs": runs, "rate": args.rate}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("scale", "failover", "all"), default="all")
    ap.add_argument("--partitions", default="1,2,10,100,1000")
    ap.add_argument("--producers", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--no-idempotence", dest="idempotent", action="store_false",
                    help="enable.idempotence=false (librdkafka then keeps up to 1M requests in flight per broker;"
                         " default: idempotent, at most 5)")
    ap.add_argument("--rate", type=int, default=300)
    ap.add_argument("--before-s", type=float, default=10.0)
    ap.add_argument("--after-s", type=float, default=20.0)
    ap.add_argument("--failover-runs", type=int, default=1)
    ap.add_argument("--hogs", type=int, default=2, help="busy processes during the failover part's broker stops")
    ap.add_argument("--profile-at", default="", help="partition counts whose 1-producer row runs under py-spy")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "replication.json"))
    args = ap.parse_args()
    args.profile_at = {int(x) for x in args.profile_at.split(",") if x}
    result: dict = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                             "loadavg_at_start": os.getloadavg()},
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="jbodtest-bench-") as tmp:
        work = Path(tmp)
        if args.part in ("scale", "all"):
            result["scale"] = run_scale(args, work)
        if args.part in ("failover", "all"):
            result["failover"] = run_failover(args, work)
    if "scale" in result:
        print("partitions producers   MB/s   p50 ms   p99 ms  brokers CPU s/MB  leader CPU s/MB  errors")
        for r in result["scale"]["rows"]:
            print(f"{r['partitions']:>10} {r['producers']:>9} {r['mb_per_s']:>6} {r['p50_ms']:>8} {r['p99_ms']:>8} "
                  f"{r['brokers_cpu_s_per_mb']!s:>17} {r['leader_cpu_s_per_mb']!s:>16} {r['errors']:>7}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=sorted)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
