"""`jbodlab demo`: a KIP-858 dir failure end to end against a real controller process.

Until brokers exist this is the README's main job. It formats a temp controller with
``kraft-storage``, starts a real ``kraft-controller`` process, and acts as two brokers over
TCP with kio-encoded requests:

1. both register with 3 log dirs each and heartbeat until unfenced;
2. a topic is created (UNASSIGNED dirs), each broker assigns its replicas to its dirs;
3. broker 1 reports one dir offline in a heartbeat;
4. the committed records are read back through Fetch of ``__cluster_metadata`` (a long
   poll started before the failure shows how fast a commit wakes it), checked, and
   summarised: records by type, leader moves, ISR shrinks, timings;
5. the controller is stopped with SIGTERM and must exit 0.

Exit 0 when every check passed, 1 otherwise (each failed check is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import tempfile
import time
from typing import Any

from kafka_common import ids
from kafka_common.wire import ErrorCode


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partitions", type=int, default=12, help="partitions of the demo topic (default 12)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (config, log, events)")
    parser.add_argument("--workdir", default="", help="use this dir instead of a temp dir")
    parser.add_argument("--json", action="store_true", help="also print the summary as one JSON line")


def run(args: argparse.Namespace) -> int:
    from harness.run.local_processes import ControllerProcess
    workdir = args.workdir or tempfile.mkdtemp(prefix="jbodlab-demo-")
    proc = ControllerProcess(workdir, extra={"broker.session.timeout.ms": "9000"})
    t0 = time.monotonic()
    try:
        proc.format()
        proc.start()
        started_s = time.monotonic() - t0
        summary = asyncio.run(_scenario(proc, args.partitions))
        summary["timings_ms"]["controller_start"] = round(started_s * 1000, 1)
        rc = proc.stop()
        summary["controller_exit"] = rc
        if rc != 0:
            summary["failures"].append(f"controller exited {rc} on SIGTERM (want 0)")
        summary["events"] = _count_events(proc.events_path)
        summary["total_s"] = round(time.monotonic() - t0, 2)
        _print(summary, workdir if (args.keep or args.workdir) else "")
        if args.json:
            print(json.dumps(summary, default=str))
        return 0 if not summary["failures"] else 1
    except Exception as exc:
        print(f"jbodlab demo: FAILED: {type(exc).__name__}: {exc}")
        if proc.stderr():
            print("--- controller stderr (tail) ---\n" + proc.stderr()[-2000:])
        return 1
    finally:
        proc.kill()
        if not (args.keep or args.workdir):
            shutil.rmtree(workdir, ignore_errors=True)


async def _scenario(proc, partitions: int) -> dict[str, Any]:
    from kafka_runtime.controller_client import MetadataReader, SimBroker, create_topic
    from kafka_runtime.client import KafkaClient
    rng = __import__("random").SystemRandom()
    failures: list[str] = []
    timings: dict[str, float] = {}

    def check(cond: bool, what: str) -> None:
        if not cond:
            failures.append(what)

    brokers = [SimBroker(b, [ids.random_directory_id(rng) for _ in range(3)], cluster_id=proc.cluster_id,
                         port=9092 + b) for b in (1, 2)]
    admin = await KafkaClient.connect("127.0.0.1", proc.port, client_id="demo-admin")
    reader = MetadataReader(admin)
    try:
        t = time.monotonic()
        for b in brokers:
            await b.connect("127.0.0.1", proc.port)
            resp = await b.register()
            check(resp.error_code == ErrorCode.none, f"broker {b.broker_id} registration: {resp.error_code.name}")
        timings["register_2_brokers"] = _ms(t)
        t = time.monotonic()
        await _unfence(brokers, reader, check)
        timings["until_unfenced"] = _ms(t)

        t = time.monotonic()
        resp = await create_topic(admin, "demo", partitions, 2)
        result = resp.topics[0]
        check(result.error_code == ErrorCode.none, f"CreateTopics: {result.error_code.name} {result.error_message}")
        timings["create_topic"] = _ms(t)
        await reader.catch_up()
        topic_id = reader.image.topic_ids["demo"]
        parts = reader.image.partitions_of(topic_id)
        check(len(parts) == partitions, f"{len(parts)} partitions created, want {partitions}")
        check(all(set(p.directories) == {ids.UNASSIGNED} for p in parts.values()),
              "new partitions on multi-dir brokers must have UNASSIGNED dirs")

        # Each broker places its replicas round-robin over its dirs and tells the controller.
        t = time.monotonic()
        for b in brokers:
            mine = sorted(pid for pid, p in parts.items() if b.broker_id in p.replicas)
            plan: dict = collections.defaultdict(list)
            for i, pid in enumerate(mine):
                plan[b.dirs[i % len(b.dirs)]].append((topic_id, pid))
            resp = await b.assign(plan)
            check(resp.error_code == ErrorCode.none, f"AssignReplicasToDirs b{b.broker_id}: {resp.error_code.name}")
            codes = {p.error_code for d in resp.directories for tp in d.topics for p in tp.partitions}
            check(codes == {ErrorCode.none}, f"AssignReplicasToDirs b{b.broker_id} partition errors {codes}")
        timings["assign_replicas"] = _ms(t)
        await reader.catch_up()
        before = {pid: p for pid, p in reader.image.partitions_of(topic_id).items()}
        check(all(ids.UNASSIGNED not in p.directories for p in before.values()), "assignments not all recorded")
        await _heartbeat_all(brokers, reader)

        # Broker 1 loses one dir.
        failed_dir = brokers[0].dirs[0]
        in_dir = sorted(pid for pid, p in before.items() if 1 in p.replicas and p.directory(1) == failed_dir)
        led_in_dir = [pid for pid in in_dir if before[pid].leader == 1]
        offset_before = reader.next_offset
        watcher = asyncio.ensure_future(reader.fetch_once(500))  # long poll parked at the end
        await asyncio.sleep(0.05)
        brokers[0].offline = [failed_dir]
        t = time.monotonic()
        resp = await brokers[0].heartbeat(reader.next_offset - 1)
        timings["dir_failure_heartbeat_rtt"] = _ms(t)
        check(resp.error_code == ErrorCode.none, f"heartbeat with offline dir: {resp.error_code.name}")
        await watcher
        timings["dir_failure_visible_via_fetch"] = _ms(t)
        await reader.catch_up()
        after = reader.image.partitions_of(topic_id)
        moves, shrinks = [], []
        for pid in in_dir:
            old, new = before[pid], after[pid]
            check(1 not in new.isr or new.isr == (1,), f"p{pid}: broker 1 still in ISR {new.isr} after its dir failed")
            if old.leader != new.leader:
                moves.append((pid, old.leader, new.leader))
            if old.isr != new.isr:
                shrinks.append((pid, old.isr, new.isr))
        check(sorted(p for p, *_ in moves) == sorted(led_in_dir),
              f"leaders that moved {[m[0] for m in moves]} != partitions led by broker 1 in the dir {led_in_dir}")
        check(all(new_leader == 2 for _, _, new_leader in moves), f"new leaders must be broker 2: {moves}")
        untouched = [pid for pid in before if pid not in in_dir and before[pid] != after[pid]]
        check(not untouched, f"partitions outside the failed dir changed: {untouched}")
        b1 = reader.image.brokers[1]
        check(failed_dir not in b1.log_dirs and len(b1.log_dirs) == 2, f"broker 1 dirs after failure: {b1.log_dirs}")
        resp = await brokers[0].heartbeat(reader.next_offset - 1)  # resent: idempotent
        await reader.catch_up()
        check(resp.error_code == ErrorCode.none, "repeat heartbeat must succeed")
        new_records = [r for o, r in reader.records if o >= offset_before]
        by_type = collections.Counter(type(r).__name__ for _, r in reader.records)
        return {"failures": failures, "timings_ms": timings, "records_total": len(reader.records),
                "records_by_type": dict(by_type), "high_watermark": reader.high_watermark,
                "failed_dir": ids.to_base64(failed_dir), "replicas_in_failed_dir": len(in_dir),
                "records_for_failure": collections.Counter(type(r).__name__ for r in new_records),
                "leader_moves": moves, "isr_shrinks": shrinks, "partitions": partitions}
    finally:
        for b in brokers:
            await b.close()
        await admin.close()


async def _unfence(brokers, reader, check) -> None:
    deadline = time.monotonic() + 10
    fenced = {b.broker_id for b in brokers}
    while fenced and time.monotonic() < deadline:
        await reader.catch_up()
        for b in brokers:
            resp = await b.heartbeat(reader.next_offset - 1)
            if resp.error_code == ErrorCode.none and not resp.is_fenced:
                fenced.discard(b.broker_id)
        if fenced:
            await asyncio.sleep(0.05)
    check(not fenced, f"brokers {sorted(fenced)} never unfenced")
    await reader.catch_up()


async def _heartbeat_all(brokers, reader) -> None:
    await reader.catch_up()
    for b in brokers:
        await b.heartbeat(reader.next_offset - 1)
    await reader.catch_up()


def _ms(t: float) -> float:
    return round((time.monotonic() - t) * 1000, 1)


def _count_events(path: str) -> dict[str, int]:
    from kafka_runtime.events import read_events
    try:
        return dict(collections.Counter(e["event"] for e in read_events(path)))
    except OSError:
        return {}


def _print(s: dict[str, Any], kept: str) -> None:
    ok = not s["failures"]
    print("jbodlab demo — KIP-858 dir failure against a real kraft-controller")
    print(f"  topic 'demo': {s['partitions']} partitions x RF 2 on 2 brokers x 3 dirs")
    print(f"  broker 1 lost dir {s['failed_dir']} holding {s['replicas_in_failed_dir']} replicas")
    print(f"  committed records read back via Fetch: {s['records_total']} (high watermark {s['high_watermark']})")
    for name, n in sorted(s["records_by_type"].items()):
        print(f"    {name:34s} {n}")
    print(f"  records the failure produced: {dict(s['records_for_failure'])}")
    print(f"  leader moves: {len(s['leader_moves'])}  " +
          ", ".join(f"p{p}: {a}->{b}" for p, a, b in s["leader_moves"]))
    print(f"  ISR shrinks:  {len(s['isr_shrinks'])}  " +
          ", ".join(f"p{p}: {list(a)}->{list(b)}" for p, a, b in s["isr_shrinks"]))
    print("  timings (ms): " + ", ".join(f"{k}={v}" for k, v in s["timings_ms"].items()))
    print(f"  controller events: {s.get('events', {})}; exit on SIGTERM: {s.get('controller_exit')}")
    if kept:
        print(f"  files kept in {kept}")
    print(f"  total {s.get('total_s')} s — {'OK' if ok else 'FAILED'}")
    for f in s["failures"]:
        print(f"  FAILED CHECK: {f}")
