"""1 kraft-controller + N kraft-brokers × 3 data dirs (+ a separate metadata dir, so a data
dir can fail without halting the broker), real processes on loopback: the one cluster of the
data-plane, replication, listener and broker integration tests and the broker benchmarks.
Clients reach the brokers' PLAINTEXT (or SASL_PLAINTEXT) listeners. Also the waits those
tests share (:func:`wait_until`, :func:`until` on the metadata log)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time

from kafka_runtime.client import KafkaClient
from kafka_runtime.controller_client import MetadataReader, create_topic
from kafka_runtime.polling import poll_until
from kafka_common.ids import UNASSIGNED, is_reserved
from harness.run.local_processes import ControllerProcess
from testkit.processes import BrokerProcess

__all__ = ["Cluster", "FAST", "BackgroundProducer", "consume_all", "wait_until", "reader_for", "until",
           "unfenced", "check_real_dirs"]


def wait_until(pred, timeout_s: float, what: str, interval_s: float = 0.05):
    """``pred()``'s first truthy value; AssertionError naming ``what`` after ``timeout_s``."""
    value = poll_until(pred, timeout_s, interval_s=interval_s)
    if not value:
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
    return value


def _listening(b: BrokerProcess) -> bool:
    """``b`` has logged ``listener_started``; a broker that died waiting fails with its stderr."""
    if any(e["event"] == "listener_started" for e in b.events()):
        return True
    assert b.alive(), f"broker {b.node_id} died before listening: {b.stderr()}"
    return False


async def reader_for(ctrl: ControllerProcess, sasl: tuple[str, str] | None = None
                     ) -> tuple[KafkaClient, MetadataReader]:
    client = await KafkaClient.connect("127.0.0.1", ctrl.port, client_id="test", sasl=sasl)
    return client, MetadataReader(client)


async def until(reader: MetadataReader, pred, timeout_s: float, what: str, brokers=()):
    """Read the metadata log until ``pred(image)``; a broker of ``brokers`` that died fails it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        await reader.catch_up()
        if pred(reader.image):
            return
        for b in brokers:
            assert b.alive(), f"broker {b.node_id} died: {b.stderr()}"
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await reader.fetch_once(200)


def unfenced(image, ids_) -> bool:
    return all(b in image.brokers and not image.brokers[b].fenced for b in ids_)


def wait_unfenced(ctrl: ControllerProcess, brokers, timeout_s: float = 30) -> None:
    """Block until every broker of ``brokers`` is registered and unfenced in ``ctrl``'s
    committed metadata (a broker that dies meanwhile fails it)."""
    ids_ = tuple(b.node_id for b in brokers)

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, ids_), timeout_s, f"brokers {ids_} unfenced", brokers)
        finally:
            await client.close()

    asyncio.run(run())


def check_real_dirs(image, brokers, topic):
    """Every replica's metadata dir is the directory.id of the dir holding its log on disk."""
    tid = image.topic_ids[topic]
    parts = image.partitions_of(tid)
    assert parts
    by_id = {b.node_id: b for b in brokers}
    for pid, p in parts.items():
        for broker_id, dir_id in zip(p.replicas, p.directories):
            assert not is_reserved(dir_id), f"{topic}-{pid} broker {broker_id}: {dir_id}"
            b = by_id[broker_id]

            def holders():  # logs are created by the broker's storage worker: allow it a moment
                return [path for path in b.dirs if os.path.isdir(os.path.join(path, f"{topic}-{pid}"))]

            wait_until(holders, 10, f"the log of {topic}-{pid} on broker {broker_id}")
            holders = holders()
            assert len(holders) == 1, f"{topic}-{pid} on broker {broker_id}: logs in {holders}"
            assert b.dir_ids()[holders[0]] == dir_id


FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.lag.time.max.ms": "3000",
    "min.insync.replicas": "2",
    "log.dir.probe.interval.ms": "200",
    "log.dir.failure.timeout.ms": "60000",
    "default.replication.factor": "3",
}


async def create_and_settle(client, reader, brokers, topic, assignments):
    """Create ``topic`` with explicit ``assignments`` through the controller and wait until
    every replica has a directory, then check the dirs are the brokers' real ones."""
    resp = await create_topic(client, topic, 0, 0, assignments=assignments)
    assert resp.topics[0].error_code.value == 0, resp
    await until(reader, lambda im: topic in im.topic_ids and all(
        UNASSIGNED not in p.directories for p in im.partitions_of(im.topic_ids[topic]).values()),
        20, f"{topic} replicas assigned", brokers)
    check_real_dirs(reader.image, brokers, topic)


class Cluster:
    def __init__(self, tmp_path, n_brokers: int = 3, broker_extra: dict | None = None,
                 session_timeout_ms: int = 3000, advertise_host: str | None = None, sasl: bool = False, *,
                 controller_extra: dict | None = None, replicated: bool = True) -> None:
        """``replicated`` (the data-plane shape): RF 3 by default, fast replication timings
        (:data:`FAST`), each broker's metadata log in a dir of its own; else plain brokers
        whose metadata log shares the first data dir."""
        # sasl: every listener SASL_PLAINTEXT with the authorizer on; brokers log in as
        # ``broker`` (a super user), tests and clients as ``admin``
        self.admin_sasl = ("admin", "ad-pw") if sasl else None
        security = {"authorizer.enabled": "true", "sasl.plain.users": "broker:b-pw,admin:ad-pw,alice:a-pw",
                    "super.users": "User:broker;User:admin",
                    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"} if sasl else {}
        self.ctrl = ControllerProcess(str(tmp_path / "controller"),
                                      extra={"broker.session.timeout.ms": str(session_timeout_ms),
                                             **({"default.replication.factor": "3"} if replicated else {}),
                                             **security, **(controller_extra or {})})
        broker_extra = {"broker.session.timeout.ms": str(session_timeout_ms), **security,
                        **({"sasl.plain.username": "broker", "sasl.plain.password": "b-pw"} if sasl else {}),
                        **(broker_extra or {})}
        self.brokers = [BrokerProcess(str(tmp_path / f"broker{i + 1}"), i + 1, self.ctrl,
                                      extra={**(FAST if replicated else {}), **(broker_extra or {})},
                                      separate_metadata_dir=replicated, advertise_host=advertise_host)
                        for i in range(n_brokers)]

    async def _reader(self):
        """A metadata reader on the controller (SASL PLAIN as ``admin`` when the cluster uses it)."""
        return await reader_for(self.ctrl, self.admin_sasl)

    def prepare(self) -> None:
        """Format everything (a test may mount a file system on a data dir before start)."""
        self.ctrl.format()
        for b in self.brokers:
            os.makedirs(b.workdir, exist_ok=True)
            b.write_config()

    def start_with_dir(self, path: str, *, broker: int = 0, dir_index: int = 0) -> None:
        """Prepare and start with one data dir of one broker at ``path`` (e.g. a mounted
        loop-device file system a test will fail)."""
        self.brokers[broker].dir_override = {dir_index: path}
        self.prepare()
        self.start()

    def start(self, *, wait: bool = True) -> None:
        """Start the controller, format and start the brokers, wait until every broker is
        unfenced and listens; whatever started is killed again if that fails."""
        try:
            self.ctrl.start()
            for b in self.brokers:
                b.format()
                b.start()
            if wait:
                self.wait_ready()
        except BaseException:
            self.kill()
            raise

    def wait_ready(self, timeout_s: float = 40) -> None:
        ids_ = [b.node_id for b in self.brokers]

        async def run():
            client, reader = await self._reader()
            try:
                await until(reader, lambda im: unfenced(im, ids_), timeout_s, "brokers unfenced", self.brokers)
            finally:
                await client.close()
        asyncio.run(run())
        for b in self.brokers:
            wait_until(lambda b=b: _listening(b), 20, f"broker {b.node_id} listener")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.advertise_host or '127.0.0.1'}:{b.port}" for b in self.brokers)

    def image(self):
        async def run():
            client, reader = await self._reader()
            try:
                await reader.catch_up()
                return reader.image
            finally:
                await client.close()
        return asyncio.run(run())

    def wait_image(self, pred, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while True:
            im = self.image()
            if pred(im):
                return im
            for b in self.brokers:
                if b.proc is not None:
                    assert b.alive(), f"broker {b.node_id} died: {b.stderr()}"
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
            time.sleep(0.2)

    def create_topic(self, name: str, assignments: dict[int, list[int]]) -> None:
        async def run():
            client, _reader = await self._reader()
            try:
                resp = await create_topic(client, name, len(assignments), len(assignments[0]),
                                          assignments=assignments)
                assert resp.topics[0].error_code.value == 0, resp
            finally:
                await client.close()
        asyncio.run(run())

    def produce_raw(self, broker, topic: str, partition: int, values: list[bytes], acks: int = -1,
                    timeout_ms: int = 5000) -> tuple[int, int]:
        """One Produce v9 request straight to ``broker`` → (error code, base offset)."""
        from testkit.protocol import RawConnection, make_batch, produce_request

        async def run():
            c = await RawConnection.open(broker.port)
            try:
                resp = await c.call(produce_request(9, topic, partition, make_batch(values), acks=acks,
                                                    timeout_ms=timeout_ms))
            finally:
                await c.close()
            pr = resp.responses[0].partition_responses[0]
            return int(pr.error_code.value), pr.base_offset
        return asyncio.run(run())

    def kill(self) -> None:
        for b in reversed(self.brokers):
            b.kill()
        self.ctrl.kill()


@contextlib.contextmanager
def running_cluster(tmp_path, *, data_dir: str | None = None, data_dir_broker: int = 0, **kwargs):
    """A formatted, started :class:`Cluster` (keyword arguments as its constructor's), killed
    on exit whatever happens: the body of the module- and function-scoped cluster fixtures.
    ``data_dir``: the first data dir of broker ``data_dir_broker`` (an index) there
    (:meth:`Cluster.start_with_dir`)."""
    c = Cluster(tmp_path, **kwargs)
    try:
        if data_dir is not None:
            c.start_with_dir(data_dir, broker=data_dir_broker)
        else:
            c.prepare()
            c.start()
        yield c
    finally:
        c.kill()


def produce_waiting(producer, topic: str, value: bytes, **kwargs) -> None:
    """confluent-kafka ``producer.produce(...)``, polling while its local queue is full."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.01)


class BackgroundProducer:
    """Keeps producing numbered values; records what was acked (partition, value)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
        self.acked: list[tuple[int, bytes, float]] = []
        self.errors: list = []
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg) -> None:
        if err:
            self.errors.append(err)
        else:
            self.acked.append((msg.partition(), msg.value(), time.monotonic()))

    def _run(self) -> None:
        while not self.stop.is_set():
            for _ in range(20):
                self.p.produce(self.topic, f"value-{self.sent}".encode(), f"k{self.sent}".encode(),
                               partition=self.sent % self.partitions, on_delivery=self._cb)
                self.sent += 1
            self.p.poll(0.02)
        self.p.flush(60)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(90)

    def acked_after(self, t: float, partition: int) -> int:
        return sum(1 for p, _v, at in self.acked if at > t and p == partition)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: set[tuple[int, bytes]],
                timeout_s: float = 40) -> set[tuple[int, bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "validate", "enable.auto.commit": False})
    got: set[tuple[int, bytes]] = set()
    try:
        c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while not expected <= got and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.add((m.partition(), m.value()))
    finally:
        c.close()
    return got
