"""Real processes for broker integration tests: a kraft-controller (controller_impl's
ControllerProcess) and kraft-broker children with formatted temp log dirs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from testkit.controller_client import MetadataReader

from testkit.processes import REPO, ControllerProcess, ProcessHandle, free_port
from kafka_common.ids import is_reserved
from kafka_common import meta_properties as mp
from kafka_runtime.client import KafkaClient
from kafka_runtime.events import read_events


@dataclass
class BrokerProcess(ProcessHandle):
    workdir: str
    node_id: int
    controller: ControllerProcess
    n_dirs: int = 3
    extra: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    port: int = 0

    @property
    def config_path(self) -> str:
        return os.path.join(self.workdir, "broker.properties")

    @property
    def dirs(self) -> list[str]:
        return [os.path.join(self.workdir, f"data{i}") for i in range(self.n_dirs)]

    @property
    def events_path(self) -> str:
        return os.path.join(self.workdir, "broker-events.jsonl")

    @property
    def stderr_path(self) -> str:
        return os.path.join(self.workdir, "broker.stderr")

    def write_config(self) -> None:
        if not self.port:
            self.port = free_port()
        props = {
            "process.roles": "broker", "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.controller.node_id}@127.0.0.1:{self.controller.port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": ",".join(self.dirs), "events.file": self.events_path,
            "broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
            "metadata.fetch.max.wait.ms": "200",
        }
        props.update(self.extra)
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))

    def format(self) -> None:
        self.write_config()
        out = subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", "format", "-c", self.config_path,
                              "--cluster-id", self.controller.cluster_id], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"kraft-storage format failed: {out.stderr.strip()}")

    def dir_ids(self) -> dict[str, object]:
        """path → directory.id from meta.properties."""
        out = {}
        for d in self.dirs:
            with open(os.path.join(d, "meta.properties"), encoding="utf-8") as f:
                out[d] = mp.parse(f.read()).directory_id
        return out

    def start(self) -> None:
        err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker_impl", self.config_path], cwd=REPO,
                                     stdout=err, stderr=err)
        err.close()

    def events(self) -> list[dict]:
        return read_events(self.events_path) if os.path.exists(self.events_path) else []


def wait_until(pred, timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


async def reader_for(ctrl) -> tuple[KafkaClient, MetadataReader]:
    client = await KafkaClient.connect("127.0.0.1", ctrl.port, client_id="test")
    return client, MetadataReader(client)


async def until(reader: MetadataReader, pred, timeout_s: float, what: str, brokers=()):
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
