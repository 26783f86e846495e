"""Controller benchmark (not a test): heartbeat throughput and the cost of one dir failure.

    .venv/bin/python bench/controller_bench.py [--quick] [--out results/bench/controller.json]

Everything runs against real ``kraft-controller`` processes over loopback TCP with
kio-encoded requests, the way brokers talk to it:

1. **Heartbeats/s sustained**: K simulated brokers, each pipelining D heartbeats (no state
   change, so nothing to fsync) for a fixed time; also the rate of heartbeats that each
   commit a record (fence/unfence toggles via ``want_fence``), which pays an fdatasync.
2. **One dir failure** in a big cluster whose broker 1 has dirs holding 1k, 10k and 100k
   replicas (plus a remainder dir): the heartbeat that reports the dir offline returns only
   after the controller has produced, fsync'd and replayed one PartitionChangeRecord per
   replica in that dir; we time that round trip and then read the records back through
   Fetch and count them.
3. **Independent of cluster size**: the same 1k-replica dir failure in a cluster 10x smaller.

The clusters are written straight into the controller's metadata log before it starts
(registrations, topics, partitions with directories assigned) — a cluster of 100k+
partitions would take minutes to build request by request — and the controller replays it
at start-up like any restart. Figures go to stdout and ``results/bench/controller.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from controller_impl.log import MetadataLog  # noqa: E402
from controller_impl.runtime.sim import ControllerProcess, MetadataReader, SimBroker  # noqa: E402
from kafka_common import ids  # noqa: E402
from kafka_common.metadata import records as r  # noqa: E402
from kafka_common.wire import ErrorCode  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402

BROKERS = (1, 2, 3, 4)
DIRS_PER_BROKER = 4
EPOCH = 10
CHUNK = 5000


def build_cluster(proc: ControllerProcess, dir_sizes: list[int], rng: random.Random) -> dict:
    """Write a cluster into proc's metadata log. Broker 1's dir i holds dir_sizes[i] replicas
    (any number of dirs; the other brokers have DIRS_PER_BROKER). Every partition has RF 2: (1, b) with b cycling
    over brokers 2..4; broker 1 leads the even partitions."""
    dirs = {b: [ids.random_directory_id(rng) for _ in range(len(dir_sizes) if b == 1 else DIRS_PER_BROKER)]
            for b in BROKERS}
    incarnations = {b: ids.random_uuid(rng) for b in BROKERS}
    records: list = [r.RegisterBrokerRecord(
        broker_id=b, incarnation_id=incarnations[b], broker_epoch=EPOCH,
        end_points=(r.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9090 + b, security_protocol=0),),
        fenced=False, log_dirs=tuple(sorted(dirs[b]))) for b in BROKERS]
    topic_id = ids.random_uuid(rng)
    records.append(r.TopicRecord(name="bench", topic_id=topic_id))
    total = sum(dir_sizes)
    owner_dir = []
    for i, n in enumerate(dir_sizes):
        owner_dir += [i] * n
    log = MetadataLog.open(proc.metadata_dir)
    ts = int(time.time() * 1000)
    for pid in range(total):
        other = 2 + pid % 3
        leader = 1 if pid % 2 == 0 else other
        records.append(r.PartitionRecord(
            partition_id=pid, topic_id=topic_id, replicas=(1, other), isr=(1, other), leader=leader,
            leader_epoch=0, partition_epoch=0,
            directories=(dirs[1][owner_dir[pid]], dirs[other][pid % DIRS_PER_BROKER])))
        if len(records) >= CHUNK:
            log.append(records, timestamp_ms=ts)
            records = []
    if records:
        log.append(records, timestamp_ms=ts)
    end = log.end_offset
    log.close()
    return {"dirs": dirs, "incarnations": incarnations, "topic_id": topic_id, "partitions": total,
            "end_offset": end}


async def heartbeat_rate(port: int, cluster_id: str, seconds: float, brokers: int = 4, depth: int = 16,
                         toggle: bool = False) -> dict:
    sims = []
    if toggle:
        # a fresh broker that is no replica of anything: fencing it moves no leaders, so
        # each heartbeat commits exactly one Fence/Unfence record
        s = SimBroker(100, [ids.random_directory_id(random.Random(5))], cluster_id=cluster_id)
        await s.connect("127.0.0.1", port)
        reg = await s.register()
        assert reg.error_code == ErrorCode.none, reg
        sims.append(s)
    for b in ([] if toggle else BROKERS[:brokers]):
        s = SimBroker(b, [], cluster_id=cluster_id)
        s.epoch = EPOCH
        await s.connect("127.0.0.1", port)
        sims.append(s)
    reader = MetadataReader(await KafkaClient.connect("127.0.0.1", port))
    await reader.catch_up(120)
    offset = reader.next_offset - 1
    errors = 0
    count = 0
    stop_at = time.monotonic() + seconds

    async def pump(sim: SimBroker) -> None:
        nonlocal count, errors
        flip = False
        while time.monotonic() < stop_at:
            futs = []
            for _ in range(depth):
                if toggle:
                    flip = not flip
                futs.append(sim.client.send(sim.heartbeat_request(offset + 10**9, want_fence=flip)))
            for resp in await asyncio.gather(*futs):
                count += 1
                errors += resp.error_code != ErrorCode.none
    t0 = time.monotonic()
    await asyncio.gather(*(pump(s) for s in sims))
    elapsed = time.monotonic() - t0
    for s in sims:
        await s.close()
    await reader.client.close()
    return {"heartbeats": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1),
            "errors": errors, "brokers": len(sims), "pipeline_depth": depth,
            "state_changing": toggle}


async def fail_dir(port: int, cluster_id: str, cluster: dict, dir_index: int, offline_so_far: list) -> dict:
    b1 = SimBroker(1, cluster["dirs"][1], cluster_id=cluster_id)
    b1.epoch = EPOCH
    await b1.connect("127.0.0.1", port)
    client = await KafkaClient.connect("127.0.0.1", port)
    reader = MetadataReader(client)
    reader.next_offset = 0
    # read only the tail: skip to the current end first (offsets are what matter)
    hw_resp = await client.request(reader.fetch_request(0, max_bytes=1))
    reader.next_offset = hw_resp.responses[0].partitions[0].high_watermark
    start_offset = reader.next_offset
    failed = cluster["dirs"][1][dir_index]
    offline_so_far.append(failed)
    b1.offline = list(offline_so_far)
    t0 = time.perf_counter()
    resp = await b1.heartbeat(10**9)
    rtt = time.perf_counter() - t0
    assert resp.error_code == ErrorCode.none, resp
    # read back what was committed (the reader keeps no image: records only)
    changes = 0
    other = 0
    t1 = time.perf_counter()
    while True:
        req = reader.fetch_request(0, max_bytes=64 << 20)
        fr = await client.request(req, timeout_s=120)
        part = fr.responses[0].partitions[0]
        from kafka_common.metadata.batches import decode_batches
        for header, recs in decode_batches(bytes(part.records or b"")):
            for i, rec in enumerate(recs):
                if header.base_offset + i >= reader.next_offset:
                    if isinstance(rec, r.PartitionChangeRecord):
                        changes += 1
                    else:
                        other += 1
            reader.next_offset = max(reader.next_offset, header.last_offset + 1)
        if reader.next_offset >= part.high_watermark:
            break
    read_s = time.perf_counter() - t1
    await b1.close()
    await client.close()
    return {"replicas_in_dir": None, "partition_change_records": changes, "other_records": other,
            "records_committed": reader.next_offset - start_offset,
            "heartbeat_rtt_ms": round(rtt * 1000, 1), "fetch_back_ms": round(read_s * 1000, 1),
            "us_per_replica": round(rtt * 1e6 / max(changes, 1), 1)}


def start_cluster(workdir: str, dir_sizes: list[int], rng: random.Random) -> tuple[ControllerProcess, dict, float]:
    proc = ControllerProcess(workdir, extra={"broker.session.timeout.ms": "3600000"})
    proc.format()
    t0 = time.monotonic()
    cluster = build_cluster(proc, dir_sizes, rng)
    built = time.monotonic() - t0
    t0 = time.monotonic()
    proc.start(timeout_s=600)
    cluster["build_s"] = round(built, 1)
    cluster["controller_start_s"] = round(time.monotonic() - t0, 1)
    return proc, cluster, built


async def main_async(args) -> dict:
    rng = random.Random(858)
    root = tempfile.mkdtemp(prefix="jbodlab-bench-")
    out: dict = {"host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "machine": platform.machine()}, "quick": args.quick}
    scale = 10 if args.quick else 1
    # broker 1's dirs: [warm-up, 1k, 1k, 1k, (10k, 100k,) remainder]. The warm-up failure
    # runs first so one-time costs (lazy imports, first encodes) land on no measured one;
    # three 1k dirs in each cluster give a median to compare across cluster sizes.
    k = 1000 // scale
    big = [100 // scale, k, k, k, 10 * k, 100 * k, 6 * k]
    small = [100 // scale, k, k, k, 9 * k]
    procs = []
    failures = []

    async def failure_series(proc, cluster, sizes, measured):
        offline: list = []
        await fail_dir(proc.port, proc.cluster_id, cluster, 0, offline)  # warm-up
        for i in measured:
            res = await fail_dir(proc.port, proc.cluster_id, cluster, i, offline)
            res["replicas_in_dir"] = sizes[i]
            res["cluster_partitions"] = cluster["partitions"]
            failures.append(res)
            print(f"dir failure: {sizes[i]:>6} replicas in the dir (cluster {cluster['partitions']:>6} "
                  f"partitions): {res['heartbeat_rtt_ms']:>8} ms until committed, "
                  f"{res['partition_change_records']} PartitionChangeRecords + {res['other_records']} other, "
                  f"{res['us_per_replica']} us/replica; fetched back in {res['fetch_back_ms']} ms", flush=True)
    try:
        proc, cluster, _ = start_cluster(os.path.join(root, "big"), big, rng)
        procs.append(proc)
        print(f"big cluster: {cluster['partitions']} partitions ({cluster['partitions'] * 2} replicas), "
              f"built in {cluster['build_s']} s, controller replayed it in {cluster['controller_start_s']} s",
              flush=True)
        hb = await heartbeat_rate(proc.port, proc.cluster_id, args.seconds)
        print(f"heartbeats/s (no state change, {hb['brokers']} brokers x depth {hb['pipeline_depth']}): "
              f"{hb['per_s']}  errors={hb['errors']}", flush=True)
        hb_fsync = await heartbeat_rate(proc.port, proc.cluster_id, args.seconds / 2, toggle=True, depth=1)
        print(f"heartbeats/s that each commit a fence/unfence record (fdatasync each): {hb_fsync['per_s']}"
              f"  errors={hb_fsync['errors']}", flush=True)
        out["heartbeats"] = hb
        out["heartbeats_committing"] = hb_fsync
        await failure_series(proc, cluster, big, (1, 2, 3, 4, 5))
        out["big_cluster"] = {k2: cluster[k2] for k2 in ("partitions", "build_s", "controller_start_s")}
        out["big_cluster"]["exit_on_sigterm"] = proc.stop()

        proc2, cluster2, _ = start_cluster(os.path.join(root, "small"), small, rng)
        procs.append(proc2)
        print(f"small cluster: {cluster2['partitions']} partitions", flush=True)
        await heartbeat_rate(proc2.port, proc2.cluster_id, 1.0)  # same warm-up as the big one
        await failure_series(proc2, cluster2, small, (1, 2, 3))
        out["small_cluster"] = {k2: cluster2[k2] for k2 in ("partitions", "build_s", "controller_start_s")}
        out["small_cluster"]["exit_on_sigterm"] = proc2.stop()
        med = {}
        for label, n in (("big", cluster["partitions"]), ("small", cluster2["partitions"])):
            rtts = sorted(f["heartbeat_rtt_ms"] for f in failures
                          if f["cluster_partitions"] == n and f["replicas_in_dir"] == k)
            med[label] = {"cluster_partitions": n, "replicas_in_dir": k, "median_ms": rtts[len(rtts) // 2],
                          "all_ms": rtts}
        out["same_dir_size_across_cluster_sizes"] = med
        print(f"{k}-replica dir failure, median of 3: {med['big']['median_ms']} ms in a "
              f"{med['big']['cluster_partitions']}-partition cluster vs {med['small']['median_ms']} ms in a "
              f"{med['small']['cluster_partitions']}-partition cluster", flush=True)
        out["dir_failures"] = failures
        return out
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller clusters (a smoke run)")
    parser.add_argument("--seconds", type=float, default=5.0, help="heartbeat measurement time")
    parser.add_argument("--out", default="results/bench/controller.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, default=str)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
