"""Consumer-group benchmark: join/rebalance time for 1/10/100 members, OffsetCommit throughput,
coordinator failover after a log-dir failure.

    .venv/bin/python bench/groups_bench.py [--members 1,10,100] [--commit-s 5] [--failover-runs 3]
                                           [--part join,commit,failover]

A real cluster (1 kraft-controller + 3 kraft-brokers, real processes on loopback,
``__consumer_offsets`` RF 3, min.insync.replicas 2, ``group.initial.rebalance.delay.ms=0``).
Members speak the classic protocol directly (``kafka_runtime.client``, one connection each,
as every consumer has its own coordinator connection): JoinGroup v7 (MEMBER_ID_REQUIRED
round trip included), SyncGroup v5 (the leader assigns), Heartbeat every
``--heartbeat-ms`` (200), rejoin on REBALANCE_IN_PROGRESS.

* **join**: N members start joining at once; time until all N are synced in one generation
  of N members. **rebalance-add**: one more member joins a stable group of N; time until all
  N+1 are synced in the new generation (the others learn of it through their heartbeat, so
  up to one heartbeat interval is protocol delay). **rebalance-leave**: one member sends
  LeaveGroup; time until the other N are synced again.
* **commit**: OffsetCommit (acks=all, RF 3) back to back on one connection for
  ``--commit-s`` seconds, 1 partition per request and 100 partitions per request; also 8
  connections at once (8 groups): commits/s, offsets/s, latency p50/p99.
* **failover** (root: loop device): broker 1's data dir 0 is ext4 on a loop device and holds
  the group's ``__consumer_offsets`` partition (led by broker 1); after a commit, the dir
  fails (``EXT4_IOC_SHUTDOWN``); measured: EIO → a FindCoordinator names another broker and
  its OffsetFetch returns the committed offset (``coordinator_failover_ms``). A fresh cluster
  per run (a shut-down ext4 stays dead).

Writes ``results/bench/groups.json``. The machine is shared (2 cores): figures vary with load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from loopdev import LoopFs, skip_reason as loop_skip_reason  # noqa: E402
from testkit.cluster import Cluster  # noqa: E402
from broker_impl.groups.state.records import partition_for  # noqa: E402
from kafka_common import wire  # noqa: E402
from kafka_common.wire import ErrorCode  # noqa: E402
from kafka_runtime.client import KafkaClient  # noqa: E402

SUB = b"\x00\x00\x00\x00\x00\x01\x00\x05bench\x00\x00\x00\x00"
GROUP_KEYS = {"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
              "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2) if s else float("nan")


async def connect(port: int) -> KafkaClient:
    c = await KafkaClient.connect("127.0.0.1", port, client_id="bench")
    await c.negotiate()
    return c


async def coordinator(cluster: Cluster, group: str) -> int:
    """The coordinator's port (FindCoordinator v3 through broker 1, retried), once it has
    loaded the group's partition (an OffsetFetch answers without error): not timed."""
    c = await connect(cluster.brokers[0].port)
    try:
        for _ in range(1000):
            r = await c.request(wire.make(wire.request_class(10, 3), key=group, key_type=0))
            if r.error_code == ErrorCode.none:
                coord = await connect(r.port)
                try:
                    f = await coord.request(offset_fetch(group))
                finally:
                    await coord.close()
                if f.groups[0].error_code == ErrorCode.none:
                    return r.port
            await asyncio.sleep(0.02)
    finally:
        await c.close()
    raise RuntimeError(f"no coordinator for {group}")


def offset_fetch(group: str):
    mod = wire.request_module(9, 8)
    return wire.make(wire.request_class(9, 8), require_stable=False, groups=(wire.make(
        mod.OffsetFetchRequestGroup, group_id=group, topics=(wire.make(
            mod.OffsetFetchRequestTopics, name="bench", partition_indexes=(0,)),)),))


class Member:
    def __init__(self, client: KafkaClient, group: str, heartbeat_ms: int) -> None:
        self.c, self.group, self.heartbeat_ms = client, group, heartbeat_ms
        self.member_id = ""
        self.generation = -1
        self.members_seen = 0      # leader: member count of its generation
        self.synced_generation = -1
        self.left = False

    async def join(self) -> None:
        while True:
            r = await self.c.request(wire.make(
                wire.request_class(11, 7), group_id=self.group, session_timeout=timedelta(seconds=10),
                rebalance_timeout=timedelta(seconds=30), member_id=self.member_id, group_instance_id=None,
                protocol_type="consumer",
                protocols=(wire.make(wire.request_module(11, 7).JoinGroupRequestProtocol, name="range",
                                     metadata=SUB),)), timeout_s=60)
            if r.error_code == ErrorCode.member_id_required:
                self.member_id = r.member_id
                continue
            if r.error_code == ErrorCode.coordinator_load_in_progress:
                await asyncio.sleep(0.01)
                continue
            if r.error_code != ErrorCode.none:
                raise RuntimeError(f"JoinGroup: {r.error_code.name}")
            self.generation = r.generation_id
            leader = r.leader == self.member_id
            assignments = tuple(wire.make(wire.request_module(14, 5).SyncGroupRequestAssignment,
                                          member_id=m.member_id, assignment=b"") for m in r.members) if leader else ()
            s = await self.c.request(wire.make(
                wire.request_class(14, 5), group_id=self.group, generation_id=self.generation,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer", protocol_name="range",
                assignments=assignments), timeout_s=60)
            if s.error_code == ErrorCode.rebalance_in_progress:
                continue
            if s.error_code != ErrorCode.none:
                raise RuntimeError(f"SyncGroup: {s.error_code.name}")
            if leader:
                self.members_seen = len(r.members)
            self.synced_generation = self.generation
            return

    async def run(self) -> None:
        await self.join()
        while not self.left:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            if self.left:
                return
            r = await self.c.request(wire.make(wire.request_class(12, 4), group_id=self.group,
                                               generation_id=self.generation, member_id=self.member_id,
                                               group_instance_id=None))
            if r.error_code in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
                await self.join()
            elif r.error_code != ErrorCode.none and not self.left:
                raise RuntimeError(f"Heartbeat: {r.error_code.name}")

    async def leave(self) -> None:
        self.left = True
        await self.c.request(wire.make(wire.request_class(13, 5), group_id=self.group, members=(
            wire.make(wire.request_module(13, 5).MemberIdentity, member_id=self.member_id, group_instance_id=None,
                      reason=None),)))


async def settled(members: list[Member], n: int, tasks: list, timeout_s: float = 120) -> float:
    """Wait until all ``members`` are synced in one generation of ``n`` members; the instant."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()
        gens = {m.synced_generation for m in members}
        if len(gens) == 1 and -1 not in gens and max(m.members_seen for m in members
                                                     if m.synced_generation in gens) == n:
            leader_gen = [m for m in members if m.members_seen == n and m.synced_generation in gens]
            if leader_gen:
                return time.monotonic()
        await asyncio.sleep(0.002)
    raise RuntimeError(f"{n} members did not settle in {timeout_s}s")


async def bench_join(cluster: Cluster, sizes: list[int], heartbeat_ms: int) -> list[dict]:
    rows = []
    for n in sizes:
        group = f"join-{n}"
        port = await coordinator(cluster, group)
        clients = [await connect(port) for _ in range(n + 1)]
        members = [Member(c, group, heartbeat_ms) for c in clients[:n]]
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(m.run()) for m in members]
        t1 = await settled(members, n, tasks)
        extra = Member(clients[n], group, heartbeat_ms)
        t2 = time.monotonic()
        tasks.append(asyncio.ensure_future(extra.run()))
        everyone = members + [extra]
        t3 = await settled(everyone, n + 1, tasks)
        t4 = time.monotonic()
        await extra.leave()
        t5 = await settled(members, n, tasks)
        for m in members:
            m.left = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.close()
        row = {"members": n, "join_ms": round((t1 - t0) * 1000, 1), "rebalance_add_ms": round((t3 - t2) * 1000, 1),
               "rebalance_leave_ms": round((t5 - t4) * 1000, 1), "heartbeat_ms": heartbeat_ms}
        print(f"  {n:4d} members: join {row['join_ms']:8.1f} ms, +1 member {row['rebalance_add_ms']:8.1f} ms, "
              f"-1 member {row['rebalance_leave_ms']:8.1f} ms", flush=True)
        rows.append(row)
    return rows


def commit_request(group: str, topic: str, partitions: int, offset: int):
    mod = wire.request_module(8, 8)
    return wire.make(wire.request_class(8, 8), group_id=group, generation_id_or_member_epoch=-1, member_id="",
                     group_instance_id=None, topics=(wire.make(mod.OffsetCommitRequestTopic, name=topic, partitions=tuple(
                         wire.make(mod.OffsetCommitRequestPartition, partition_index=p, committed_offset=offset,
                                   committed_leader_epoch=-1, committed_metadata="") for p in range(partitions))),))


async def commit_loop(port: int, group: str, topic: str, partitions: int, duration_s: float) -> list[float]:
    c = await connect(port)
    lat = []
    try:
        for _ in range(500):   # until the coordinator has loaded the group's partition (not timed)
            r = await c.request(commit_request(group, topic, partitions, 0))
            if r.topics[0].partitions[0].error_code != ErrorCode.coordinator_load_in_progress:
                break
            await asyncio.sleep(0.01)
        end = time.monotonic() + duration_s
        i = 0
        while time.monotonic() < end:
            i += 1
            t = time.monotonic()
            r = await c.request(commit_request(group, topic, partitions, i))
            lat.append((time.monotonic() - t) * 1000)
            bad = [p.error_code for tp in r.topics for p in tp.partitions if p.error_code != ErrorCode.none]
            if bad:
                raise RuntimeError(f"OffsetCommit: {bad[0].name}")
    finally:
        await c.close()
    return lat


async def bench_commit(cluster: Cluster, duration_s: float) -> list[dict]:
    rows = []
    for conns, partitions in ((1, 1), (1, 100), (8, 1)):
        groups = [f"commit-{conns}-{partitions}-{i}" for i in range(conns)]
        ports = [await coordinator(cluster, g) for g in groups]
        t0 = time.monotonic()
        lats = await asyncio.gather(*(commit_loop(p, g, "bench", partitions, duration_s)
                                      for p, g in zip(ports, groups)))
        wall = time.monotonic() - t0
        all_lat = [x for lat in lats for x in lat]
        row = {"connections": conns, "partitions_per_request": partitions,
               "commits_per_s": round(len(all_lat) / wall, 1), "offsets_per_s": round(len(all_lat) * partitions / wall, 1),
               "p50_ms": pct(all_lat, 0.5), "p99_ms": pct(all_lat, 0.99)}
        print(f"  {conns} conn × {partitions:3d} partitions/request: {row['commits_per_s']:8.1f} commits/s "
              f"({row['offsets_per_s']:.0f} offsets/s), p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms", flush=True)
        rows.append(row)
    return rows


def new_cluster(tmp: str, loop_fs: LoopFs | None = None) -> Cluster:
    c = Cluster(_P(tmp), broker_extra=GROUP_KEYS)
    if loop_fs is not None:
        c.brokers[0].dir_override = {0: loop_fs.mnt}
    c.prepare()
    c.start()
    return c


class _P(str):
    """What Cluster expects of a pytest tmp path: ``/`` joins."""
    def __truediv__(self, other: str) -> "_P":
        return _P(os.path.join(self, other))


async def failover_once(cluster: Cluster, loop_fs: LoopFs) -> dict:
    b1 = cluster.brokers[0]
    failing_dir = b1.dir_ids()[loop_fs.mnt]
    await asyncio.to_thread(cluster.create_topic, "__consumer_offsets", {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]})
    im = await asyncio.to_thread(cluster.wait_image, lambda im: "__consumer_offsets" in im.topic_ids and all(
        p.leader == 1 and len(p.isr) == 3 and p.directories[0] in b1.dir_ids().values()
        for p in im.partitions_of(im.topic_ids["__consumer_offsets"]).values()), 30, "offsets topic placed")
    tid = im.topic_ids["__consumer_offsets"]
    await asyncio.to_thread(cluster.create_topic, "bench", {0: [2, 3, 1]})
    (victim,) = [p for p, reg in im.partitions_of(tid).items() if reg.directories[0] == failing_dir]
    group = next(f"failover-{i}" for i in range(1000) if partition_for(f"failover-{i}", 3) == victim)
    port = await coordinator(cluster, group)
    assert port == b1.port
    lat = await commit_loop(port, group, "bench", 1, 0.2)   # commits offsets 1..k
    committed = len(lat)
    t_fail = time.time_ns()
    loop_fs.shutdown()
    fetch = offset_fetch(group)
    clients: dict[int, KafkaClient] = {}
    answered_by = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            for b in cluster.brokers[1:]:
                if b.port not in clients:
                    clients[b.port] = await connect(b.port)
            r = await clients[cluster.brokers[1].port].request(
                wire.make(wire.request_class(10, 3), key=group, key_type=0))
            if r.error_code == ErrorCode.none and r.port != b1.port:
                f = await clients[r.port].request(fetch)
                g = f.groups[0]
                if g.error_code == ErrorCode.none:
                    offset = g.topics[0].partitions[0].committed_offset
                    if offset != committed:
                        raise RuntimeError(f"committed offset {committed}, the new coordinator has {offset}")
                    answered_by = r.node_id
                    break
        except (OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.005)
    t_ok = time.time_ns()
    for c in clients.values():
        await c.close()
    if answered_by is None:
        raise RuntimeError("no new coordinator answered within 60 s")
    events = [e for e in b1.events() if e["event"] == "dir_offline"]
    detect_ms = round((events[0]["ts_ns"] - t_fail) / 1e6, 1) if events else None
    return {"coordinator_failover_ms": round((t_ok - t_fail) / 1e6, 1), "detect_ms": detect_ms,
            "new_coordinator": answered_by, "committed_offset": committed}


async def bench_failover(runs: int) -> list[dict]:
    reason = loop_skip_reason()
    if reason:
        print(f"  failover skipped: {reason}")
        return []
    rows = []
    for i in range(runs):
        fs = LoopFs(size_mb=64)
        tmp = tempfile.mkdtemp(prefix="jbodtest-groups-bench-")
        cluster = None
        try:
            fs.setup()
            cluster = await asyncio.to_thread(new_cluster, tmp, fs)
            row = await failover_once(cluster, fs)
        finally:
            if cluster is not None:
                cluster.kill()
            fs.cleanup()
        print(f"  run {i + 1}: EIO → new coordinator answers with the committed offset in "
              f"{row['coordinator_failover_ms']} ms (dir offline after {row['detect_ms']} ms; "
              f"broker {row['new_coordinator']})", flush=True)
        rows.append(row)
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", default="1,10,100")
    ap.add_argument("--heartbeat-ms", type=int, default=200)
    ap.add_argument("--commit-s", type=float, default=5.0)
    ap.add_argument("--failover-runs", type=int, default=3)
    ap.add_argument("--part", default="join,commit,failover")
    args = ap.parse_args()
    parts = set(args.part.split(","))
    out: dict = {"host": platform.node(), "cpus": os.cpu_count(), "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "note": "2 shared cores; other engineers' work running"}
    if parts & {"join", "commit"}:
        tmp = tempfile.mkdtemp(prefix="jbodtest-groups-bench-")
        cluster = await asyncio.to_thread(new_cluster, tmp)
        try:
            await asyncio.to_thread(cluster.create_topic, "bench", {p: [1 + (p + i) % 3 for i in range(3)] for p in range(100)})
            if "join" in parts:
                print("join / rebalance (members speak the classic protocol, one connection each):")
                out["join"] = await bench_join(cluster, [int(x) for x in args.members.split(",")], args.heartbeat_ms)
            if "commit" in parts:
                print(f"OffsetCommit, acks=all RF 3, {args.commit_s} s each:")
                out["commit"] = await bench_commit(cluster, args.commit_s)
        finally:
            cluster.kill()
    if "failover" in parts:
        print("coordinator failover after a log-dir failure (EXT4_IOC_SHUTDOWN on the offsets partition's dir):")
        out["failover"] = await bench_failover(args.failover_runs)
        if out["failover"]:
            vals = [r["coordinator_failover_ms"] for r in out["failover"]]
            print(f"  median {statistics.median(vals)} ms over {len(vals)} runs")
    os.makedirs(os.path.join(ROOT, "results", "bench"), exist_ok=True)
    path = os.path.join(ROOT, "results", "bench", "groups.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"written {path}")


if __name__ == "__main__":
    asyncio.run(main())
