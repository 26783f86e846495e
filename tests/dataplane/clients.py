"""Real Kafka clients driven by the tests: kafka-python, confluent-kafka (librdkafka 2.16)
and Debian's kcat (librdkafka 2.0.2). Records are (key, value, headers) with bytes."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]
KCAT = shutil.which("kcat")
TIMEOUT_S = 30


def make_records(n: int, tag: str, header: bool = True) -> list[Record]:
    return [(f"{tag}-k{i}".encode(), (f"{tag}-value-{i}|" * (i % 5 + 3)).encode(),
             [("seq", str(i).encode())] if header else []) for i in range(n)]


def produce_confluent(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                      idempotent: bool = True, acks: str = "all", partition: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                  "compression.type": codec, "linger.ms": 20})
    errors: list[Any] = []
    for k, v, h in records:
        p.produce(topic, v, k, partition=partition, headers=h,
                  on_delivery=lambda err, _msg: errors.append(err) if err else None)
        p.poll(0)
    remaining = p.flush(TIMEOUT_S)
    assert remaining == 0 and not errors, f"confluent produce: {remaining} undelivered, errors {errors[:3]}"


def produce_kafka_python(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                         idempotent: bool = True, partition: int = 0) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                      compression_type=None if codec == "none" else codec, linger_ms=20,
                      request_timeout_ms=TIMEOUT_S * 1000)
    try:
        futures = [p.send(topic, value=v, key=k, headers=h, partition=partition) for k, v, h in records]
        p.flush(TIMEOUT_S)
        for f in futures:
            f.get(TIMEOUT_S)
    finally:
        p.close(5)


KCAT_HEADERS = [("src", b"kcat")]


def produce_kcat(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                 idempotent: bool = True, partition: int = 0) -> None:
    """kcat: one header for every message (``-H``), keys via ``-K``; values must be one line."""
    assert KCAT is not None
    lines = b"".join(k + b"\t" + v + b"\n" for k, v, _h in records)
    cmd = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
           "-H", "src=kcat", "-X", "acks=all", "-X", f"enable.idempotence={'true' if idempotent else 'false'}"]
    if codec != "none":
        cmd += ["-z", codec]
    subprocess.run(cmd, input=lines, check=True, timeout=TIMEOUT_S, capture_output=True)


def consume_confluent(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[tuple[Any, ...]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dataplane-test", "enable.auto.commit": False})
    got: list[tuple[Any, ...]] = []
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.key(), m.value(), list(m.headers() or []), m.offset()))
    finally:
        c.close()
    return got


def consume_kafka_python(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[tuple[Any, ...]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    got: list[tuple[Any, ...]] = []
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                got += [(m.key, m.value, list(m.headers), m.offset) for m in msgs]
    finally:
        c.close()
    return got


def consume_kcat(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[tuple[Any, ...]]:
    assert KCAT is not None
    out = subprocess.run([KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning",
                          "-c", str(n), "-e", "-J"], check=True, timeout=TIMEOUT_S, capture_output=True).stdout
    got = []
    for line in out.decode().splitlines():
        m = json.loads(line)
        hs = m.get("headers") or []
        headers = [(hs[i], hs[i + 1].encode()) for i in range(0, len(hs), 2)]
        got.append((m["key"].encode() if m["key"] is not None else None,
                    m["payload"].encode() if m["payload"] is not None else None, headers, m["offset"]))
    return got


PRODUCERS = {"kafka-python": produce_kafka_python, "confluent": produce_confluent, "kcat": produce_kcat}
CONSUMERS = {"kafka-python": consume_kafka_python, "confluent": consume_confluent, "kcat": consume_kcat}
