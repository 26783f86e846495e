"""Storage micro-benchmark: PartitionLog append (with and without fsync per batch) and read.

    .venv/bin/python bench/storage_bench.py [--dir DIR] [--mb 64] [--fsync-batches 500]
                                           [--batch-records 100] [--value-bytes 150]

Writes into a fresh temp dir under ``--dir`` (default /tmp) which it removes afterwards,
prints one line per figure and writes ``results/bench/storage.json``. Figures depend on the
host (disk, fs, CPU load); the JSON records what was measured where.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "broker", "storage")]

from kafka_common import batch_header as bh  # noqa: E402
from broker_impl.storage.failure import DirFailureChannel  # noqa: E402
from broker_impl.storage.log_config import LogConfig  # noqa: E402
from broker_impl.storage.partition_log import PartitionLog  # noqa: E402
from storage_batches import make_batch  # noqa: E402


def _fs_type(path: str) -> str:
    try:
        return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def _abort(dir_path: str, errno: int, op: str) -> None:
    raise SystemExit(f"I/O error {errno} in {dir_path} during {op}: benchmark aborted")


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def bench_append(base: str, batch: bytes, count: int, *, fsync_each: bool, name: str) -> tuple[dict, PartitionLog]:
    cfg = LogConfig(segment_bytes=16 << 20, flush_interval_messages=1 if fsync_each else 2**63 - 1)
    channel = DirFailureChannel(_abort)
    log = PartitionLog.create(base, name, 0, uuid.uuid4(), cfg, channel, _now_ms)
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(batch, 1)
    if not fsync_each:
        log.flush()  # the data is durable at the end in both variants
    elapsed = time.perf_counter() - start
    total = count * len(batch)
    return {"batches": count, "batch_bytes": len(batch), "bytes": total, "seconds": round(elapsed, 4),
            "mb_per_s": round(total / elapsed / 1e6, 2), "batches_per_s": round(count / elapsed, 1),
            "segments": log.segment_count}, log


def bench_read(log: PartitionLog, fetch_bytes: int) -> dict:
    start = time.perf_counter()
    offset, total, fetches = 0, 0, 0
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, fetch_bytes)
        # the next fetch offset: walk the batch headers, as a consumer would
        pos, last = 0, None
        while pos < len(data):
            last = bh.read_header(data, pos)
            pos += last.size_bytes
        offset = last.next_offset
        total += len(data)
        fetches += 1
    elapsed = time.perf_counter() - start
    return {"fetch_max_bytes": fetch_bytes, "fetches": fetches, "bytes": total, "seconds": round(elapsed, 4),
            "mb_per_s": round(total / elapsed / 1e6, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--mb", type=int, default=64, help="data appended without fsync")
    ap.add_argument("--fsync-batches", type=int, default=500, help="batches appended with fsync each")
    ap.add_argument("--batch-records", type=int, default=100)
    ap.add_argument("--value-bytes", type=int, default=150)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "storage.json"))
    args = ap.parse_args(argv)

    batch = make_batch(args.batch_records, args.value_bytes)
    small = make_batch(1, 100)
    base = tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir)
    try:
        count = max(1, (args.mb << 20) // len(batch))
        no_fsync, big_log = bench_append(base, batch, count, fsync_each=False, name="nofsync")
        small_no_fsync, small_log = bench_append(base, small, 50_000, fsync_each=False, name="small")
        fsync, fsync_log = bench_append(base, batch, args.fsync_batches, fsync_each=True, name="fsync")
        read_1m = bench_read(big_log, 1 << 20)
        read_64k = bench_read(big_log, 64 << 10)
        for plog in (big_log, small_log, fsync_log):
            plog.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    result = {
        "benchmark": "storage", "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "dir": args.dir, "fs_type": _fs_type(args.dir)},
        "append_no_fsync": no_fsync, "append_small_batches_no_fsync": small_no_fsync,
        "append_fsync_per_batch": fsync, "read_1MiB_fetches": read_1m, "read_64KiB_fetches": read_64k,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    for key in ("append_no_fsync", "append_small_batches_no_fsync", "append_fsync_per_batch"):
        r = result[key]
        print(f"{key:32s} {r['mb_per_s']:9.2f} MB/s {r['batches_per_s']:11.1f} batches/s "
              f"({r['batches']} × {r['batch_bytes']} B)")
    for key in ("read_1MiB_fetches", "read_64KiB_fetches"):
        r = result[key]
        print(f"{key:32s} {r['mb_per_s']:9.2f} MB/s ({r['fetches']} fetches, {r['bytes']} B)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
