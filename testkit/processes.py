"""Real child processes for tests and benchmarks: :class:`BrokerProcess` — a ``kraft-broker``
child (``python -m broker_impl FILE``) with temp data dirs, beside the product's
:class:`~harness.run.local_processes.ControllerProcess` (the same lifecycle, :class:`ProcessHandle`).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from harness.run.local_processes import ControllerProcess, ProcessHandle, format_storage, spawn, write_properties, free_port
from kafka_common import meta_properties as mp

__all__ = ["BrokerProcess"]


@dataclass
class BrokerProcess(ProcessHandle):
    """A ``kraft-broker`` child with ``n_dirs`` temp data dirs (``dir_override``: some of them
    elsewhere, e.g. a mounted loop-device file system), the metadata log in the first data dir
    or, with ``separate_metadata_dir``, in a dir of its own (so any data dir can fail without
    halting the broker); ``advertise_host``: advertise another name than the bound address."""
    workdir: str
    node_id: int
    controller: ControllerProcess
    n_dirs: int = 3
    extra: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    port: int = 0
    separate_metadata_dir: bool = False
    dir_override: dict[int, str] | None = None
    advertise_host: str | None = None

    @property
    def config_path(self) -> str:
        return os.path.join(self.workdir, "broker.properties")

    @property
    def dirs(self) -> list[str]:
        paths = [os.path.join(self.workdir, f"data{i}") for i in range(self.n_dirs)]
        for i, path in (self.dir_override or {}).items():
            paths[i] = path
        return paths

    @property
    def metadata_dir(self) -> str:
        return os.path.join(self.workdir, "meta") if self.separate_metadata_dir else self.dirs[0]

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
        if self.separate_metadata_dir:
            props["metadata.log.dir"] = self.metadata_dir
        if self.advertise_host is not None:
            props["advertised.listeners"] = f"PLAINTEXT://{self.advertise_host}:{self.port}"
        write_properties(self.workdir, self.config_path, {**props, **self.extra})

    def format(self) -> None:
        self.write_config()
        format_storage(self.config_path, self.controller.cluster_id)

    def dir_ids(self) -> dict[str, object]:
        """path → directory.id from meta.properties."""
        out = {}
        for d in self.dirs:
            with open(os.path.join(d, "meta.properties"), encoding="utf-8") as f:
                out[d] = mp.parse(f.read()).directory_id
        return out

    def start(self) -> None:
        self.proc = spawn(["-m", "broker_impl", self.config_path], self.stderr_path)
