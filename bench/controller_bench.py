"""Controller benchmark (not a test): heartbeats, one dir failure, snapshots, elections.

    .venv/bin/python bench/controller_bench.py [--quick] [--voters 1,3] [--kills 20]
                                               [--out results/bench/controller.json]

Everything runs against real ``kraft-controller`` processes over loopback TCP with
kio-encoded requests, the way brokers talk to it, with 1 and with 3 voters (a Raft quorum:
every committed record is on two disks before the answer):

1. **Heartbeats/s sustained**: K simulated brokers, each pipelining D heartbeats (no state
   change, so nothing to commit) for a fixed time; also the rate of heartbeats that each
   commit a record: B brokers, each toggling fence/unfence with one heartbeat in flight —
   the group commit puts every record written during one fsync into the next one.
2. **One dir failure** in a big cluster whose broker 1 has dirs holding 1k, 10k and 100k
   replicas (plus a remainder dir): the heartbeat that reports the dir offline returns only
   after the controller has produced, fsync'd and replayed one PartitionChangeRecord per
   replica in that dir; we time that round trip and then read the records back through
   Fetch and count them.
3. **Independent of cluster size**: the same 1k-replica dir failure in a cluster 10x smaller.

4. **Snapshots** of the 119k-partition image: write (encode + file) and load (read +
   decode); the controller's start-up from it (``startup_ms`` of its ``controller_started``
   event: log opened + snapshot loaded).
5. **Election time** after kill -9 of the leader of 3 voters with Kafka's default timeouts:
   kill → the next leader answers DescribeQuorum (p50/p99 over ``--kills``).

The clusters are built in this process (registrations, topics, partitions with directories
assigned, replayed into an image) and written as a metadata snapshot into every voter's
metadata dir before they start — a cluster of 100k+ partitions would take minutes to build
request by request. Figures go to stdout and ``results/bench/controller.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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

from controller_impl.log import DIR_NAME  # noqa: E402
from controller_impl.log.snapshots import SnapshotStore  # noqa: E402
from controller_impl.runtime.status import describe_quorum  # noqa: E402
from testkit.quorum import QuorumCluster  # noqa: E402
from kafka_runtime.controller_client import MetadataReader, SimBroker  # noqa: E402
from kafka_common import ids  # noqa: E402
from kafka_common.metadata import records as r  # noqa: E402
from kafka_common.metadata import snapshot as snapshot_format  # noqa: E402
from kafka_common.metadata.image import MetadataImage  # noqa: E402
from kafka_common.wire import ErrorCode  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402
from kafka_runtime.events import read_events  # noqa: E402

BROKERS = (1, 2, 3, 4)
DIRS_PER_BROKER = 4
EPOCH = 10
SNAPSHOT_EPOCH = 1


def build_image(dir_sizes: list[int], rng: random.Random) -> tuple[MetadataImage, dict]:
    """A cluster as an image. Broker 1's dir i holds dir_sizes[i] replicas (the other brokers
    have DIRS_PER_BROKER). Every partition has RF 2: (1, b) with b cycling over brokers
    2..4; broker 1 leads the even partitions."""
    dirs = {b: [ids.random_directory_id(rng) for _ in range(len(dir_sizes) if b == 1 else DIRS_PER_BROKER)]
            for b in BROKERS}
    image = MetadataImage()
    offset = 0
    for b in BROKERS:
        image.replay(r.RegisterBrokerRecord(
            broker_id=b, incarnation_id=ids.random_uuid(rng), broker_epoch=EPOCH,
            end_points=(r.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9090 + b, security_protocol=0),),
            fenced=False, log_dirs=tuple(sorted(dirs[b]))), offset)
        offset += 1
    topic_id = ids.random_uuid(rng)
    image.replay(r.TopicRecord(name="bench", topic_id=topic_id), offset)
    offset += 1
    owner_dir = []
    for i, n in enumerate(dir_sizes):
        owner_dir += [i] * n
    for pid in range(sum(dir_sizes)):
        other = 2 + pid % 3
        image.replay(r.PartitionRecord(
            partition_id=pid, topic_id=topic_id, replicas=(1, other), isr=(1, other),
            leader=1 if pid % 2 == 0 else other, leader_epoch=0, partition_epoch=0,
            directories=(dirs[1][owner_dir[pid]], dirs[other][pid % DIRS_PER_BROKER])), offset)
        offset += 1
    image.drain_changes()
    return image, {"dirs": dirs, "topic_id": topic_id, "partitions": sum(dir_sizes), "end_offset": offset}


def measure_snapshot(image: MetadataImage, workdir: str) -> tuple[bytes, dict]:
    end = image.last_offset + 1
    os.makedirs(workdir, exist_ok=True)
    store = SnapshotStore(workdir)
    t0 = time.perf_counter()
    blob = snapshot_format.encode(image, end, SNAPSHOT_EPOCH)
    store.write((end, SNAPSHOT_EPOCH), blob)
    write_s = time.perf_counter() - t0
    gc.disable()
    try:
        t0 = time.perf_counter()
        loaded, _, _ = snapshot_format.decode(store.read((end, SNAPSHOT_EPOCH)))
        load_s = time.perf_counter() - t0
    finally:
        gc.enable()
    assert loaded.partition_count() == image.partition_count()
    return blob, {"partitions": image.partition_count(), "bytes": len(blob),
                  "write_ms": round(write_s * 1000, 1), "load_ms": round(load_s * 1000, 1)}


def start_quorum(workdir: str, voters: int, blob: bytes, end: int) -> QuorumCluster:
    """Voters whose metadata dirs hold the cluster as a snapshot (and an empty log)."""
    q = QuorumCluster(workdir, voters, extra={"broker.session.timeout.ms": "3600000"})
    for proc in q.procs.values():
        d = os.path.join(proc.metadata_dir, DIR_NAME)
        os.makedirs(d, exist_ok=True)
        SnapshotStore(d).write((end, SNAPSHOT_EPOCH), blob)
    for proc in q.procs.values():
        proc.start(timeout_s=600)
    return q


async def heartbeat_rate(port: int, cluster_id: str, seconds: float, brokers: int = 4, depth: int = 16,
                         toggle: bool = False) -> dict:
    sims = []
    if toggle:
        # fresh brokers that are replicas of nothing: fencing one moves no leaders, so each
        # heartbeat commits exactly one Fence/Unfence record; one heartbeat in flight each
        rng = random.Random(5)
        for b in range(100, 100 + brokers):
            s = SimBroker(b, [ids.random_directory_id(rng)], cluster_id=cluster_id)
            await s.connect("127.0.0.1", port)
            reg = await s.register()
            assert reg.error_code == ErrorCode.none, reg
            sims.append(s)
        depth = 1
    else:
        for b in BROKERS[:brokers]:
            s = SimBroker(b, [], cluster_id=cluster_id)
            s.epoch = EPOCH
            await s.connect("127.0.0.1", port)
            sims.append(s)
    offset = 10 ** 9
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
                futs.append(sim.client.send(sim.heartbeat_request(offset, want_fence=flip)))
            for resp in await asyncio.gather(*futs):
                count += 1
                errors += resp.error_code != ErrorCode.none
    t0 = time.monotonic()
    await asyncio.gather(*(pump(s) for s in sims))
    elapsed = time.monotonic() - t0
    for s in sims:
        await s.close()
    return {"heartbeats": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1),
            "errors": errors, "brokers": len(sims), "pipeline_depth": depth, "state_changing": toggle}


async def fail_dir(port: int, cluster_id: str, cluster: dict, dir_index: int, offline_so_far: list) -> dict:
    b1 = SimBroker(1, cluster["dirs"][1], cluster_id=cluster_id)
    b1.epoch = EPOCH
    await b1.connect("127.0.0.1", port)
    client = await KafkaClient.connect("127.0.0.1", port)
    reader = MetadataReader(client)
    hw_resp = await client.request(reader.fetch_request(0, max_bytes=1))
    reader.next_offset = hw_resp.responses[0].partitions[0].high_watermark
    start_offset = reader.next_offset
    offline_so_far.append(cluster["dirs"][1][dir_index])
    b1.offline = list(offline_so_far)
    t0 = time.perf_counter()
    resp = await b1.heartbeat(10**9)
    rtt = time.perf_counter() - t0
    assert resp.error_code == ErrorCode.none, resp
    changes = other = 0
    t1 = time.perf_counter()
    from kafka_common.metadata.batches import decode_batches
    while True:
        fr = await client.request(reader.fetch_request(0, max_bytes=64 << 20), timeout_s=120)
        part = fr.responses[0].partitions[0]
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


def startup_of(q: QuorumCluster) -> dict:
    out = {}
    for n, proc in q.procs.items():
        ev = [e for e in read_events(proc.events_path) if e["event"] == "controller_started"]
        out[n] = ev[-1]["startup_ms"] if ev else None
    return out


async def elections(workdir: str, kills: int) -> dict:
    """kill -9 of the leader of 3 voters (Kafka's default timeouts) → the next leader answers."""
    q = QuorumCluster(workdir, 3, extra={"controller.quorum.election.timeout.ms": "1000",
                                         "controller.quorum.fetch.timeout.ms": "2000",
                                         "controller.quorum.election.backoff.max.ms": "1000"})
    q.start()
    times = []
    try:
        for _ in range(kills):
            leader = await q.leader(timeout_s=60)
            await asyncio.sleep(0.5)  # a settled quorum: followers fetching
            t0 = time.monotonic()
            q.procs[leader].kill()
            await q.leader(timeout_s=60, exclude=(leader,))
            times.append((time.monotonic() - t0) * 1000)
            q.procs[leader].start()
        times.sort()
        return {"kills": kills, "p50_ms": round(times[len(times) // 2], 1),
                "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
                "max_ms": round(times[-1], 1), "min_ms": round(times[0], 1),
                "election_timeout_ms": 1000, "fetch_timeout_ms": 2000}
    finally:
        for p in q.procs.values():
            p.kill()


async def main_async(args) -> dict:
    rng = random.Random(858)
    root = tempfile.mkdtemp(prefix="jbodlab-bench-")
    out: dict = {"host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "machine": platform.machine()}, "quick": args.quick, "runs": []}
    scale = 10 if args.quick else 1
    # broker 1's dirs: [warm-up, 1k, 1k, 1k, (10k, 100k,) remainder]. The warm-up failure
    # runs first so one-time costs (lazy imports, first encodes) land on no measured one;
    # three 1k dirs in each cluster give a median to compare across cluster sizes.
    k = 1000 // scale
    big = [100 // scale, k, k, k, 10 * k, 100 * k, 6 * k]
    small = [100 // scale, k, k, k, 9 * k]
    t0 = time.monotonic()
    big_image, big_cluster = build_image(big, rng)
    print(f"big cluster: {big_cluster['partitions']} partitions built in {time.monotonic() - t0:.1f} s", flush=True)
    big_blob, snap = measure_snapshot(big_image, os.path.join(root, "snap"))
    out["snapshot"] = snap
    print(f"snapshot of {snap['partitions']} partitions: {snap['bytes']} bytes, write {snap['write_ms']} ms, "
          f"load {snap['load_ms']} ms", flush=True)
    small_image, small_cluster = build_image(small, rng)
    small_blob = snapshot_format.encode(small_image, small_image.last_offset + 1, SNAPSHOT_EPOCH)
    del big_image, small_image
    gc.collect()
    try:
        for voters in args.voters:
            run = {"voters": voters, "dir_failures": []}
            out["runs"].append(run)

            async def failure_series(q, cluster, sizes, measured, label):
                leader = await q.leader(timeout_s=120)
                port = q.port(leader)
                offline: list = []
                await fail_dir(port, q.cluster_id, cluster, 0, offline)  # warm-up
                for i in measured:
                    res = await fail_dir(port, q.cluster_id, cluster, i, offline)
                    res["replicas_in_dir"] = sizes[i]
                    res["cluster_partitions"] = cluster["partitions"]
                    run["dir_failures"].append(res)
                    print(f"[{label}] dir failure: {sizes[i]:>6} replicas in the dir (cluster "
                          f"{cluster['partitions']:>6} partitions): {res['heartbeat_rtt_ms']:>8} ms until committed, "
                          f"{res['partition_change_records']} PartitionChangeRecords + {res['other_records']} other, "
                          f"{res['us_per_replica']} us/replica", flush=True)

            label = f"{voters} voter{'s' if voters > 1 else ''}"
            q = start_quorum(os.path.join(root, f"big-{voters}"), voters, big_blob, big_cluster["end_offset"])
            try:
                leader = await q.leader(timeout_s=120)
                run["startup_ms"] = startup_of(q)
                print(f"[{label}] start-up from the snapshot: {run['startup_ms']} ms per controller", flush=True)
                port = q.port(leader)
                hb = await heartbeat_rate(port, q.cluster_id, args.seconds)
                print(f"[{label}] heartbeats/s (no state change, {hb['brokers']} brokers x depth "
                      f"{hb['pipeline_depth']}): {hb['per_s']}  errors={hb['errors']}", flush=True)
                hb_commit = await heartbeat_rate(port, q.cluster_id, args.seconds, brokers=args.committers,
                                                 toggle=True)
                print(f"[{label}] heartbeats/s that each commit a record ({hb_commit['brokers']} brokers, one in "
                      f"flight each): {hb_commit['per_s']}  errors={hb_commit['errors']}", flush=True)
                run["heartbeats"] = hb
                run["heartbeats_committing"] = hb_commit
                await failure_series(q, big_cluster, big, (1, 2, 3, 4, 5), label)
            finally:
                q.stop()
            q2 = start_quorum(os.path.join(root, f"small-{voters}"), voters, small_blob, small_cluster["end_offset"])
            try:
                await failure_series(q2, small_cluster, small, (1, 2, 3), label)
            finally:
                q2.stop()
            med = {}
            for name, n in (("big", big_cluster["partitions"]), ("small", small_cluster["partitions"])):
                rtts = sorted(f["heartbeat_rtt_ms"] for f in run["dir_failures"]
                              if f["cluster_partitions"] == n and f["replicas_in_dir"] == k)
                med[name] = {"cluster_partitions": n, "replicas_in_dir": k, "median_ms": rtts[len(rtts) // 2],
                             "all_ms": rtts}
            run["same_dir_size_across_cluster_sizes"] = med
            print(f"[{label}] {k}-replica dir failure, median of 3: {med['big']['median_ms']} ms in a "
                  f"{med['big']['cluster_partitions']}-partition cluster vs {med['small']['median_ms']} ms in a "
                  f"{med['small']['cluster_partitions']}-partition cluster", flush=True)
        if args.kills:
            out["elections"] = await elections(os.path.join(root, "elections"), args.kills)
            e = out["elections"]
            print(f"election after kill -9 of the leader (3 voters, election timeout 1000 ms, fetch timeout "
                  f"2000 ms): p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms over {e['kills']} kills", flush=True)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller clusters (a smoke run)")
    parser.add_argument("--seconds", type=float, default=5.0, help="heartbeat measurement time")
    parser.add_argument("--voters", default="1,3", help="quorum sizes to measure (comma list)")
    parser.add_argument("--committers", type=int, default=64, help="brokers toggling fence at once")
    parser.add_argument("--kills", type=int, default=20, help="leader kills for the election time (0: skip)")
    parser.add_argument("--out", default="results/bench/controller.json")
    args = parser.parse_args()
    args.voters = [int(v) for v in args.voters.split(",") if v]
    result = asyncio.run(main_async(args))
    result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2, default=str)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
