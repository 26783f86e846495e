"""Retention micro-benchmark: the cost of a retention round (LogManager.enforce_retention).

    .venv/bin/python bench/retention_bench.py [--dir DIR] [--partitions 1000] [--segments 4]

Builds ``--partitions`` logs of ``--segments`` small segments each in a fresh temp dir under
``--dir`` (removed afterwards), then measures: a round with nothing to delete (every log
checked: the steady-state cost per round), rounds deleting at most 100 segments each until
retention.bytes holds (per round and per deleted segment), and the first time-based check of
a loaded 64 MiB segment (its batch headers are scanned once: there is no .timeindex).
Prints one line per figure and writes ``results/bench/retention.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "broker", "storage")]

from broker_impl.storage.log_manager import LogManager  # noqa: E402
from broker_impl.storage.log_config import LogConfig  # noqa: E402
from broker_impl.storage.startup import load_log_dirs  # noqa: E402
from conftest import NODE_ID, format_dir  # noqa: E402
from storage_batches import _TS as BATCH_TIME, make_batch  # noqa: E402

MAX_SEGMENTS_PER_ROUND = 100


def _abort(dir_path: str, errno: int, op: str) -> None:
    raise SystemExit(f"I/O error {errno} in {dir_path} during {op}: benchmark aborted")


def _open(path: str, cfg: LogConfig) -> LogManager:
    dir_set = load_log_dirs([path], path, NODE_ID, random.Random(1))
    return LogManager.open(dir_set, cfg, on_failure=_abort, now_ms=lambda: time.monotonic_ns() // 1_000_000)


def bench_rounds(base: str, partitions: int, segments: int) -> dict:
    path = os.path.join(base, "d0")
    format_dir(path)
    batch = make_batch(4, 200)
    # retention on, nothing due: every log takes its lock and checks its oldest segment
    cfg = LogConfig(segment_bytes=len(batch) * 4, retention_ms=7 * 24 * 3600 * 1000, retention_bytes=1 << 40)
    lm = _open(path, cfg)
    tid = uuid.uuid4()
    for p in range(partitions):
        log = lm.get_or_create_log(tid, "bench", p, path)
        for _ in range(segments * 4):
            log.append_as_leader(batch, 0)
        log.high_watermark = log.log_end_offset
    now = int(BATCH_TIME.timestamp() * 1000) + 1000  # the batches are 1 s old: nothing due by time
    t0 = time.perf_counter()
    deleted, _ = lm.enforce_retention(now, only_dir=path, max_segments=MAX_SEGMENTS_PER_ROUND)
    idle_s = time.perf_counter() - t0
    assert deleted == 0
    keep = LogConfig(segment_bytes=cfg.segment_bytes, retention_ms=-1, retention_bytes=cfg.segment_bytes)
    lm.config_for = lambda topic: keep
    rounds, total, t0 = 0, 0, time.perf_counter()
    while True:
        deleted, _ = lm.enforce_retention(now, only_dir=path, max_segments=MAX_SEGMENTS_PER_ROUND)
        if not deleted:
            break
        rounds += 1
        total += deleted
    busy_s = time.perf_counter() - t0
    lm.close()
    return {"partitions": partitions, "segments_per_partition": segments + 1,
            "idle_round_ms": round(idle_s * 1000, 2), "idle_round_us_per_log": round(idle_s * 1e6 / partitions, 2),
            "deleting_rounds": rounds, "segments_deleted": total,
            "ms_per_deleting_round": round(busy_s * 1000 / max(rounds, 1), 2),
            "ms_per_deleted_segment": round(busy_s * 1000 / max(total, 1), 3)}


def bench_first_time_check(base: str, mb: int) -> dict:
    path = os.path.join(base, "d1")
    format_dir(path)
    batch = make_batch(100, 150)
    cfg = LogConfig(segment_bytes=(mb << 20) + len(batch), retention_ms=-1)
    lm = _open(path, cfg)
    log = lm.get_or_create_log(uuid.uuid4(), "scan", 0, path)
    for _ in range((mb << 20) // len(batch)):
        log.append_as_leader(batch, 0)
    lm.close()
    lm = _open(path, cfg)  # loaded: the segment's largest timestamp is unknown until scanned
    seg = lm.get_log("scan", 0)._segments[0]
    t0 = time.perf_counter()
    seg.largest_timestamp()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    seg.largest_timestamp()
    again_s = time.perf_counter() - t0
    lm.close()
    return {"segment_mb": mb, "batches": (mb << 20) // len(batch), "first_check_ms": round(first_s * 1000, 1),
            "cached_check_us": round(again_s * 1e6, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--scan-mb", type=int, default=64)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="jbodlab-retention-bench-", dir=args.dir)
    try:
        rounds = bench_rounds(base, args.partitions, args.segments)
        scan = bench_first_time_check(base, args.scan_mb)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for k, v in {**rounds, **{f"scan_{k}": v for k, v in scan.items()}}.items():
        print(f"{k:32s} {v}")
    out = {"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
           "rounds": rounds, "first_time_check": scan, "ts": time.time()}
    os.makedirs(os.path.join(ROOT, "results", "bench"), exist_ok=True)
    with open(os.path.join(ROOT, "results", "bench", "retention.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
