"""Talk to a real controller the way brokers do (tests, `jbodlab demo`, the benchmark).

* :class:`ControllerProcess` — write a server.properties, ``kraft-storage format`` it, start
  ``python -m controller_impl FILE`` as a child process, wait for its port, stop it with
  SIGTERM (or kill -9 it).
* :class:`SimBroker` — one "broker": a :class:`KafkaClient` that sends kio-encoded
  BrokerRegistration / BrokerHeartbeat / AssignReplicasToDirs / CreateTopics requests.
* :class:`MetadataReader` — reads the committed records back through Fetch of
  ``__cluster_metadata`` and replays them into its own :class:`MetadataImage`.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka_common import ids, wire
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.image import MetadataImage
from kafka_runtime.client import KafkaClient
from kafka_runtime.snapshot_fetch import fetch_snapshot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


class ProcessHandle:
    """Lifecycle of one real child process (``self.proc``, stderr in ``self.stderr_path``),
    shared by the controller here and the broker processes of the integration tests."""

    proc: subprocess.Popen | None
    stderr_path: str

    def stderr(self) -> str:
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit status (kill -9 after ``timeout_s``)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self) -> None:
        """kill -9 (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit status, or None if still running after ``timeout_s``."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None


@dataclass
class ControllerProcess(ProcessHandle):
    workdir: str
    node_id: int = 1
    port: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    cluster_id: str = ""
    voters: str = ""  # controller.quorum.voters; default: this controller alone
    proc: subprocess.Popen | None = None
    stderr_path: str = ""

    @property
    def config_path(self) -> str:
        return os.path.join(self.workdir, "controller.properties")

    @property
    def metadata_dir(self) -> str:
        return os.path.join(self.workdir, "metadata")

    @property
    def events_path(self) -> str:
        return os.path.join(self.workdir, "controller-events.jsonl")

    def write_config(self) -> None:
        if not self.port:
            self.port = free_port()
        props = {
            "process.roles": "controller", "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters or f"{self.node_id}@127.0.0.1:{self.port}",
            "listeners": f"CONTROLLER://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "metadata.log.dir": self.metadata_dir, "events.file": self.events_path,
            # no idle NoOpRecords unless a test asks: tests count the records they cause
            "metadata.max.idle.interval.ms": "0",
        }
        props.update(self.extra)
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))

    def format(self) -> None:
        self.write_config()
        if not self.cluster_id:
            self.cluster_id = ids.to_base64(ids.random_uuid(random.SystemRandom()))
        out = subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", "format", "-c",
                              self.config_path, "--cluster-id", self.cluster_id],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"kraft-storage format failed: {out.stderr.strip()}")

    def start(self, timeout_s: float = 20.0) -> None:
        self.stderr_path = os.path.join(self.workdir, "controller.stderr")
        err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "controller_impl", self.config_path],
                                     cwd=REPO, stdout=err, stderr=err)
        err.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kraft-controller exited with {self.proc.returncode}: {self.stderr()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    # a lone voter is ready once it leads (asked without SASL: where the
                    # listener demands it, listening is all this can see)
                    if self.voters or self.extra.get("authorizer.enabled") == "true" or self._leads(sock):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"kraft-controller did not listen within {timeout_s}s: {self.stderr()}")


    def _leads(self, sock: socket.socket) -> bool:
        """DescribeQuorum (v0) over a plain socket: leader with a high watermark > 0?"""
        mod = wire.request_module(55, 0)
        req = wire.request_class(55, 0)(topics=(mod.TopicData(
            topic_name=ids.METADATA_TOPIC, partitions=(mod.PartitionData(partition_index=0),)),))
        payload = wire.encode_request(req, 1, "sim")
        sock.settimeout(2.0)
        sock.sendall(len(payload).to_bytes(4, "big") + payload)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                return False
            buf += chunk
        _, resp = wire.decode_response(buf[4:4 + int.from_bytes(buf[:4], "big")], 55, 0)
        part = resp.topics[0].partitions[0]
        return part.error_code == wire.ErrorCode.none and part.high_watermark > 0


class SimBroker:
    """One broker's controller channel, built on the real client."""

    def __init__(self, broker_id: int, dirs: list[uuid.UUID], *, cluster_id: str,
                 port: int = 9092, incarnation: uuid.UUID | None = None) -> None:
        self.broker_id = broker_id
        self.dirs = dirs
        self.cluster_id = cluster_id
        self.port = port
        self.incarnation = incarnation or ids.random_uuid(random.SystemRandom())
        self.epoch = -1
        self.offline: list[uuid.UUID] = []
        self.client: KafkaClient | None = None

    async def connect(self, host: str, port: int, sasl: tuple[str, str] | None = None) -> None:
        self.client = await KafkaClient.connect(host, port, client_id=f"broker-{self.broker_id}", sasl=sasl)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def registration_request(self, version: int = 3) -> Any:
        mod = wire.request_module(62, version)
        return wire.make(wire.request_class(62, version), broker_id=self.broker_id,
                         cluster_id=self.cluster_id, incarnation_id=self.incarnation,
                         listeners=(mod.Listener(name="PLAINTEXT", host="127.0.0.1", port=self.port,
                                                 security_protocol=0),),
                         features=(mod.Feature(name="metadata.version", min_supported_version=1,
                                               max_supported_version=25),),
                         rack=None, is_migrating_zk_broker=False, log_dirs=tuple(self.dirs),
                         previous_broker_epoch=-1)

    async def register(self) -> Any:
        assert self.client is not None
        resp = await self.client.request(self.registration_request())
        if resp.error_code == wire.ErrorCode.none:
            self.epoch = resp.broker_epoch
        return resp

    def heartbeat_request(self, metadata_offset: int, *, want_fence: bool = False) -> Any:
        return wire.request_class(63, 1)(broker_id=self.broker_id, broker_epoch=self.epoch,
                                         current_metadata_offset=metadata_offset,
                                         want_fence=want_fence, want_shut_down=False,
                                         offline_log_dirs=tuple(self.offline))

    async def heartbeat(self, metadata_offset: int, *, want_fence: bool = False) -> Any:
        assert self.client is not None
        return await self.client.request(self.heartbeat_request(metadata_offset, want_fence=want_fence))

    async def assign(self, assignments: dict[uuid.UUID, list[tuple[uuid.UUID, int]]]) -> Any:
        """AssignReplicasToDirs: {dir_id: [(topic_id, partition), …]}."""
        assert self.client is not None
        mod = wire.request_module(73, 0)
        directories = []
        for dir_id, parts in assignments.items():
            by_topic: dict[uuid.UUID, list[int]] = {}
            for topic_id, pid in parts:
                by_topic.setdefault(topic_id, []).append(pid)
            directories.append(mod.DirectoryData(id_=dir_id, topics=tuple(
                mod.TopicData(topic_id=t, partitions=tuple(mod.PartitionData(partition_index=p) for p in ps))
                for t, ps in by_topic.items())))
        return await self.client.request(wire.request_class(73, 0)(
            broker_id=self.broker_id, broker_epoch=self.epoch, directories=tuple(directories)))


async def create_topic(client: KafkaClient, name: str, partitions: int, replication_factor: int,
                       *, assignments: dict[int, list[int]] | None = None, version: int = 7) -> Any:
    mod = wire.request_module(19, version)
    topic = mod.CreatableTopic(
        name=name, num_partitions=-1 if assignments else partitions,
        replication_factor=-1 if assignments else replication_factor,
        assignments=tuple(mod.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(b))
                          for p, b in sorted((assignments or {}).items())),
        configs=())
    return await client.request(wire.make(wire.request_class(19, version), topics=(topic,),
                                          timeout=ms(30000), validate_only=False))


class MetadataReader:
    """Fetches ``__cluster_metadata`` from the controller and replays it."""

    def __init__(self, client: KafkaClient, *, version: int | None = None) -> None:
        self.client = client
        self.version = version if version is not None else client.pick_version(1, 12, 16)
        self.image = MetadataImage()
        self.records: list[tuple[int, Any]] = []
        self.next_offset = 0
        self.high_watermark = 0
        self.snapshot_end = 0  # > 0: records below it came as a snapshot (not in .records)

    def fetch_request(self, max_wait_ms: int, max_bytes: int = 8 << 20) -> Any:
        v = self.version
        mod = wire.request_module(1, v)
        part = wire.make(mod.FetchPartition, partition=0, current_leader_epoch=-1,
                         fetch_offset=self.next_offset, last_fetched_epoch=-1, log_start_offset=-1,
                         partition_max_bytes=max_bytes)
        topic = wire.make(mod.FetchTopic, topic=ids.METADATA_TOPIC, topic_id=ids.METADATA_TOPIC_ID,
                          partitions=(part,))
        return wire.make(wire.request_class(1, v), replica_id=-1, max_wait=ms(max_wait_ms), min_bytes=1,
                         max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=(topic,), forgotten_topics_data=(), rack_id="")

    async def fetch_once(self, max_wait_ms: int = 0) -> int:
        """One Fetch; replays what came back; returns how many records."""
        resp = await self.client.request(self.fetch_request(max_wait_ms))
        if resp.error_code != wire.ErrorCode.none:
            raise RuntimeError(f"Fetch failed: {resp.error_code.name}")
        part = resp.responses[0].partitions[0]
        if part.error_code != wire.ErrorCode.none:
            raise RuntimeError(f"Fetch of __cluster_metadata-0 failed: {part.error_code.name}")
        self.high_watermark = part.high_watermark
        count = 0
        snap = getattr(part, "snapshot_id", None)
        if snap is not None and snap.end_offset > self.next_offset:
            # behind the leader's log start: load its snapshot, go on from its end
            blob = await fetch_snapshot(self.client, (snap.end_offset, snap.epoch))
            self.image, end, _ = snapshot_format.decode(blob)
            self.next_offset = end
            self.snapshot_end = end
            return end
        if part.records:
            for header, recs in decode_batches(bytes(part.records)):
                for i, rec in enumerate(recs):
                    offset = header.base_offset + i
                    if offset < self.next_offset:
                        continue
                    self.image.replay(rec, offset)
                    self.records.append((offset, rec))
                    self.next_offset = offset + 1
                    count += 1
        return count

    async def catch_up(self, timeout_s: float = 10.0) -> int:
        """Fetch until next_offset reaches the high watermark seen; returns records read."""
        total = 0
        deadline = time.monotonic() + timeout_s
        while True:
            total += await self.fetch_once(0)
            if self.next_offset >= self.high_watermark:
                return total
            if time.monotonic() > deadline:
                raise TimeoutError(f"metadata fetch stuck at {self.next_offset} < {self.high_watermark}")
