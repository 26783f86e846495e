"""Idempotent producers at S15's shape, then a log-level audit: every duplicate classified by
producer epoch.

    .venv/bin/python bench/idempotence_bench.py [--partitions 300] [--rate 1000] [--seconds 24]
                                                [--producers 4] [--flush-messages N]
                                                [--message-timeout-ms 20000] [--request-timeout-ms 5000]

A real cluster (1 kraft-controller + 3 kraft-brokers on loopback), one topic of
``--partitions`` partitions RF 3 (leaders spread over the brokers), ``--producers``
confluent-kafka producers with the lab workload's settings (acks=all, idempotent, linger 5 ms,
message/request timeouts as given) sending ``--rate`` records/s round robin for ``--seconds``.
Then every partition is read from its leader batch by batch (raw Fetch, v2 batch headers), and
each value's copies are located by (offset, producer id, epoch, sequence).

The lab's durability check sees duplicates but not the epochs. This audit tells them apart:
- **same epoch**: the broker appended a retry it should have answered with the first copy's
  offsets. That is a broker bug.
- **new epoch**: the client re-sent under a bumped epoch. librdkafka does this after a
  message timeout. To the broker that is a new producer.

Prints the figures and writes ``results/bench/idempotence.json``. ``--flush-messages`` sets
``log.flush.interval.messages`` (the lab's scenarios use 5). On a loaded 2-core machine, acks
slow enough to time messages out are what the lab's S15 produced.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from broker_impl.groups.state.records import decode_batches  # noqa: E402
from kafka_common import batch_header as bh  # noqa: E402
from testkit.cluster import running_cluster  # noqa: E402
from testkit.protocol import RawConnection, fetch_request  # noqa: E402


async def read_partition(port: int, topic: str, partition: int) -> tuple[list, list]:
    """(batch headers, (offset, key, value) records) of one partition up to its high watermark."""
    c = await RawConnection.open(port)
    headers: list = []
    records: list = []
    offset = 0
    try:
        while True:
            resp = await c.call(fetch_request(12, topic, partition, offset, max_bytes=4 << 20))
            part = resp.responses[0].partitions[0]
            data = bytes(part.records or b"")
            if not data:
                break
            last = offset
            for _pos, h in bh.iter_batches(data):
                headers.append(h)
                last = h.base_offset + h.last_offset_delta + 1
            records.extend(decode_batches(data))
            if last >= part.high_watermark or last == offset:
                break
            offset = last
    finally:
        await c.close()
    return headers, records


def audit(parts: list[tuple[list, list]]) -> dict:
    """Duplicated values and how their copies differ."""
    copies = same_epoch = new_epoch = 0
    examples: list = []
    epochs: collections.Counter = collections.Counter()
    for p, (headers, records) in enumerate(parts):
        at: dict[int, tuple[int, int, int]] = {}
        for h in headers:
            epochs[(h.producer_id, h.producer_epoch)] += 1
            for d in range(h.last_offset_delta + 1):
                at[h.base_offset + d] = (h.producer_id, h.producer_epoch, h.base_sequence + d)
        where: dict[bytes, list] = collections.defaultdict(list)
        for off, _key, value in records:
            where[value].append((off, *at[off]))
        for value, w in where.items():
            if len(w) < 2:
                continue
            copies += len(w) - 1
            if len({(x[1], x[2]) for x in w}) < len(w):
                same_epoch += 1
            else:
                new_epoch += 1
            if len(examples) < 5:
                examples.append({"partition": p, "value": value.decode(errors="replace"),
                                 "copies": [dict(zip(("offset", "producer_id", "epoch", "sequence"), x)) for x in w]})
    return {"duplicate_copies": copies, "values_duplicated_in_one_epoch": same_epoch,
            "values_duplicated_across_epochs": new_epoch,
            "epochs_per_producer": {str(pid): sorted(e for (q, e) in epochs if q == pid)
                                    for pid in sorted({q for q, _ in epochs})},
            "examples": examples}


def produce(bootstrap: str, topic: str, args) -> dict:
    from confluent_kafka import Producer
    results: collections.Counter = collections.Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": args.message_timeout_ms, "request.timeout.ms": args.request_timeout_ms,
                      "socket.timeout.ms": args.request_timeout_ms, "retry.backoff.ms": 100,
                      "client.id": f"bench-p{i}"})
        per_s = args.rate / args.producers
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            while n < int((time.monotonic() - t0) * per_s):
                sent = time.monotonic()

                def cb(err, _msg, sent=sent):
                    with lock:
                        if err:
                            results[err.name()] += 1
                        else:
                            results["ok"] += 1
                            latencies.append(time.monotonic() - sent)
                p.produce(topic, b"p%d-%d" % (i, n), partition=(n * args.producers + i) % args.partitions,
                          on_delivery=cb)
                n += 1
            p.poll(0.005)
        left = p.flush(args.message_timeout_ms / 1000 + 20)
        with lock:
            results["sent"] += n
            results["left_in_flight"] += left

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()

    def q(f: float) -> float | None:
        return round(latencies[int(f * (len(latencies) - 1))] * 1000, 1) if latencies else None
    return {"client": dict(results), "ack_p50_ms": q(0.5), "ack_p99_ms": q(0.99)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=300)
    ap.add_argument("--rate", type=int, default=1000, help="records/s over all producers")
    ap.add_argument("--seconds", type=float, default=24)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--flush-messages", type=int, default=None, help="log.flush.interval.messages (default: off)")
    ap.add_argument("--message-timeout-ms", type=int, default=20000)
    ap.add_argument("--request-timeout-ms", type=int, default=5000)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "idempotence.json"))
    args = ap.parse_args()
    extra = {"log.flush.interval.messages": str(args.flush_messages)} if args.flush_messages else {}
    with tempfile.TemporaryDirectory(prefix="idem-bench-") as tmp, \
            running_cluster(pathlib.Path(tmp), broker_extra=extra) as cl:
        assignment = {i: [(i + k) % 3 + 1 for k in range(3)] for i in range(args.partitions)}
        cl.create_topic("idem", assignment)
        cl.wait_image(lambda im: "idem" in im.topic_ids and all(
            len(im.partition(im.topic_ids["idem"], i).isr) == 3 for i in range(args.partitions)), 120, "ISR of 3")
        print(f"producing {args.rate}/s for {args.seconds:.0f} s over {args.partitions} partitions "
              f"({args.producers} idempotent producers)", flush=True)
        load = produce(cl.bootstrap, "idem", args)
        print(f"acks: {load['client']}, p50 {load['ack_p50_ms']} ms, p99 {load['ack_p99_ms']} ms", flush=True)
        image = cl.image()
        ports = {b.node_id: b.port for b in cl.brokers}
        tid = image.topic_ids["idem"]

        async def read_all():
            return [await read_partition(ports[image.partition(tid, p).leader], "idem", p)
                    for p in range(args.partitions)]
        found = audit(asyncio.run(read_all()))
    print(f"duplicate copies: {found['duplicate_copies']} (values duplicated within one epoch: "
          f"{found['values_duplicated_in_one_epoch']}, across epochs: {found['values_duplicated_across_epochs']})")
    print(f"epochs per producer: {found['epochs_per_producer']}")
    for e in found["examples"]:
        print(f"  e.g. {json.dumps(e)}")
    result = {"args": vars(args) | {"out": None}, "load": load, "audit": found,
              "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
