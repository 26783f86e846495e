"""Replication benchmark (not a test): acks=all RF 3 with many partitions per leader, and
service around a dir failure. Real kraft-controller + 3 kraft-brokers × 3 dirs on loopback,
confluent-kafka (librdkafka) clients.

    jbodlab bench replication [-- --part scale|failover|all] [--partitions 1,2,10,100,1000]
                              [--producers 1,4,16] [--producers-at 1,100]
                              [--modes throughput,latency[,window]] [--seconds 8] [--ramp 2]
                              [--rate-mbs 10] [--value-bytes 1024] [--window 1000]
                              [--client librdkafka|kafka-python] [--profile-at 100,1000]
                              [--failover-runs 1] [--split-cores] [--out FILE]

1. **scale**: one topic per partition count N (every partition led by broker 1, replicas
   [1, 2, 3], min.insync.replicas=2), P confluent-kafka producers (acks=all, idempotent,
   linger 5 ms, otherwise librdkafka's defaults), values of ``--value-bytes``, round-robin
   over the N partitions. N sweeps 1, 2, 10, 100, 1000 with one producer; P sweeps 1, 4, 16
   at N in ``--producers-at``. Topics of earlier rows stay (idle) while later rows run. Each
   row runs these phases (``--modes``), each measured for ``--seconds`` after ``--ramp``:
   - ``throughput`` — answers "aggregate throughput at 100 partitions ≥ 0.8× 1 partition":
     each producer calls produce() as fast as librdkafka's queue (100k records / 1 GiB)
     accepts, so batches grow to what linger/batch.size/in-flight limits make of them, as
     in a user's bulk producer. Figure: acked MB/s (no per-record callbacks, so the client
     costs little CPU), brokers' CPU s/MB. Its latency would only be queue depth /
     throughput, so none is reported.
   - ``latency`` — answers "p99 under load within 2× of the 1-partition p99": a fixed
     offered load of ``--rate-mbs`` MB/s in total (default 10, a fraction of what one
     partition carries) paced by the clock, spread over the producers and partitions;
     p50/p99 of delivery latency (callback − produce call) of the records sent while
     measured, sent MB/s (below the offer when the client queue refuses), brokers' CPU s/MB.
     ``--client kafka-python`` runs this phase through kafka-python instead (same acks,
     idempotence, linger and in-flight cap), whose requests carry every ready partition of
     the broker where librdkafka's carry one: the rows then show how the brokers scale with
     partitions when the client does not serialise them into one request each.
   - ``window`` — the first method, kept for comparison: at most ``--window`` records
     outstanding per producer, so each batch holds ~window/N records and the figure falls
     with N by construction; MB/s and the p50/p99 of that saturated window.
   CPU: /proc/<pid>/stat of the three brokers together and of the leader alone; beside
   them the machine's busy share (/proc/stat, every core) and the cores this process used
   (the clients: their Python threads and librdkafka's), so a row whose clients take the
   machine says so.
   ``--split-cores``: the clients on the first CPU, the brokers and the controller on the
   others. By default everything shares every core, and P saturating producers bring
   ~6 busy librdkafka threads each: at 16 the scheduler gives the brokers' few threads so
   little time that 1 partition × 16 producers carried 14–20 MB/s where one producer
   carries ~100 (the brokers at 5–10 % of a core, the client at 158 %); split, 63 MB/s.
   The leader's own view (its ``request_metrics`` events, one per second here): Produce
   requests/s and the mean time per phase — queue, local, remote (waiting for the followers),
   send — with the p99 of its total, and its followers' Fetch requests/s: what the broker adds
   to each round trip, so that the rest of a client's latency is the client's own queue.
   ``--profile-at N,…``: the 1-producer phases at those N run with py-spy attached to the
   leader and one follower (samples in /tmp/jbodlab-repl-bench-{leader,follower}-MODE-N.txt).
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

3. **rtt** (only when asked: ``--part rtt``): one request at a time on one connection, the
   round trip of a one-record Produce with acks=1 and acks=all at 1 and 100 partitions
   (p50/p90/p99 of ``--rtt-requests``): the floor under the latency goal, since librdkafka's
   idempotent producer puts a record at N partitions behind ~N/5 such round trips; and one
   acks=all request carrying a record for each of the 100 partitions (a tenth as many), the
   floor for clients that send a broker's ready partitions together (kafka-python, Java).

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
from bench_io import cpu_s, host_jiffies  # noqa: E402

BROKER = {"replica.fetch.wait.max.ms": "500", "replica.lag.time.max.ms": "30000",
          "min.insync.replicas": "2", "log.dir.probe.interval.ms": "1000",
          "metrics.sample.window.ms": "1000"}   # request metrics per second (leader_produce)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


# ---------------------------------------------------------------------------- scale
def _producer(bootstrap: str, idempotent: bool, extra: dict | None = None):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
            "linger.ms": 5, "message.timeout.ms": 120000}
    conf.update(extra or {})
    return Producer(conf)


class SaturatingProducer:
    """The shape users run for throughput: librdkafka's defaults (queue of 100k records /
    1 GiB, batch.size 1 MB, linger.ms 5) and a thread producing as fast as produce() accepts,
    round-robin over the partitions. No per-record callbacks (``delivery.report.only.error``):
    delivered = produced − still queued or in flight (``len(producer)``) − errors."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, value: bytes, offset: int,
                 idempotent: bool) -> None:
        self.errors: list[str] = []
        self.p = _producer(bootstrap, idempotent, {"delivery.report.only.error": True,
                                                   "on_delivery": self._cb})
        self.topic, self.partitions, self.value = topic, partitions, value
        self.next = offset
        self.produced = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg) -> None:
        if err and not self.stop.is_set():   # the purge at the end fails what is still queued
            self.errors.append(str(err))

    def delivered(self) -> int:
        return self.produced - len(self.p) - len(self.errors)

    def _run(self) -> None:
        p, topic, value, n = self.p, self.topic, self.value, self.partitions
        while not self.stop.is_set():
            try:
                for _ in range(256):
                    p.produce(topic, value, partition=self.next % n)
                    self.next += 1
                    self.produced += 1
            except BufferError:
                p.poll(0.001)
                continue
            p.poll(0)
        # drop what is still queued (a slow build would need minutes to drain it)
        p.purge(in_queue=True, in_flight=False)
        p.flush(60)


class FixedLoadProducer:
    """A fixed offered load: ``rate`` records/s, round-robin over the partitions, each record's
    delivery latency (callback − produce call) recorded."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, value: bytes, offset: int,
                 idempotent: bool, rate: float) -> None:
        self.p = self._make_producer(bootstrap, idempotent)
        self.topic, self.partitions, self.value, self.rate = topic, partitions, value, rate
        self.next = offset
        self.lat: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self.measuring = False
        self.sent_measuring = 0
        self.delivered = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _make_producer(bootstrap: str, idempotent: bool):
        return _producer(bootstrap, idempotent)

    def _cb(self, err, msg, t: float, measured: bool) -> None:
        if err:
            self.errors.append(str(err))
        elif measured:
            self.delivered += 1
            self.lat.append(time.perf_counter() - t)

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self.stop.is_set():
            now = time.perf_counter()
            due = int((now - t0) * self.rate)
            m = self.measuring
            while self.sent < due:
                if not self._send(self.next % self.partitions, now, m):
                    break
                self.next += 1
                self.sent += 1
                if m:
                    self.sent_measuring += 1
            self._pause()
        self._finish()

    def _send(self, partition: int, t: float, measured: bool) -> bool:
        """Hand one record to the client; False when its queue is full."""
        try:
            self.p.produce(self.topic, self.value, partition=partition,
                           on_delivery=lambda err, msg: self._cb(err, msg, t, measured))
        except BufferError:
            return False
        return True

    def _pause(self) -> None:
        self.p.poll(0.001)

    def _finish(self) -> None:
        self.p.flush(60)
        self.p.purge(in_queue=True, in_flight=False)
        self.p.flush(10)


class KafkaPythonLoadProducer(FixedLoadProducer):
    """The same fixed offered load through kafka-python (``--client kafka-python``), whose
    sender puts the ready batches of every partition led by a broker into ONE ProduceRequest
    (as the Java producer does), where librdkafka 2.16 sends one request per partition
    (librdkafka issue #1700). acks=all, idempotent unless ``--no-idempotence``, linger 5 ms,
    batches up to 1 MiB, at most 5 requests in flight per connection — librdkafka's settings
    (kafka-python's own batch size, 16 KiB, would cap one partition at 5 × 16 records per
    round trip and measure the client at 10 MB/s), so a row differs
    from the librdkafka row only in how the client packs partitions into requests."""

    @staticmethod
    def _make_producer(bootstrap: str, idempotent: bool):
        from kafka import KafkaProducer
        return KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                             linger_ms=5, max_in_flight_requests_per_connection=5, batch_size=1 << 20,
                             delivery_timeout_ms=120000, request_timeout_ms=30000)

    def _send(self, partition: int, t: float, measured: bool) -> bool:
        fut = self.p.send(self.topic, self.value, partition=partition)
        fut.add_callback(lambda _md: self._cb(None, None, t, measured))
        fut.add_errback(lambda exc: self._cb(exc, None, t, measured))
        return True

    def _pause(self) -> None:
        time.sleep(0.001)

    def _finish(self) -> None:
        self.p.flush(60)
        self.p.close(10)


LOAD_PRODUCERS = {"librdkafka": FixedLoadProducer, "kafka-python": KafkaPythonLoadProducer}


class ClosedLoopProducer:
    """The issue's first method, kept for comparison (``--modes window``): at most ``window``
    records outstanding per producer, so at N partitions each batch carries ~window/N records."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, value: bytes, window: int, offset: int,
                 idempotent: bool) -> None:
        self.p = _producer(bootstrap, idempotent)
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


def warm(c: Cluster, topic: str, partitions: int, idempotent: bool) -> int:
    """One record per partition; returns how many were not delivered within 30 s."""
    p = _producer(c.bootstrap, idempotent)
    for i in range(partitions):
        p.produce(topic, b"warm", partition=i)
    return p.flush(30)


class _Measure:
    """Brokers' CPU (/proc/<pid>/stat) and optional py-spy samplers over one measured phase."""

    def __init__(self, c: Cluster, profile_tag: str | None) -> None:
        self.samplers = []
        if profile_tag:
            from broker_bench import Sampler
            self.samplers = [(role, Sampler(b.proc.pid, f"/tmp/jbodlab-repl-bench-{role}-{profile_tag}.txt"))
                             for role, b in (("leader", c.brokers[0]), ("follower", c.brokers[1]))]
        self.pids = [b.proc.pid for b in c.brokers]
        self.leader = c.brokers[0]
        self.cpu0 = [cpu_s(pid) for pid in self.pids]
        self.host0, self.own0 = host_jiffies(), os.times()
        self.load: dict = {}
        self.t0 = time.perf_counter()
        self.t0_ns = time.time_ns()
        self.leader_produce: dict | None = None

    def done(self) -> tuple[float, list[float], dict]:
        elapsed = time.perf_counter() - self.t0
        cpu = [cpu_s(pid) - c0 for pid, c0 in zip(self.pids, self.cpu0)]
        (busy1, total1), own1 = host_jiffies(), os.times()
        busy0, total0 = self.host0
        # the whole machine, and this process (the clients: their threads and librdkafka's)
        self.load = {"host_cpu_busy": round((busy1 - busy0) / max(1, total1 - total0), 3),
                     "clients_cpu_cores": round((own1.user + own1.system - self.own0.user - self.own0.system)
                                                / elapsed, 3)}
        events, t1_ns = self.leader.events(), time.time_ns()
        self.leader_produce = broker_side(events, "0", self.t0_ns, t1_ns)
        if self.leader_produce:   # its followers' fetches, for the replication round they make
            self.leader_produce["fetch"] = broker_side(events, "1", self.t0_ns, t1_ns)
        return elapsed, cpu, {role: smp.stop() for role, smp in self.samplers}


def broker_side(events: list[dict], api: str, t0_ns: int, t1_ns: int) -> dict | None:
    """The leader's own view of one API over [t0, t1]: its ``request_metrics`` windows that
    lie inside (metrics.sample.window.ms = 1 s). Requests/s, the count-weighted mean of each
    phase (queue: behind the connection's earlier requests; local: decode + handler;
    remote: waiting for the followers; send: behind earlier answers), and the median and
    highest of the windows' p99 of the total — what the broker adds to a round trip, so the
    rest of a client's latency is the client's own queue."""
    wins = [e["apis"][api] for e in events
            if e.get("event") == "request_metrics" and api in e.get("apis", {})
            and e["ts_ns"] - e["window_ms"] * 1e6 >= t0_ns and e["ts_ns"] <= t1_ns]
    n = sum(w["count"] for w in wins)
    if not n:
        return None
    secs = len(wins)   # 1 s windows
    p99s = sorted(w["total"]["p99"] for w in wins)
    return {"windows": len(wins), "requests_per_s": round(n / secs),
            **{f"{ph}_mean_ms": round(sum(w[ph]["mean"] * w["count"] for w in wins) / n, 2)
               for ph in ("queue", "local", "remote", "send", "total")},
            "total_p99_ms_median_window": p99s[len(p99s) // 2], "total_p99_ms_max_window": p99s[-1]}


def _cpu_fields(cpu: list[float], mb: float) -> dict:
    return {"brokers_cpu_s_per_mb": round(sum(cpu) / mb, 4) if mb else None,
            "leader_cpu_s_per_mb": round(cpu[0] / mb, 4) if mb else None}


def _tail_fields(ps: list, cpu: list[float], mb: float, profiles: dict, leader_produce: dict | None = None,
                 load: dict | None = None) -> dict:
    """The fields every phase ends with: CPU per MB, the machine's and the clients' CPU, the
    producers' errors, the leader's own produce timings, the profiles."""
    errors = [e for p in ps for e in p.errors]
    return {**_cpu_fields(cpu, mb), **(load or {}), "errors": len(errors), "first_errors": errors[:3],
            **({"leader_produce": leader_produce} if leader_produce else {}),
            **({"profile": profiles} if any(profiles.values()) else {})}


def _stop_all(ps: list) -> None:
    for p in ps:
        p.stop.set()
    for p in ps:
        p.thread.join(150)


def _measured(c: Cluster, ps: list, args, profile_tag: str | None, settle_s: float = 0.0):
    """Start the producers, let them ramp up, flag ``measuring`` for ``args.seconds`` under
    :class:`_Measure`, wait ``settle_s`` (acks of measured records still arriving), stop
    them. Returns ``_Measure.done()``'s (elapsed, cpu, profiles) and the leader's produce timings."""
    for p in ps:
        p.thread.start()
    time.sleep(args.ramp)
    for p in ps:
        p.measuring = True
    m = _Measure(c, profile_tag)
    time.sleep(args.seconds)
    for p in ps:
        p.measuring = False
    done = m.done()
    time.sleep(settle_s)
    _stop_all(ps)
    return (*done, m.leader_produce, m.load)


def throughput_phase(c: Cluster, topic: str, partitions: int, producers: int, value: bytes, args,
                     profile_tag: str | None) -> dict:
    ps = [SaturatingProducer(c.bootstrap, topic, partitions, value, i * 7919, args.idempotent)
          for i in range(producers)]
    for p in ps:
        p.thread.start()
    time.sleep(args.ramp)  # queues full, every connection busy
    d0 = sum(p.delivered() for p in ps)
    m = _Measure(c, profile_tag)
    time.sleep(args.seconds)
    d1 = sum(p.delivered() for p in ps)
    elapsed, cpu, profiles = m.done()
    _stop_all(ps)
    mb = (d1 - d0) * args.value_bytes / 1e6
    return {"seconds": round(elapsed, 2), "records": d1 - d0, "mb_per_s": round(mb / elapsed, 2),
            **_tail_fields(ps, cpu, mb, profiles, m.leader_produce, m.load)}


def latency_phase(c: Cluster, topic: str, partitions: int, producers: int, value: bytes, args,
                  profile_tag: str | None) -> dict:
    rate = args.rate_mbs * 1e6 / args.value_bytes / producers
    ps = [LOAD_PRODUCERS[args.client](c.bootstrap, topic, partitions, value, i * 7919, args.idempotent, rate)
          for i in range(producers)]
    # the settle lets the measured records' acks arrive
    elapsed, cpu, profiles, leader_produce, load = _measured(c, ps, args, profile_tag,
                                                             settle_s=min(5.0, args.seconds))
    lat = [x for p in ps for x in p.lat]
    sent = sum(p.sent_measuring for p in ps)
    delivered = sum(p.delivered for p in ps)
    mb = sent * args.value_bytes / 1e6
    return {"seconds": round(elapsed, 2), "offered_mb_per_s": args.rate_mbs,
            "sent_mb_per_s": round(mb / elapsed, 2), "sent": sent, "acked": delivered,
            "p50_ms": round(pct(lat, 0.5) * 1000, 1), "p99_ms": round(pct(lat, 0.99) * 1000, 1),
            **_tail_fields(ps, cpu, mb, profiles, leader_produce, load)}


def window_phase(c: Cluster, topic: str, partitions: int, producers: int, value: bytes, args,
                 profile_tag: str | None) -> dict:
    ps = [ClosedLoopProducer(c.bootstrap, topic, partitions, value, args.window, i * 7919, args.idempotent)
          for i in range(producers)]
    elapsed, cpu, profiles, leader_produce, load = _measured(c, ps, args, profile_tag)
    lat = [x for p in ps for x in p.lat]
    delivered = sum(p.delivered for p in ps)
    mb = delivered * args.value_bytes / 1e6
    return {"seconds": round(elapsed, 2), "records": delivered, "mb_per_s": round(mb / elapsed, 2),
            "p50_ms": round(pct(lat, 0.5) * 1000, 1), "p99_ms": round(pct(lat, 0.99) * 1000, 1),
            **_tail_fields(ps, cpu, mb, profiles, leader_produce, load)}


def print_scale_table(scale: dict) -> None:
    rows = scale["rows"]
    one = {m: next((r[m] for r in rows if r["partitions"] == 1 and r["producers"] == 1 and m in r), None)
           for m in scale["modes"]}
    for mode in scale["modes"]:
        if mode == "latency":
            print(f"latency at a fixed offered load of {scale['rate_mbs']} MB/s through {scale.get('client', 'librdkafka')}"
                  " (p99 / 1-partition p99)")
            print("partitions producers  sent MB/s   p50 ms   p99 ms  p99 ratio  brokers CPU s/MB  leader CPU s/MB  errors"
                  "  host busy  clients cores")
        else:
            print(f"{mode}: aggregate acked MB/s (/ 1-partition figure)" + (
                ", p50/p99 ms of a saturated window" if mode == "window" else ""))
            print("partitions producers     MB/s   ratio   p50 ms   p99 ms  brokers CPU s/MB  leader CPU s/MB  errors"
                  "  host busy  clients cores")
        base = one[mode]
        for r in rows:
            x = r.get(mode)
            if x is None:
                continue
            if mode == "latency":
                ratio = round(x["p99_ms"] / base["p99_ms"], 2) if base and base["p99_ms"] else None
                print(f"{r['partitions']:>10} {r['producers']:>9} {x['sent_mb_per_s']:>10} {x['p50_ms']:>8} "
                      f"{x['p99_ms']:>8} {ratio!s:>10} {x['brokers_cpu_s_per_mb']!s:>17} "
                      f"{x['leader_cpu_s_per_mb']!s:>16} {x['errors']:>7} {x.get('host_cpu_busy', '-')!s:>10} "
                      f"{x.get('clients_cpu_cores', '-')!s:>14}")
            else:
                ratio = round(x["mb_per_s"] / base["mb_per_s"], 2) if base and base["mb_per_s"] else None
                print(f"{r['partitions']:>10} {r['producers']:>9} {x['mb_per_s']:>8} {ratio!s:>7} "
                      f"{x.get('p50_ms', '-')!s:>8} {x.get('p99_ms', '-')!s:>8} {x['brokers_cpu_s_per_mb']!s:>17} "
                      f"{x['leader_cpu_s_per_mb']!s:>16} {x['errors']:>7} {x.get('host_cpu_busy', '-')!s:>10} "
                      f"{x.get('clients_cpu_cores', '-')!s:>14}")
        if any(r.get(mode, {}).get("leader_produce") for r in rows):
            print(f"  {mode}: the leader's own Produce time (request_metrics, mean ms per phase; total p99 ="
                  " median / highest of the 1 s windows)")
            print("  partitions producers  requests/s  queue  local  remote   send  total  total p99"
                  "   | Fetch requests/s  local  remote  total")
            for r in rows:
                lp = (r.get(mode) or {}).get("leader_produce")
                if lp:
                    print(f"  {r['partitions']:>10} {r['producers']:>9} {lp['requests_per_s']:>11} "
                          f"{lp['queue_mean_ms']:>6} {lp['local_mean_ms']:>6} {lp['remote_mean_ms']:>7} "
                          f"{lp['send_mean_ms']:>6} {lp['total_mean_ms']:>6} "
                          f"{lp['total_p99_ms_median_window']}/{lp['total_p99_ms_max_window']}"
                          + (f"   | {lp['fetch']['requests_per_s']:>16} {lp['fetch']['local_mean_ms']:>6} "
                             f"{lp['fetch']['remote_mean_ms']:>7} {lp['fetch']['total_mean_ms']:>6}"
                             if lp.get("fetch") else ""))


PHASES = {"throughput": throughput_phase, "latency": latency_phase, "window": window_phase}


def _print_profile(profiles: dict) -> None:
    for role, prof in (profiles or {}).items():
        if prof:
            print(f"    profile {role} ({prof['samples']} samples, py-spy; figures of this row are"
                  f" slowed by it): {prof['share_by_package']}")
            for r in prof["top_own"][:12]:
                print(f"      {r['share']:6.1%} {r['frame']}")


def scale_row(c: Cluster, topic: str, partitions: int, producers: int, args) -> dict:
    value = os.urandom(args.value_bytes // 2).hex().encode()[:args.value_bytes]
    undelivered = warm(c, topic, partitions, args.idempotent)
    row: dict = {"partitions": partitions, "producers": producers, "warm_up_undelivered_after_30s": undelivered}
    for mode in args.modes:
        tag = f"{mode}-{partitions}" if partitions in args.profile_at and producers == 1 else None
        res = PHASES[mode](c, topic, partitions, producers, value, args, tag)
        row[mode] = res
        print(f"  scale {partitions}x{producers} {mode}: "
              f"{json.dumps({k: v for k, v in res.items() if k != 'profile'})}", flush=True)
        _print_profile(res.get("profile"))
    return row


def split_cores() -> tuple[set[int], set[int]]:
    """``--split-cores``: (the client's CPUs, the cluster's CPUs) — the first CPU this process
    may run on for the clients, the others for the brokers and the controller."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--split-cores needs at least 2 CPUs (this process may run on "
                         f"{len(cpus)})")
    return {cpus[0]}, set(cpus[1:])


def run_scale(args, work: Path) -> dict:
    counts = [int(x) for x in args.partitions.split(",")]
    producer_counts = [int(x) for x in args.producers.split(",")]
    c = Cluster(work / "scale", session_timeout_ms=9000, broker_extra=dict(BROKER))
    rows = []
    # the brokers and controller inherit the CPUs of the thread that starts them, the
    # clients' threads (librdkafka's too) those of the main thread when they are created
    cores = split_cores() if args.split_cores else None
    try:
        c.prepare()
        if cores:
            os.sched_setaffinity(0, cores[1])
        c.start()
        if cores:
            os.sched_setaffinity(0, cores[0])
            print(f"  split cores: clients on CPU {sorted(cores[0])}, the cluster on {sorted(cores[1])}",
                  flush=True)
        for n in counts:
            topic = f"s{n}"
            c.create_topic(topic, {p: [1, 2, 3] for p in range(n)})
            c.wait_image(lambda im: topic in im.topic_ids and len(im.partitions_of(im.topic_ids[topic])) == n
                         and all(len(p.isr) == 3 for p in im.partitions_of(im.topic_ids[topic]).values()),
                         300, f"{topic}: {n} partitions with full ISRs")
            for pc in (producer_counts if n in args.producers_at else [1]):
                rows.append(scale_row(c, topic, n, pc, args))
    finally:
        c.kill()
    return {"rows": rows, "seconds_per_phase": args.seconds, "value_bytes": args.value_bytes,
            "modes": args.modes, "rate_mbs": args.rate_mbs, "window": args.window, "client": args.client,
            "split_cores": bool(args.split_cores)}


# ---------------------------------------------------------------------------- rtt
def _rtt_probe(port: int, topic: str, partitions: int, acks: int, n: int, *, all_in_one: bool = False) -> list[float]:
    """``n`` Produce v9 requests of one 1 KiB record, one after another on one connection,
    round-robin over the partitions → each round trip in seconds. ``all_in_one``: each
    request carries one record for every partition (as kafka-python and the Java client
    send what is ready for a broker), answered when all of them are replicated."""
    import asyncio

    from testkit.protocol import RawConnection, make_batch, produce_request

    async def run() -> list[float]:
        c = await RawConnection.open(port)
        lat = []
        try:
            for i in range(n):
                target = list(range(partitions)) if all_in_one else i % partitions
                req = produce_request(9, topic, target, make_batch([b"x" * 1024]), acks=acks, timeout_ms=5000)
                t = time.perf_counter()
                resp = await c.call(req)
                lat.append(time.perf_counter() - t)
                for pr in resp.responses[0].partition_responses:
                    if pr.error_code.value != 0:
                        raise RuntimeError(f"produce to {topic}-{pr.index} answered error {pr.error_code.value}")
        finally:
            await c.close()
        return lat
    return asyncio.run(run())


def run_rtt(args, work: Path) -> dict:
    """The floor under the latency goal: one request at a time (no queueing anywhere), the
    round trip of a one-record Produce with acks=1 (the leader's append) and acks=all (+ the
    followers' fetch round), at 1 and 100 partitions. librdkafka's idempotent producer sends
    one partition per request, at most 5 in flight per broker: at N partitions a record waits
    ~N/5 such round trips, so the p99 goal (2× the 1-partition p99) at 100 partitions needs
    an acks=all round trip under ~(2 × p99₁) / 20."""
    c = Cluster(work / "rtt", session_timeout_ms=9000, broker_extra=dict(BROKER))
    rows = []
    try:
        c.prepare()
        c.start()
        for n in (1, 100):
            topic = f"rtt{n}"
            c.create_topic(topic, {p: [1, 2, 3] for p in range(n)})
            c.wait_image(lambda im, t=topic, n=n: t in im.topic_ids and len(im.partitions_of(im.topic_ids[t])) == n
                         and all(len(p.isr) == 3 for p in im.partitions_of(im.topic_ids[t]).values()),
                         120, f"{topic}: {n} partitions with full ISRs")
        time.sleep(1.0)
        for n, acks, all_in_one in ((1, 1, False), (1, -1, False), (100, 1, False), (100, -1, False),
                                    (100, -1, True)):
            _rtt_probe(c.brokers[0].port, f"rtt{n}", n, acks, 200, all_in_one=all_in_one)   # warm
            lat = _rtt_probe(c.brokers[0].port, f"rtt{n}", n, acks, args.rtt_requests // (10 if all_in_one else 1),
                             all_in_one=all_in_one)
            row = {"partitions": n, "acks": "all" if acks == -1 else "1", "per_request": n if all_in_one else 1,
                   "requests": len(lat), **{f"p{q}_ms": round(pct(lat, q / 100) * 1000, 2) for q in (50, 90, 99)}}
            rows.append(row)
            print(f"  rtt {json.dumps(row)}", flush=True)
    finally:
        c.kill()
    print("one request at a time, 1 KiB a partition, RF 3 (ms)")
    print(f"{'partitions':>10} {'acks':>5} {'partitions/request':>18} {'p50':>7} {'p90':>7} {'p99':>7}")
    for r in rows:
        print(f"{r['partitions']:>10} {r['acks']:>5} {r['per_request']:>18} {r['p50_ms']:>7} {r['p90_ms']:>7} "
              f"{r['p99_ms']:>7}")
    return {"rows": rows}


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
    ap.add_argument("--part", choices=("scale", "failover", "rtt", "all"), default="all",
                    help="all = scale + failover; rtt = one request at a time (the floor under the latency goal)")
    ap.add_argument("--rtt-requests", type=int, default=1000, help="rtt part: requests per row")
    ap.add_argument("--partitions", default="1,2,10,100,1000")
    ap.add_argument("--producers", default="1,4,16")
    ap.add_argument("--producers-at", default="1,100", help="partition counts that sweep --producers")
    ap.add_argument("--modes", default="throughput,latency",
                    help="phases per row: throughput (saturating, librdkafka defaults), latency (fixed offered"
                         " load --rate-mbs), window (at most --window records outstanding per producer)")
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per phase")
    ap.add_argument("--ramp", type=float, default=2.0, help="seconds before each phase's measurement")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--rate-mbs", type=float, default=10.0, help="latency phase: offered load, MB/s in total")
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--no-idempotence", dest="idempotent", action="store_false",
                    help="enable.idempotence=false (librdkafka then keeps up to 1M requests in flight per broker;"
                         " default: idempotent, at most 5)")
    ap.add_argument("--client", choices=tuple(LOAD_PRODUCERS), default="librdkafka",
                    help="the latency phase's producers: librdkafka (one partition per ProduceRequest) or"
                         " kafka-python (every ready partition of a broker in one request)")
    ap.add_argument("--rate", type=int, default=300)
    ap.add_argument("--before-s", type=float, default=10.0)
    ap.add_argument("--after-s", type=float, default=20.0)
    ap.add_argument("--failover-runs", type=int, default=1)
    ap.add_argument("--hogs", type=int, default=2, help="busy processes during the failover part's broker stops")
    ap.add_argument("--profile-at", default="", help="partition counts whose 1-producer row runs under py-spy")
    ap.add_argument("--split-cores", action="store_true",
                    help="scale part: the clients on the first CPU, the brokers and controller on the others "
                         "(by default all share every core, and many busy client threads starve the brokers)")
    ap.add_argument("--out", default=None,
                    help="default results/bench/replication.json (replication-rtt.json for --part rtt)")
    args = ap.parse_args()
    args.out = args.out or os.path.join(ROOT, "results", "bench",
                                        "replication-rtt.json" if args.part == "rtt" else "replication.json")
    args.profile_at = {int(x) for x in args.profile_at.split(",") if x}
    args.producers_at = {int(x) for x in args.producers_at.split(",") if x}
    args.modes = [m for m in args.modes.split(",") if m]
    if args.client != "librdkafka" and set(args.modes) != {"latency"}:
        ap.error("--client kafka-python applies to the latency phase only: pass --modes latency")
    for m in args.modes:
        if m not in PHASES:
            ap.error(f"--modes: unknown phase {m!r} (one of {', '.join(PHASES)})")
    result: dict = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                             "loadavg_at_start": os.getloadavg()},
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="jbodtest-bench-") as tmp:
        work = Path(tmp)
        if args.part in ("scale", "all"):
            result["scale"] = run_scale(args, work)
        if args.part in ("failover", "all"):
            result["failover"] = run_failover(args, work)
        if args.part == "rtt":
            result["rtt"] = run_rtt(args, work)
    if "scale" in result:
        print_scale_table(result["scale"])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=sorted)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
