"""Dir-failure benchmark: time from the first EIO to the controller committing the change,
for a log dir holding ~1k partitions, with the health probe on.

    .venv/bin/python bench/broker_eio_bench.py [--probe-ms 100,1000] [--runs 3]
                                               [--dir-partitions 1000] [--rf 2]

Per run (a fresh cluster each time — an ext4 that was shut down stays dead):
1 kraft-controller + kraft-broker 1 (3 log dirs; ``data2`` is ext4 on a loop device, sparse
image under /tmp/jbodtest-*) [+ kraft-broker 2 when ``--rf 2``, the follower that takes
over leadership]. One topic with 3 × N partitions, each with a replica on broker 1, so the
broker's least-loaded placement puts ~N of them in data2 (the run records the exact count
from the committed metadata). Then ``EXT4_IOC_SHUTDOWN`` (NOLOGFLUSH) on data2 — from then
on the kernel fails every I/O there with EIO — and three instants are taken:

* ``inject``    — ``time.time_ns()`` just before the ioctl (this process);
* ``dir_offline`` — ``ts_ns`` of broker 1's ``dir_offline`` event (errno 5): the first I/O
  on the dir that failed (probe, checkpoint, …) went through the failure path;
* ``committed`` — ``ts_ns`` of the controller's ``broker_log_dirs_changed`` event: the
  controller emits it right after the one log append (fsync) + replay that holds the ISR
  shrinks / leader moves of every partition in the dir and the registration change. The
  last ``partition_change`` event of that commit is recorded too (``events_done``).

All clocks are CLOCK_REALTIME on one host. The run is checked before it counts: the dir
failed with errno 5, and the controller changed exactly the partitions whose broker-1
replica the metadata places in data2 (read back through Fetch of ``__cluster_metadata``).
Prints per-run figures and the medians per probe interval; writes
``results/bench/broker_eio.json``. Figures depend on the host and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from testkit.cluster import reader_for, unfenced, until, wait_until  # noqa: E402

from testkit.processes import BrokerProcess  # noqa: E402
from kafka_common.config import default_text  # noqa: E402
from kafka_runtime.controller_client import create_topic  # noqa: E402
from harness.run.local_processes import ControllerProcess  # noqa: E402
from kafka_common import ids  # noqa: E402
from kafka_common.ids import UNASSIGNED  # noqa: E402
from kafka_runtime.events import read_events  # noqa: E402
from loopdev import LoopFs, skip_reason  # noqa: E402

TOPIC = "bench"


def ms(a_ns: int, b_ns: int) -> float:
    return round((b_ns - a_ns) / 1e6, 2)


def _events(path: str) -> list[dict]:
    return read_events(path) if os.path.exists(path) else []


async def _settle(ctrl, brokers, n_partitions: int, rf: int, timeout_s: float) -> dict:
    """Create the topic and wait until every replica has its real dir; returns facts."""
    client, reader = await reader_for(ctrl)
    try:
        ids_ = tuple(b.node_id for b in brokers)
        await until(reader, lambda im: unfenced(im, ids_), 60, "brokers unfenced", brokers)
        assignments = {p: [1, 2] if rf == 2 else [1] for p in range(n_partitions)}
        t0 = time.monotonic()
        resp = await create_topic(client, TOPIC, 0, 0, assignments=assignments)
        if resp.topics[0].error_code.value != 0:
            raise RuntimeError(f"CreateTopics failed: {resp.topics[0].error_code.name} {resp.topics[0].error_message}")
        await until(reader, lambda im: TOPIC in im.topic_ids and all(
            UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids[TOPIC]).values()),
            timeout_s, "every replica assigned to a dir", brokers)
        assign_s = time.monotonic() - t0
        await until(reader, lambda im: unfenced(im, ids_), 60, "brokers unfenced after the assignments", brokers)
        return {"assign_s": round(assign_s, 2), "image": reader.image}
    finally:
        await client.close()


async def _wait_committed(ctrl, brokers, d2_id, hit: set[int], timeout_s: float) -> int:
    """Wait until the controller's committed metadata shows d2 dropped and every partition
    in it without broker 1 in the ISR; returns the partitions changed after ``mark``."""
    client, reader = await reader_for(ctrl)
    try:
        await reader.catch_up(60)
        await until(reader, lambda im: d2_id not in im.brokers[1].log_dirs, timeout_s, "d2 dropped", brokers)
        tid = reader.image.topic_ids[TOPIC]
        bad = [p for p in hit if 1 in reader.image.partition(tid, p).isr]
        if bad:
            raise RuntimeError(f"{len(bad)} partitions of d2 still have broker 1 in the ISR: {bad[:5]}")
        return reader.next_offset
    finally:
        await client.close()


def one_run(probe_ms: int | None, n_dir: int, rf: int, size_mb: int, settle_timeout_s: float,
            rng: random.Random) -> dict:
    work = tempfile.mkdtemp(prefix="broker-eio-bench-", dir="/tmp")
    procs: list = []
    fs = None
    try:
        ctrl = ControllerProcess(os.path.join(work, "controller"))
        ctrl.format()
        ctrl.start()
        procs.append(ctrl)
        extra = {"log.dir.probe.interval.ms": str(probe_ms)} if probe_ms is not None else {}
        brokers = [BrokerProcess(os.path.join(work, f"broker{i}"), i, ctrl, extra=dict(extra))
                   for i in range(1, rf + 1)]
        b1 = brokers[0]
        d2 = b1.dirs[2]
        fs = LoopFs(size_mb=size_mb, mountpoint=d2).setup()
        for b in brokers:
            b.format()
            b.start()
            procs.append(b)
        d2_id = b1.dir_ids()[d2]
        facts = asyncio.run(_settle(ctrl, brokers, 3 * n_dir, rf, settle_timeout_s))
        image = facts["image"]
        tid = image.topic_ids[TOPIC]
        hit = {p for p, part in image.partitions_of(tid).items() if part.directory(1) == d2_id}
        led = {p for p in hit if image.partition(tid, p).leader == 1}
        # the metadata assigns the dirs before the storage worker has created every log:
        # wait for all of them on disk (else the first EIO hits a log creation, not the probe)
        def logs_on_disk(b):
            return sum(1 for d in b.dirs for n in os.listdir(d) if n.startswith(TOPIC + "-"))
        t0 = time.monotonic()
        for b in brokers:
            wait_until(lambda: logs_on_disk(b) == 3 * n_dir, settle_timeout_s, f"broker {b.node_id}'s logs",
                       interval_s=0.2)
        on_d2 = sum(1 for n in os.listdir(d2) if n.startswith(TOPIC + "-"))
        if on_d2 != len(hit):
            raise RuntimeError(f"{on_d2} logs in {d2} but the metadata places {len(hit)} there")
        facts["logs_s"] = round(time.monotonic() - t0, 2)
        # let the last fsyncs and the storage worker drain, then inject at a random phase of
        # the probe cycle (a fixed delay would hit the same phase every run)
        # (probe off, 0: the next I/O is the 5 s high-watermark checkpoint; default: 1000 ms)
        hw_ms = int(default_text("replica.high.watermark.checkpoint.interval.ms"))
        cycle_ms = 1000 if probe_ms is None else probe_ms or hw_ms
        phase_s = rng.uniform(0, cycle_ms / 1000)
        time.sleep(2.0 + phase_s)

        inject_ns = fs.shutdown()
        asyncio.run(_wait_committed(ctrl, brokers, d2_id, hit, 120))
        b1_ev = _events(b1.events_path)
        offline = [e for e in b1_ev if e["event"] == "dir_offline"]
        if len(offline) != 1 or offline[0]["errno"] != errno.EIO or offline[0]["dir_id"] != ids.to_base64(d2_id):
            raise RuntimeError(f"unexpected dir_offline events: {offline}")
        cev = [e for e in _events(ctrl.events_path) if e["ts_ns"] >= inject_ns]
        [changed] = [e for e in cev if e["event"] == "broker_log_dirs_changed" and e["broker_id"] == 1]
        pcs = [e for e in cev if e["event"] == "partition_change" and e["topic"] == TOPIC]
        moved = {e["partition"] for e in pcs}
        if moved != hit or len(pcs) != len(hit):
            raise RuntimeError(f"controller changed {len(pcs)} partitions ({len(moved)} distinct), d2 held {len(hit)}")
        if rf == 2 and any(e["leader"] == 1 for e in pcs):
            raise RuntimeError("a partition of d2 kept broker 1 as leader")
        reported = next(e for e in b1_ev if e["event"] == "dir_failure_reported")
        alive = all(b.alive() for b in brokers)
        if not alive:
            raise RuntimeError(f"a broker died: {[b.stderr() for b in brokers if not b.alive()]}")
        return {
            "probe_ms": probe_ms if probe_ms is not None else 1000, "inject_cycle_ms": cycle_ms, "probe_ms_set": probe_ms is not None,
            "rf": rf, "partitions_total": 3 * n_dir, "partitions_in_dir": len(hit), "led_by_broker_in_dir": len(led),
            "setup_assign_s": facts["assign_s"], "setup_logs_s": facts["logs_s"], "first_failed_op": offline[0]["op"],
            "inject_phase_ms": round(phase_s * 1000, 1),
            "inject_to_dir_offline_ms": ms(inject_ns, offline[0]["ts_ns"]),
            "dir_offline_to_reported_ms": ms(offline[0]["ts_ns"], reported["ts_ns"]),
            "dir_offline_to_committed_ms": ms(offline[0]["ts_ns"], changed["ts_ns"]),
            "inject_to_committed_ms": ms(inject_ns, changed["ts_ns"]),
            "inject_to_events_done_ms": ms(inject_ns, max(e["ts_ns"] for e in pcs)),
        }
    finally:
        for p in reversed(procs):
            p.kill()
        if fs is not None:
            fs.cleanup()
        shutil.rmtree(work, ignore_errors=True)


FIGURES = ("inject_to_dir_offline_ms", "dir_offline_to_committed_ms", "inject_to_committed_ms",
           "inject_to_events_done_ms", "dir_offline_to_reported_ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe-ms", default="100,default",
                    help="comma list of log.dir.probe.interval.ms values; 'default' = unset (1000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir-partitions", type=int, default=1000, help="partitions wanted in the failed dir")
    ap.add_argument("--rf", type=int, choices=(1, 2), default=2)
    ap.add_argument("--size-mb", type=int, default=256, help="size of the loop file system")
    ap.add_argument("--seed", type=int, default=858, help="seed of the random injection phase")
    ap.add_argument("--settle-timeout-s", type=float, default=600)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "broker_eio.json"))
    args = ap.parse_args(argv)
    reason = skip_reason()
    if reason:
        print(f"broker_eio_bench: cannot run: {reason}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    probes = [None if v.strip() == "default" else int(v) for v in args.probe_ms.split(",")]
    runs, summary = [], {}
    for probe in probes:
        label = "default(1000)" if probe is None else str(probe)
        mine = []
        for i in range(args.runs):
            r = one_run(probe, args.dir_partitions, args.rf, args.size_mb, args.settle_timeout_s, rng)
            mine.append(r)
            print(f"probe={label:13s} run {i + 1}: {r['partitions_in_dir']} partitions in the dir "
                  f"({r['led_by_broker_in_dir']} led), first op {r['first_failed_op']}: "
                  f"inject→dir_offline {r['inject_to_dir_offline_ms']} ms, "
                  f"dir_offline→committed {r['dir_offline_to_committed_ms']} ms, "
                  f"inject→committed {r['inject_to_committed_ms']} ms "
                  f"(events done {r['inject_to_events_done_ms']} ms; setup {r['setup_assign_s']} s)", flush=True)
        runs += mine
        summary[label] = {k: round(statistics.median(r[k] for r in mine), 2) for k in FIGURES}
        summary[label]["runs"] = len(mine)
        s = summary[label]
        print(f"probe={label:13s} MEDIAN of {len(mine)}: inject→dir_offline {s['inject_to_dir_offline_ms']} ms, "
              f"dir_offline→committed {s['dir_offline_to_committed_ms']} ms, "
              f"inject→committed {s['inject_to_committed_ms']} ms", flush=True)
    result = {
        "benchmark": "broker_eio", "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *(argv if argv is not None else sys.argv[1:])]),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "kernel": platform.release(), "loadavg": os.getloadavg()},
        "params": {"dir_partitions": args.dir_partitions, "seed": args.seed, "rf": args.rf, "runs": args.runs,
                   "fault": "EXT4_IOC_SHUTDOWN NOLOGFLUSH on an ext4 loop device"},
        "summary_median": summary, "runs": runs,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
