"""The workload: a REAL Kafka client on the host against the lab's brokers, with an ack ledger.

:class:`ProducerWorkload` runs ``workload.producers`` threads, each producing unique values
(``value_id`` = ``<tag>-p<i>-<seq>``, the value is ``value_id|`` padded to ``value_bytes``)
with ``acks=all`` and ``enable.idempotence`` at ``rate_per_s`` (shared), round-robin over the
partitions of the topics that exist. Every value is written to the ledger as an ``invoke``
before it is handed to the client, then completed once: ``ok`` (with the acked offset),
``info`` (any delivery error: the outcome is unknown, as a timeout is) or ``fail`` (refused
locally before it was sent, e.g. a full queue). Values still in flight when the run ends
have no completion and count as ``info``.

**Ready before the clock.** A producer first connects and takes its producer id: it sends
one value to a partition of each leader broker (librdkafka: from its metadata; kafka-python:
the first three partitions — the catalog's leaders rotate) and waits for their acks
(:data:`WARMUP_TIMEOUT_S` at most), and :meth:`ProducerWorkload.start` returns once every
producer is ready, then starts their clocks together. These values are ordinary ledger ops.
Started cold, the producers' first second (connections, metadata, InitProducerId) queued
~250 values each, sent them at once to 300 partitions (S15), and a lab at ~90 % of its 2
cores never worked that backlog off: p50 0.3–0.8 s from the first second on, and the
``service`` check false before any fault in most runs.

:func:`drain` reads every partition from the beginning by assignment (no consumer group),
writing each record as an ``ok`` consume op and a ``drained`` mark when the partition's
end (high watermark at the start of the drain) is reached.

Clients: ``confluent-kafka`` (librdkafka; preferred) and ``kafka-python``. The drain always
uses confluent-kafka. The random choices (partition order start, padding) are seeded.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable

from harness.checkers.corruption import CORRUPT_VALUE
from harness.results.ledger import LedgerWriter
from harness.scenario.sections import Workload

__all__ = ["SafeLedger", "ProducerWorkload", "drain", "value_of", "value_id_of", "value_intact", "consumed_error",
           "CORRUPT_VALUE", "SUPPORTED_CLIENTS", "ready_line", "WARMUP_TIMEOUT_S"]

SUPPORTED_CLIENTS = ("confluent-kafka", "kafka-python")
WARMUP_TIMEOUT_S = 5.0     # the longest a producer waits for its warm-up values' acks
Say = Callable[[str], None]


class SafeLedger(LedgerWriter):
    """A LedgerWriter that client callback threads may share (one lock around each line)."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self._lock = threading.Lock()

    def write(self, entry, *, flush: bool = True) -> None:
        with self._lock:
            super().write(entry, flush=flush)


def value_of(value_id: str, size: int, rng: random.Random | None = None) -> bytes:
    """The value of ``value_id``: ``<id>|`` and a padding to ``size`` bytes that is a function of
    the id (a hash, repeated), so a consumer can tell whether what it got is what was produced
    (:func:`value_intact`). ``rng`` is not used (kept for callers of the old form)."""
    head = (value_id + "|").encode()
    pad = size - len(head)
    if pad <= 0:
        return head
    unit = hashlib.blake2b(head, digest_size=32).hexdigest().encode()
    return head + (unit * (pad // len(unit) + 1))[:pad]




def value_intact(value: bytes | None) -> bool:
    """True when ``value`` is exactly what :func:`value_of` produced for the id it carries."""
    vid = value_id_of(value)
    return vid is not None and value == value_of(vid, len(value or b""))


def consumed_error(value: bytes | None) -> str | None:
    """The ``error`` of a consume op: None for an intact value, else :data:`CORRUPT_VALUE` with
    what differs (the lab checks that no consumer ever gets one: ``no_corrupt_consumed``)."""
    if value_intact(value):
        return None
    vid = value_id_of(value)
    if vid is None:
        return f"{CORRUPT_VALUE}: no value id ({len(value or b'')} bytes)"
    want = value_of(vid, len(value or b""))
    first = next((i for i, (a, b) in enumerate(zip(value or b"", want)) if a != b), None)
    return f"{CORRUPT_VALUE}: {vid} differs from byte {first}"


def value_id_of(value: bytes | None) -> str | None:
    if not value:
        return None
    head, sep, _ = value.partition(b"|")
    return head.decode(errors="replace") if sep else None


class _Client:
    """One producer connection; ``send`` calls ``done(err_text | None, offset | None)`` later."""

    def send(self, topic: str, partition: int, value: bytes, done) -> None: ...
    def service(self) -> None: ...                  # run the completions that are ready
    def wait(self, timeout_s: float) -> None: ...   # idle up to timeout_s, running completions as they come
    def flush(self, timeout_s: float) -> int: ...   # values still unacked when it returns
    def close(self, timeout_s: float) -> int: ...

    def warm_targets(self, targets: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Partitions whose leaders together are every broker the producer will write to."""
        return targets[:3]


class _Confluent(_Client):
    def __init__(self, bootstrap: str, acks: str, client_id: str) -> None:
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                           "linger.ms": 5, "message.timeout.ms": 20000, "request.timeout.ms": 5000,
                           "socket.timeout.ms": 5000, "retry.backoff.ms": 100, "client.id": client_id,
                           "metadata.max.age.ms": 2000, "topic.metadata.refresh.interval.ms": 1000,
                           "log_level": 0})

    def send(self, topic, partition, value, done) -> None:
        def cb(err, msg) -> None:
            done(None if err is None else f"{err.name()}: {err.str()}", None if err else msg.offset())
        self.p.produce(topic, value, partition=partition, on_delivery=cb)

    def service(self) -> None:
        self.p.poll(0)

    def wait(self, timeout_s: float) -> None:
        # librdkafka hands delivery reports over only inside poll(): a poll that blocks returns
        # as soon as one is ready, so its completion is stamped when it arrives (a sleep between
        # polls(0) would stamp it at the next poll: latencies in steps of the sleep)
        self.p.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        return self.p.flush(timeout_s)

    def close(self, timeout_s: float) -> int:
        return self.flush(timeout_s)

    def warm_targets(self, targets: list[tuple[str, int]]) -> list[tuple[str, int]]:
        try:
            md = self.p.list_topics(timeout=WARMUP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no metadata yet: the first partitions then
            return targets[:3]
        by_leader: dict[int, tuple[str, int]] = {}
        for topic, partition in targets:
            t = md.topics.get(topic)
            p = t.partitions.get(partition) if t is not None else None
            if p is not None and p.leader >= 0:
                by_leader.setdefault(p.leader, (topic, partition))
        return list(by_leader.values()) or targets[:3]


class _KafkaPython(_Client):
    def __init__(self, bootstrap: str, acks: str, client_id: str) -> None:
        from kafka import KafkaProducer
        self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all" if acks == "all" else int(acks),
                               enable_idempotence=acks == "all", linger_ms=5, request_timeout_ms=5000,
                               delivery_timeout_ms=20000, retry_backoff_ms=100, client_id=client_id,
                               metadata_max_age_ms=2000)

    def send(self, topic, partition, value, done) -> None:
        fut = self.p.send(topic, value=value, partition=partition)
        fut.add_callback(lambda md: done(None, md.offset))
        fut.add_errback(lambda exc: done(f"{type(exc).__name__}: {exc}", None))

    def service(self) -> None:
        pass

    def wait(self, timeout_s: float) -> None:
        time.sleep(timeout_s)   # kafka-python completes its futures on its own I/O thread

    def flush(self, timeout_s: float) -> int:
        try:
            self.p.flush(timeout_s)
            return 0
        except Exception:  # noqa: BLE001 - kafka-python says only that it timed out
            return 1

    def close(self, timeout_s: float) -> int:
        self.flush(timeout_s)   # a timeout leaves the outstanding values info
        self.p.close(1)
        return 0


def make_client(name: str, bootstrap: str, acks: str, client_id: str) -> _Client:
    if name == "confluent-kafka":
        return _Confluent(bootstrap, acks, client_id)
    if name == "kafka-python":
        return _KafkaPython(bootstrap, acks, client_id)
    raise ValueError(f"workload.client: {name!r} is not supported by the runner (use one of "
                     f"{', '.join(SUPPORTED_CLIENTS)})")


class ProducerWorkload:
    def __init__(self, spec: Workload, bootstrap: Callable[[], str], ledger: LedgerWriter, *, tag: str,
                 seed: int, client: str | None = None, say: Say = lambda _m: None) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self.ledger = ledger
        self.tag = tag
        self.client = client or spec.client
        if self.client not in SUPPORTED_CLIENTS:
            raise ValueError(f"workload.client: {self.client!r} is not supported by the runner (use one of "
                             f"{', '.join(SUPPORTED_CLIENTS)})")
        self.rng = random.Random(seed)
        self.say = say
        self.targets: list[tuple[str, int]] = []
        self._targets_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.counts = {"invoke": 0, "ok": 0, "fail": 0, "info": 0}
        self._count_lock = threading.Lock()
        self.errors: list[str] = []
        self.ready: dict[str, tuple[float, int, int]] = {}   # process → (warm-up s, values, unacked)
        self._ready_count = threading.Semaphore(0)
        self._go = threading.Event()

    def add_topic(self, name: str, partitions: int) -> None:
        with self._targets_lock:
            self.targets += [(name, p) for p in range(partitions)]

    def start(self, ready_timeout_s: float = WARMUP_TIMEOUT_S + 10) -> dict[str, tuple[float, int, int]]:
        """Start the producers, wait (at most ``ready_timeout_s``) until each is connected and
        has its warm-up values acked, then start their clocks together. Returns
        :attr:`ready`: per producer, its warm-up seconds, values sent and values unacked
        (a producer not ready in time is missing; it starts with the others anyway)."""
        per_thread = self.spec.rate_per_s / self.spec.producers
        for i in range(self.spec.producers):
            t = threading.Thread(target=self._run, args=(i, per_thread, random.Random(self.rng.random())),
                                 name=f"producer-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        deadline = time.monotonic() + ready_timeout_s
        for _ in self._threads:
            if not self._ready_count.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        self._go.set()
        return dict(self.ready)

    def stop(self, flush_timeout_s: float = 25.0) -> None:
        self._stop.set()
        self._flush_timeout_s = flush_timeout_s
        deadline = time.monotonic() + flush_timeout_s + (10 if flush_timeout_s > 5 else 1)
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))

    def _count(self, key: str) -> None:
        with self._count_lock:
            self.counts[key] += 1

    def _run(self, index: int, rate: float, rng: random.Random) -> None:
        process = f"p{index}"
        try:
            client = make_client(self.client, self.bootstrap(), self.spec.acks, f"jbodlab-{process}")
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{process}: cannot create the {self.client} producer: {exc}")
            self._ready_count.release()
            return
        seq = self._warm_up(client, process, rng)
        while not self._go.wait(0.01) and not self._stop.is_set():
            client.service()
        start = time.monotonic() - seq / rate
        offset = rng.randrange(1 << 16)
        while not self._stop.is_set():
            due = start + seq / rate
            now = time.monotonic()
            if due > now:
                client.wait(min(due - now, 0.01))
                continue
            with self._targets_lock:
                targets = list(self.targets)
            if not targets:
                client.service()
                time.sleep(0.05)
                start = time.monotonic() - seq / rate
                continue
            topic, partition = targets[(seq + offset) % len(targets)]
            vid = f"{self.tag}-{process}-{seq}"
            seq += 1
            self._send(client, process, topic, partition, vid, rng)
            client.service()
        remaining = client.close(getattr(self, "_flush_timeout_s", 20.0))
        if remaining:
            self.say(f"{process}: {remaining} values still in flight at the end (outcome unknown)")

    def _warm_up(self, client: _Client, process: str, rng: random.Random) -> int:
        """One value to a partition of each leader broker, acked (or :data:`WARMUP_TIMEOUT_S`
        passed); returns the values sent (the producer's next sequence number)."""
        t0 = time.monotonic()
        with self._targets_lock:
            targets = list(self.targets)
        seq = 0
        unacked = 0
        try:
            for topic, partition in client.warm_targets(targets) if targets else []:
                self._send(client, process, topic, partition, f"{self.tag}-{process}-{seq}", rng)
                seq += 1
            if seq:
                unacked = client.flush(WARMUP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the run goes on; its ops say what happened
            self.errors.append(f"{process}: warm-up: {type(exc).__name__}: {exc}")
        self.ready[process] = (time.monotonic() - t0, seq, unacked)
        self._ready_count.release()
        return seq

    def _send(self, client: _Client, process: str, topic: str, partition: int, vid: str, rng) -> None:
        value = value_of(vid, self.spec.value_bytes, rng)
        ledger = self.ledger
        ledger.op(time.time_ns(), "invoke", "produce", process, topic=topic, partition=partition, value_id=vid)
        self._count("invoke")

        def done(err: str | None, off: int | None) -> None:
            if err is None:
                ledger.op(time.time_ns(), "ok", "produce", process, topic=topic, partition=partition,
                          value_id=vid, offset=off)
                self._count("ok")
            else:
                ledger.op(time.time_ns(), "info", "produce", process, topic=topic, partition=partition,
                          value_id=vid, error=err[:200])
                self._count("info")
        try:
            client.send(topic, partition, value, done)
        except BufferError as exc:  # refused locally: never sent
            ledger.op(time.time_ns(), "fail", "produce", process, topic=topic, partition=partition, value_id=vid,
                      error=f"local queue full: {exc}")
            self._count("fail")
        except Exception as exc:  # noqa: BLE001 - unknown whether anything left the client
            ledger.op(time.time_ns(), "info", "produce", process, topic=topic, partition=partition, value_id=vid,
                      error=f"{type(exc).__name__}: {exc}"[:200])
            self._count("info")


def ready_line(ready: dict[str, tuple[float, int, int]], producers: int) -> str:
    """How the producers' warm-up went (``ProducerWorkload.start``), in one line."""
    if not ready:
        return f"{producers} producers started (none ready within the warm-up time)"
    secs = [r[0] for r in ready.values()]
    sent = sum(r[1] for r in ready.values())
    unacked = sum(r[2] for r in ready.values())
    line = (f"{len(ready)} of {producers} producers ready in {min(secs):.2f}–{max(secs):.2f} s "
            f"({sent} warm-up values, one to each leader broker per producer, {sent - unacked} acked); clocks start now")
    return line if len(ready) == producers and not unacked else line + " — a producer started cold: " \
        "expect a slow first second"


def drain(bootstrap: str, partitions: dict[str, int], ledger: LedgerWriter, *, timeout_ms: int,
          say: Say = lambda _m: None) -> dict[tuple[str, int], int | None]:
    """Read every partition from the beginning to its end; returns {(topic, p): end or None
    when it could not be read to the end in time}."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    deadline = time.monotonic() + timeout_ms / 1000
    # check.crcs off (librdkafka's default): a corrupt batch a broker served must reach the
    # value check, not be dropped by the client
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"jbodlab-drain-{time.time_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": False, "log_level": 0, "check.crcs": False,
                  "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
    ends: dict[tuple[str, int], int | None] = {(t, p): None for t, n in partitions.items() for p in range(n)}
    position: dict[tuple[str, int], int] = {}
    try:
        for key in ends:
            while time.monotonic() < deadline:
                try:
                    _lo, hi = c.get_watermark_offsets(TopicPartition(key[0], key[1]), timeout=3.0)
                    ends[key] = hi
                    break
                except KafkaException as exc:
                    say(f"drain: end of {key[0]}-{key[1]} not readable yet: {exc}")
                    time.sleep(0.5)
        readable = [k for k, v in ends.items() if v is not None]
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in readable])
        pending = {k for k in readable if ends[k] > 0}
        for k in readable:
            if ends[k] == 0:
                ledger.drained(time.time_ns(), k[0], k[1], 0)
        while pending and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is not None:
                    continue
                key = (m.topic(), m.partition())
                ledger.op(time.time_ns(), "ok", "consume", "drain", topic=key[0], partition=key[1],
                          value_id=value_id_of(m.value()), offset=m.offset(), error=consumed_error(m.value()))
                position[key] = m.offset() + 1
                if key in pending and position[key] >= ends[key]:
                    pending.discard(key)
                    ledger.drained(time.time_ns(), key[0], key[1], ends[key])
        for k in pending:
            say(f"drain: {k[0]}-{k[1]} read to {position.get(k, 0)} of {ends[k]} before the drain timeout")
            ends[k] = None
    finally:
        c.close()
    return ends
