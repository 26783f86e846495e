"""Process faults on nodes (through docker) and psutil resource samples of a node.

``ProcessFaultHandle(docker, container, kind, signal)`` acts on one container (the scenario's
fault *value* is ``harness.scenario.faults.ProcessFault``), with kinds ``kill`` (send ``signal``,
default KILL), ``pause`` (cgroup freezer via ``docker pause``; heal = unpause) and
``restart``. :class:`TreeSampler` sums cpu times, RSS and I/O counters over each container's
process tree (host view, psutil), for several containers in one round.
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
            self._await_state(lambda st: st == "paused", "paused")
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
            self._await_state(lambda st: st != "paused", "not paused")
        rec.healed_ns = time.time_ns()
        return rec

    def _await_state(self, ok, want: str, timeout_s: float = 10.0) -> None:
        """Docker may report the old state for a moment after a (un)pause call returned on a
        loaded host (seen: 'paused' right after unpause); the fault is in place only once
        docker says so."""
        deadline = time.monotonic() + timeout_s
        state = self.docker.state(self.container)
        while not ok(state):
            if time.monotonic() > deadline:
                raise FaultError(f"{self.kind} {self.container}: docker still reports {state!r} "
                                 f"{timeout_s:.0f} s after the call (wanted {want})")
            time.sleep(0.02)
            state = self.docker.state(self.container)

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


def _tree_sample(container: str, procs: list[psutil.Process]) -> ResourceSample:
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


def descendants(children_of: dict[int, list[int]], root: int) -> list[int]:
    """``root`` and every pid below it in a ``{ppid: [pid, …]}`` map (pure)."""
    out, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        todo.extend(children_of.get(pid, ()))
    return out


SELF = "<this process>"


class TreeSampler:
    """Samples of several containers once a second, cheaply: each container's init process
    is looked up in dockerd once and kept while that process lives (a restarted container's
    new one is looked up again), and one scan of the process table per round finds every
    tree (asking dockerd and scanning the table per container cost 22 ms a round for 6)."""

    def __init__(self, docker: Docker) -> None:
        self.docker = docker
        self._roots: dict[str, psutil.Process] = {}

    def _root(self, container: str) -> psutil.Process:
        p = self._roots.get(container)
        if p is not None and p.is_running():   # is_running also tells a reused pid apart
            return p
        self._roots.pop(container, None)
        try:
            p = psutil.Process(self.docker.pid(container))
        except psutil.Error as exc:
            raise ContainerError(f"cannot sample {container}: {exc}") from exc
        self._roots[container] = p
        return p

    def sample_all(self, containers: list[str], *, include_self: bool = False
                   ) -> dict[str, ResourceSample | ContainerError]:
        """One sample per container, or the ContainerError that says why there is none
        (stopped, removed, dockerd unreachable); with ``include_self`` also this process's
        own tree (client threads, FUSE daemon) under the key :data:`SELF`."""
        roots: dict[str, psutil.Process] = {SELF: psutil.Process()} if include_self else {}
        out: dict[str, ResourceSample | ContainerError] = {}
        for c in containers:
            try:
                roots[c] = self._root(c)
            except ContainerError as exc:
                out[c] = exc
        if not roots:
            return out
        children_of: dict[int, list[int]] = {}
        procs: dict[int, psutil.Process] = {}
        for p in psutil.process_iter(["ppid"]):
            ppid = p.info.get("ppid")
            if ppid is not None:
                children_of.setdefault(ppid, []).append(p.pid)
                procs[p.pid] = p
        for c, root in roots.items():
            tree = [root] + [procs[pid] for pid in descendants(children_of, root.pid)[1:] if pid in procs]
            out[c] = _tree_sample(c, tree)
        return out
