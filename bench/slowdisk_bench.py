"""Slow-disk benchmark (not a test): what a dir's fsyncs cost on a lab disk whose every block
I/O is delayed, and what the broker's dir I/O makes of them.

    jbodlab bench slowdisk [-- --delays 0,50] [--partitions 16] [--rounds 3] [--out FILE]

A lab FUSE disk (``infra.disks``: ext4 on a loop device whose backing file the lab's FUSE
daemon serves; a ``delay`` mode sleeps every block I/O) and, for each ``--delays`` value:

- **raw fsync**: ``--partitions`` files, 1 KiB appended to each then ``fsync``: one after
  another (one thread) vs all at once (a thread each). ext4's journal commits concurrent
  fsyncs together, so "at once" costs about one commit.
- **dir I/O**: ``--partitions`` real ``PartitionLog`` s with ``log.flush.interval.messages=1``
  on that disk, one acks-style append job per partition submitted to the broker's
  ``DirIO`` (``broker_impl.runtime.dir_io``) at once; figure: the time until every job is
  answered (each answer comes after its fsync). With the fsyncs inline on the dir's one
  worker this is the "one after another" figure; with the flushes on the dir's flush threads
  (``broker_impl.storage.flush_deferral``) it approaches the "at once" one.
- **append beside a flush**: one more log (no flush by count) gets a 1 KiB record, a thread
  flushes it, and 5 ms into that flush another record is appended to the same log; figures:
  the flush's time and that append's. With the fsync under the log's lock
  (``broker_impl.storage.log_flush`` before it synced outside the lock) the append waits for
  the rest of the fsync; outside the lock it does not.
- **roll burst** (undelayed disk only): ``--roll-partitions`` logs under Kafka's flush policy,
  one append job each submitted at once, first with no roll, then with every segment past
  ``log.roll.ms`` so that every append rolls (what a topic whose partitions were created
  together does every ``log.roll.ms``); figures: the time until all are answered, and the
  machine's CPU (``/proc/stat``, every process: the broker's threads, the kernel, the FUSE
  daemon) over the burst and the second after it, when the rolled segments' background flushes
  run. The lab's S15 ran 300 partitions with the catalog's 3 s roll: 900 rolls every ~3 s.

Each figure is the median of ``--rounds``. Prints a table and writes
``results/bench/slowdisk.json``. Needs root, loop devices and FUSE (says so and exits 0
otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "broker", "storage")]

from bench_io import write_result  # noqa: E402
from loopdev import lab_disk_skip_reason  # noqa: E402
from storage_batches import make_batch  # noqa: E402


def raw_fsync(root: Path, n: int) -> tuple[float, float]:
    """Seconds for n append+fsync: one after another, then all at once."""
    fds = [os.open(str(root / f"raw{i}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in range(n)]
    try:
        def one(fd: int) -> None:
            os.write(fd, b"y" * 1024)
            os.fsync(fd)
        t = time.perf_counter()
        for fd in fds:
            one(fd)
        serial = time.perf_counter() - t
        threads = [threading.Thread(target=one, args=(fd,)) for fd in fds]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return serial, time.perf_counter() - t
    finally:
        for fd in fds:
            os.close(fd)


def dir_io_appends(logs: list, dir_path: str) -> float:
    """Seconds until one append job per log, submitted at once to the dir's worker, is answered."""
    from broker_impl.runtime.dir_io import DirIO
    io = DirIO([dir_path])
    try:
        batch = make_batch(1)
        t = time.perf_counter()
        futs = [io.submit(dir_path, log.append_as_leader, batch, 0) for log in logs]
        for f in futs:
            f.result(600)
        return time.perf_counter() - t
    finally:
        io.close()


def append_beside_flush(log) -> tuple[float, float]:
    """Seconds of a flush of ``log`` (1 KiB unsynced) and of an append to it 5 ms into that flush."""
    log.append_as_leader(make_batch(1, 1024), 0)
    took: list[float] = []

    def flush() -> None:
        t0 = time.perf_counter()
        log.flush()
        took.append(time.perf_counter() - t0)
    th = threading.Thread(target=flush)
    th.start()
    time.sleep(0.005)
    t = time.perf_counter()
    log.append_as_leader(make_batch(1), 0)
    appended = time.perf_counter() - t
    th.join()
    return took[0], appended


def machine_busy_ms() -> float:
    """CPU time the whole machine spent busy so far (every process and the kernel), ms."""
    from harness.run.host_load import read_proc_stat
    return read_proc_stat().busy * 1000 / os.sysconf("SC_CLK_TCK")


def roll_burst(root: Path, n: int, rounds: int) -> dict:
    """Medians over ``rounds``: ms until n appends submitted at once are answered, and the
    machine's busy ms over them and the second after, with no roll and with every append rolling."""
    from broker_impl.runtime.dir_io import DirIO
    from broker_impl.storage.failure import DirFailureChannel
    from broker_impl.storage.log_config import LogConfig
    from broker_impl.storage.partition_log import PartitionLog
    now = [1_000_000]
    cfg = LogConfig(roll_ms=3000)
    logs = [PartitionLog.create(str(root), "roll", p, uuid.uuid4(), cfg, DirFailureChannel(lambda *a: None),
                                lambda: now[0]) for p in range(n)]
    io = DirIO([str(root)])
    took: dict[str, list[float]] = {"plain": [], "rolling": []}
    cpu: dict[str, list[float]] = {"plain": [], "rolling": []}
    try:
        for log in logs:
            log.append_as_leader(make_batch(1), 0)
            log.flush()
        for _ in range(rounds):
            for kind, step_ms in (("plain", 10), ("rolling", cfg.roll_ms + 1)):
                now[0] += step_ms
                busy0, t = machine_busy_ms(), time.perf_counter()
                futs = [io.submit(str(root), log.append_as_leader, make_batch(1), 0) for log in logs]
                for f in futs:
                    f.result(600)
                took[kind].append(time.perf_counter() - t)
                time.sleep(1.0)
                cpu[kind].append(machine_busy_ms() - busy0)
    finally:
        io.close()
        for log in logs:
            log.close()
    return {"partitions": n,
            "plain_answered_ms": round(statistics.median(took["plain"]) * 1000, 1),
            "rolling_answered_ms": round(statistics.median(took["rolling"]) * 1000, 1),
            "plain_machine_cpu_ms": round(statistics.median(cpu["plain"])),
            "rolling_machine_cpu_ms": round(statistics.median(cpu["rolling"]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="0,50", help="ms of delay per block I/O, one figure set each")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--roll-partitions", type=int, default=100, help="roll burst: logs that roll at once (0: skip)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "slowdisk.json"))
    args = ap.parse_args()
    reason = lab_disk_skip_reason()
    if reason:
        print(f"bench slowdisk: skipped: {reason}")
        return 0
    from broker_impl.storage.failure import DirFailureChannel
    from broker_impl.storage.log_config import LogConfig
    from broker_impl.storage.partition_log import PartitionLog
    from infra.disks import FuseBackend, create_disk, destroy_disk
    from infra.faultmodes import FaultMode
    from infra.fuse_daemon import FuseDaemon

    lab = Path(tempfile.mkdtemp(prefix="jbodtest-bench-slowdisk-"))
    daemon = FuseDaemon(lab)
    disk = None
    rows = []
    burst = None
    try:
        daemon.start()
        backend = FuseBackend(daemon)
        disk = create_disk(backend, lab_id="slowdisk", lab_dir=lab, node="b1", dirname="d1", size_mb=512,
                           fstype="ext4")
        root = Path(disk.data_path)
        channel = DirFailureChannel(lambda *a: None)
        cfg = LogConfig(flush_interval_messages=1)
        logs = [PartitionLog.create(str(root), "bench", p, uuid.uuid4(), cfg, channel, lambda: int(time.time() * 1000))
                for p in range(args.partitions)]
        lone = PartitionLog.create(str(root), "lone", 0, uuid.uuid4(), LogConfig(), channel,
                                   lambda: int(time.time() * 1000))
        for log in logs + [lone]:
            log.append_as_leader(make_batch(1), 0)     # the first flush syncs the log dir's entry
        lone.flush()
        raw_fsync(root, args.partitions)               # the raw files exist before the delay
        for delay in [float(x) for x in args.delays.split(",") if x]:
            backend.set_mode(disk, FaultMode("delay", delay_ms=delay) if delay else FaultMode("ok"))
            serial, together, dirio, flushes, beside = [], [], [], [], []
            for _ in range(args.rounds):
                s, c = raw_fsync(root, args.partitions)
                serial.append(s)
                together.append(c)
                dirio.append(dir_io_appends(logs, str(root)))
                f, a = append_beside_flush(lone)
                flushes.append(f)
                beside.append(a)
            row = {"delay_ms": delay, "partitions": args.partitions,
                   "raw_fsync_one_after_another_ms": round(statistics.median(serial) * 1000, 1),
                   "raw_fsync_at_once_ms": round(statistics.median(together) * 1000, 1),
                   "dir_io_appends_answered_ms": round(statistics.median(dirio) * 1000, 1),
                   "flush_ms": round(statistics.median(flushes) * 1000, 1),
                   "append_beside_flush_ms": round(statistics.median(beside) * 1000, 2)}
            rows.append(row)
            print(f"  {json.dumps(row)}", flush=True)
        backend.set_mode(disk, FaultMode("ok"))
        for log in logs + [lone]:
            log.close()
        burst = roll_burst(root, args.roll_partitions, max(args.rounds, 3)) if args.roll_partitions else None
    finally:
        if disk is not None:
            destroy_disk(FuseBackend(daemon), disk)
        daemon.stop()
        shutil.rmtree(lab, ignore_errors=True)
    print(f"{args.partitions} partitions, 1 KiB append + fsync each (median of {args.rounds})")
    print("delay ms  fsync one after another ms  fsync at once ms  dir I/O appends answered ms  "
          "flush ms  append beside it ms")
    for r in rows:
        print(f"{r['delay_ms']:>8} {r['raw_fsync_one_after_another_ms']:>27} {r['raw_fsync_at_once_ms']:>17} "
              f"{r['dir_io_appends_answered_ms']:>28} {r['flush_ms']:>9} {r['append_beside_flush_ms']:>19}")
    if burst:
        print(f"roll burst, undelayed disk: {burst['partitions']} appends at once (median of {max(args.rounds, 3)})")
        print("            answered ms  machine CPU ms (burst + 1 s)")
        for kind in ("plain", "rolling"):
            print(f"{kind:>10} {burst[kind + '_answered_ms']:>12} {burst[kind + '_machine_cpu_ms']:>29}")
        per_roll = (burst["rolling_machine_cpu_ms"] - burst["plain_machine_cpu_ms"]) / burst["partitions"]
        print(f"  a roll costs ~{per_roll:.2f} ms of the machine's CPU")
    result = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "loadavg_at_start": os.getloadavg()},
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": vars(args), "rows": rows,
              "roll_burst": burst}
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
