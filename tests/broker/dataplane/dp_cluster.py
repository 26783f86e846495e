"""1 kraft-controller + 3 kraft-brokers × 3 data dirs (+ a separate metadata dir, so a data
dir can fail without halting the broker), real processes on loopback, for the data-plane
and replication tests. Clients reach the brokers' PLAINTEXT listeners."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from broker_cluster import BrokerProcess, reader_for, unfenced, until, wait_until  # noqa: E402
from testkit.processes import ControllerProcess  # noqa: E402

__all__ = ["Cluster", "BrokerProcess", "wait_until", "LoopFs", "loop_skip_reason"]


def _storage_conftest():
    import importlib.util
    spec = importlib.util.spec_from_file_location("jbod_storage_conftest",
                                                  os.path.join(HERE, "..", "storage", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_sc = _storage_conftest()
LoopFs = _sc.LoopFs  # ext4 on a loop device under /tmp/jbodtest-*, EXT4_IOC_SHUTDOWN → EIO
loop_skip_reason = _sc._loop_skip_reason

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.lag.time.max.ms": "3000",
    "min.insync.replicas": "2",
    "log.dir.probe.interval.ms": "200",
    "log.dir.failure.timeout.ms": "60000",
    "default.replication.factor": "3",
}


class DpBroker(BrokerProcess):
    dir_override: dict[int, str] | None = None  # dir index → path (a mounted loop fs)

    @property
    def dirs(self) -> list[str]:
        paths = [os.path.join(self.workdir, f"data{i}") for i in range(self.n_dirs)]
        for i, path in (self.dir_override or {}).items():
            paths[i] = path
        return paths

    @property
    def metadata_dir(self) -> str:
        return os.path.join(self.workdir, "meta")

    advertise_host: str | None = None  # advertise another name than the bound address

    def write_config(self) -> None:
        self.extra.setdefault("metadata.log.dir", self.metadata_dir)
        if self.advertise_host is not None:
            if not self.port:
                from testkit.processes import free_port
                self.port = free_port()
            self.extra["advertised.listeners"] = f"PLAINTEXT://{self.advertise_host}:{self.port}"
        super().write_config()


class Cluster:
    def __init__(self, tmp_path, n_brokers: int = 3, broker_extra: dict | None = None,
                 session_timeout_ms: int = 3000, advertise_host: str | None = None, sasl: bool = False) -> None:
        # sasl: every listener SASL_PLAINTEXT with the authorizer on; brokers log in as
        # ``broker`` (a super user), tests and clients as ``admin``
        self.admin_sasl = ("admin", "ad-pw") if sasl else None
        security = {"authorizer.enabled": "true", "sasl.plain.users": "broker:b-pw,admin:ad-pw,alice:a-pw",
                    "super.users": "User:broker;User:admin",
                    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"} if sasl else {}
        self.ctrl = ControllerProcess(str(tmp_path / "controller"),
                                      extra={"broker.session.timeout.ms": str(session_timeout_ms),
                                             "default.replication.factor": "3", **security})
        broker_extra = {"broker.session.timeout.ms": str(session_timeout_ms), **security,
                        **({"sasl.plain.username": "broker", "sasl.plain.password": "b-pw"} if sasl else {}),
                        **(broker_extra or {})}
        self.brokers = [DpBroker(str(tmp_path / f"broker{i}"), i + 1, self.ctrl, extra={**FAST, **(broker_extra or {})})
                        for i in range(n_brokers)]
        for b in self.brokers:
            b.advertise_host = advertise_host

    async def _reader(self):
        """A metadata reader on the controller (SASL PLAIN as ``admin`` when the cluster uses it)."""
        from testkit.controller_client import MetadataReader
        from kafka_runtime.client import KafkaClient
        client = await KafkaClient.connect("127.0.0.1", self.ctrl.port, client_id="test", sasl=self.admin_sasl)
        return client, MetadataReader(client)

    def prepare(self) -> None:
        """Format everything (a test may mount a file system on a data dir before start)."""
        self.ctrl.format()
        for b in self.brokers:
            os.makedirs(b.workdir, exist_ok=True)
            b.write_config()

    def start(self) -> None:
        self.ctrl.start()
        for b in self.brokers:
            b.format()
            b.start()
        self.wait_ready()

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
            wait_until(lambda b=b: any(e["event"] == "listener_started" for e in b.events()), 20,
                       f"broker {b.node_id} listener")

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
        from testkit.controller_client import create_topic

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
        from tests.dataplane.protocol import RawConnection, make_batch, produce_request

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
