"""Process faults on nodes (through docker) and psutil resource samples of a node.

``ProcessFaultHandle(docker, container, kind, signal)`` acts on one container (the scenario's
fault *value* is ``harness.faults.schedule.ProcessFault``), with kinds ``kill`` (send ``signal``,
default KILL), ``pause`` (cgroup freezer via ``docker pause``; heal = unpause) and
``restart``. ``sample(docker, container)`` sums cpu times, RSS and I/O counters over the
container's process tree (host view, psutil).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import psutil

from infra.docker import Docker
from infra.errors import ContainerError, FaultError

KINDS = ("kill", "pause", "restart")


@dataclass(slots=True)
class ProcessFaultRecord:
    kind: str
    container: str
    params: dict[str, str]
    injected_ns: int | None = None
    healed_ns: int | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ProcessFaultHandle:
    docker: Docker = field(compare=False, repr=False)
    container: str = ""
    kind: str = "kill"
    signal: str = "KILL"
    record: ProcessFaultRecord = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultError(f"process fault kind {self.kind!r} is unknown (choose from {', '.join(KINDS)})")
        object.__setattr__(self, "record", ProcessFaultRecord(
            self.kind, self.container, {"signal": self.signal} if self.kind == "kill" else {}))

    def inject(self) -> ProcessFaultRecord:
        rec = self.record
        if rec.injected_ns is not None and rec.healed_ns is None:
            return rec
        if self.kind == "kill":
            self.docker.kill(self.container, self.signal)
        elif self.kind == "pause":
            self.docker.pause(self.container)
        else:
            self.docker.restart(self.container)
        rec.injected_ns, rec.healed_ns = time.time_ns(), None
        return rec

    def heal(self) -> ProcessFaultRecord:
        """pause → unpause; kill/restart have nothing to undo (restarting is the service's job)."""
        rec = self.record
        if rec.injected_ns is None or rec.healed_ns is not None:
            return rec
        if self.kind == "pause" and self.docker.state(self.container) == "paused":
            self.docker.unpause(self.container)
        rec.healed_ns = time.time_ns()
        return rec

    def describe(self) -> dict[str, object]:
        return {"fault": "process", **self.record.as_dict()}


@dataclass(frozen=True, slots=True)
class ResourceSample:
    container: str
    ts_ns: int
    processes: int
    cpu_user_s: float
    cpu_system_s: float
    rss_bytes: int
    read_bytes: int
    write_bytes: int


def sample(docker: Docker, container: str) -> ResourceSample:
    """One psutil sample of the container's whole process tree."""
    try:
        root = psutil.Process(docker.pid(container))
        procs = [root, *root.children(recursive=True)]
    except (psutil.Error, ContainerError) as exc:
        raise ContainerError(f"cannot sample {container}: {exc}") from exc
    user = system = 0.0
    rss = rd = wr = 0
    for p in procs:
        try:
            with p.oneshot():
                ct = p.cpu_times()
                user += ct.user + ct.children_user
                system += ct.system + ct.children_system
                rss += p.memory_info().rss
                io = p.io_counters()
                rd += io.read_bytes
                wr += io.write_bytes
        except psutil.Error:
            continue  # exited meanwhile
    return ResourceSample(container, time.time_ns(), len(procs), user, system, rss, rd, wr)
