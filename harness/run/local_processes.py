"""Real kraft processes on loopback, no containers (``jbodlab demo``; the tests' and benchmarks'
clusters through :mod:`testkit.processes`).

* :class:`ProcessHandle` — lifecycle of one child (stop with SIGTERM, kill -9, exit status,
  the tail of its stderr), shared by the controller here and the brokers of the tests.
* :class:`ControllerProcess` — write a server.properties, ``kraft-storage format`` it, start
  ``python -m controller_impl FILE``, wait until it listens (a lone voter: until it leads).
* :func:`free_port` — a listener port for a child, outside the kernel's ephemeral range.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from controller_impl.runtime import raft_wire
from kafka_common import ids, wire
from kafka_common.wire import ApiKey
from kafka_runtime.events import read_events

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections (``bind(0)`` too)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_handed_out: set[int] = set()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, for a child to listen on later.

    Chosen below the kernel's ephemeral range: a port the kernel picked for ``bind(0)`` is
    also one it may hand to any process's outgoing connection before the child binds it (a
    broker once halted on ``address already in use`` that way). Checked with ``SO_REUSEADDR`` as asyncio's server binds, and never
    handed out twice by this process."""
    top = min(ephemeral_low(), 65536) - 1
    bottom = 10000 if top > 20000 else 1024
    for _ in range(200):
        port = random.randint(bottom, top)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {bottom}-{top} on 127.0.0.1 after 200 tries")


class ProcessHandle:
    """Lifecycle of one real child process (``self.proc``, stderr in ``self.stderr_path``),
    shared by the controller here and the broker processes of the integration tests."""

    proc: subprocess.Popen | None
    stderr_path: str
    events_path: str   # the node's event log (a property of each kind)

    def events(self) -> list[dict]:
        return read_events(self.events_path) if os.path.exists(self.events_path) else []

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


def write_properties(workdir: str, path: str, props: dict[str, str]) -> None:
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))


def format_storage(config_path: str, cluster_id: str) -> None:
    """``kraft-storage format`` of every dir the config names."""
    out = subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", "format", "-c", config_path,
                          "--cluster-id", cluster_id], cwd=REPO, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"kraft-storage format failed: {out.stderr.strip()}")


def spawn(argv: list[str], stderr_path: str) -> subprocess.Popen:
    err = open(stderr_path, "ab")
    try:
        return subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=err, stderr=err)
    finally:
        err.close()


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
        write_properties(self.workdir, self.config_path, {**props, **self.extra})

    def format(self) -> None:
        self.write_config()
        if not self.cluster_id:
            self.cluster_id = ids.to_base64(ids.random_uuid(random.SystemRandom()))
        format_storage(self.config_path, self.cluster_id)

    def start(self, timeout_s: float = 20.0) -> None:
        self.stderr_path = os.path.join(self.workdir, "controller.stderr")
        self.proc = spawn(["-m", "controller_impl", self.config_path], self.stderr_path)
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
        """DescribeQuorum (v0) over a plain socket: the leader, having committed all it holds
        (its high watermark > 0 and at its own log end)? A restarted lone voter leads at once,
        with the high watermark it starts with (its snapshot's end) until its epoch's first
        record is flushed: a reader in that window would see the snapshot without the tail."""
        payload = wire.encode_request(raft_wire.describe_request(0), 1, "testkit")
        sock.settimeout(2.0)
        sock.sendall(len(payload).to_bytes(4, "big") + payload)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                return False
            buf += chunk
        _, resp = wire.decode_response(buf[4:4 + int.from_bytes(buf[:4], "big")], ApiKey.DESCRIBE_QUORUM, 0)
        part = resp.topics[0].partitions[0]
        if part.error_code != wire.ErrorCode.none or part.high_watermark <= 0:
            return False
        ends = [v.log_end_offset for v in part.current_voters if v.replica_id == part.leader_id]
        return bool(ends) and part.high_watermark >= ends[0]
