"""The lab's containers through docker-py (the ``docker`` package, the daemon's HTTP API on
its socket).

``ContainerSpec`` is a value; ``Docker`` runs it and offers start/stop/kill/pause/unpause/
restart/exec/logs/pid/ip/wait/exit code, the states of a lab's containers in one call,
``stats`` (the daemon's cgroup figures) and :class:`ExitWatch` (the daemon's event stream:
container exits as they happen, nothing polled). Every container the lab starts carries the
label ``jbodlab.lab=<lab id>`` so ``jbodlab cleanup`` finds it. A failure is a
``ContainerError`` naming the container.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount

from infra.errors import ContainerError
from infra.naming import LAB_LABEL

MISSING = "missing"


@dataclass(frozen=True, slots=True)
class BindMount:
    source: str
    target: str
    propagation: str = "rslave"
    read_only: bool = False

    def mount(self) -> Mount:
        return Mount(self.target, self.source, type="bind", read_only=self.read_only,
                     propagation=self.propagation)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    image: str
    command: tuple[str, ...] = ("sleep", "infinity")
    lab_id: str = ""
    hostname: str | None = None
    network: str | None = None
    network_aliases: tuple[str, ...] = ()
    mounts: tuple[BindMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    cap_add: tuple[str, ...] = ()
    init: bool = True
    workdir: str | None = None
    cgroup_parent: str | None = None   # the lab's CPU group (infra.cpu_group)
    user: str | None = None            # "uid:gid" the container's processes run as (None: the image's, root)

    def create_kwargs(self) -> dict[str, Any]:
        """The arguments of ``containers.create`` (which never pulls: the image is built here)."""
        labels = dict(self.labels)
        if self.lab_id:
            labels[LAB_LABEL] = self.lab_id
        kwargs: dict[str, Any] = dict(name=self.name, command=list(self.command), labels=labels,
                                      mounts=[m.mount() for m in self.mounts], environment=dict(self.env),
                                      init=self.init, detach=True)
        if self.hostname:
            kwargs["hostname"] = self.hostname
        if self.network:
            kwargs["network"] = self.network
        if self.cap_add:
            kwargs["cap_add"] = list(self.cap_add)
        if self.user:
            kwargs["user"] = self.user
        if self.workdir:
            kwargs["working_dir"] = self.workdir
        if self.cgroup_parent:
            kwargs["cgroup_parent"] = self.cgroup_parent
        return kwargs


@dataclass(frozen=True, slots=True)
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """A container of a lab stopped (the daemon's ``die`` event)."""
    name: str
    exit_code: int | None
    time_ns: int


def _label_filter(lab_id: str | None) -> dict[str, str]:
    return {"label": f"{LAB_LABEL}={lab_id}" if lab_id else LAB_LABEL}


class Docker:
    """The daemon, through one docker-py client (created on first use)."""

    def __init__(self) -> None:
        self._client: docker.DockerClient | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> docker.DockerClient:
        with self._lock:
            if self._client is None:
                try:
                    self._client = docker.from_env(timeout=120)
                except DockerException as exc:
                    raise ContainerError(f"cannot reach dockerd: {exc}") from exc
            return self._client

    def _get(self, name: str, what: str) -> Any:
        try:
            return self.client.containers.get(name)
        except NotFound as exc:
            raise ContainerError(f"{what}: no container {name}") from exc
        except APIError as exc:
            raise ContainerError(f"{what}: {exc}") from exc

    def _do(self, name: str, what: str, fn) -> Any:
        container = self._get(name, what)
        try:
            return fn(container)
        except (APIError, DockerException) as exc:
            raise ContainerError(f"{what}: {exc}") from exc

    def cgroup_driver(self) -> str:
        """``cgroupfs`` or ``systemd`` (``docker info``)."""
        try:
            return str(self.client.info().get("CgroupDriver") or "unknown")
        except (APIError, DockerException) as exc:
            raise ContainerError(f"docker info: {exc}") from exc

    # ---- one container -------------------------------------------------------------
    def run(self, spec: ContainerSpec) -> str:
        """Start a container from ``spec`` (removing a stale one of the same name); return its id."""
        self.remove(spec.name)
        kwargs = spec.create_kwargs()
        if spec.network and spec.network_aliases:
            kwargs["networking_config"] = {spec.network: self.client.api.create_endpoint_config(
                aliases=list(spec.network_aliases))}
        try:
            container = self.client.containers.create(spec.image, **kwargs)
            container.start()
        except ImageNotFound as exc:
            raise ContainerError(f"start container {spec.name}: image {spec.image} is not built") from exc
        except (APIError, DockerException) as exc:
            raise ContainerError(f"start container {spec.name}: {exc}") from exc
        return container.id

    def start(self, name: str) -> None:
        self._do(name, f"start {name}", lambda c: c.start())

    def stop(self, name: str, timeout_s: int = 10) -> None:
        self._do(name, f"stop {name}", lambda c: c.stop(timeout=timeout_s))

    def kill(self, name: str, signal: str = "KILL") -> None:
        self._do(name, f"kill -{signal} {name}", lambda c: c.kill(signal=signal))

    def pause(self, name: str) -> None:
        self._do(name, f"pause {name}", lambda c: c.pause())

    def unpause(self, name: str) -> None:
        self._do(name, f"unpause {name}", lambda c: c.unpause())

    def restart(self, name: str, timeout_s: int = 10) -> None:
        self._do(name, f"restart {name}", lambda c: c.restart(timeout=timeout_s))

    def remove(self, name: str) -> None:
        """Remove the container and its anonymous volumes, running or not; gone already is fine."""
        try:
            self.client.containers.get(name).remove(force=True, v=True)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409 or "already in progress" not in str(exc):
                raise ContainerError(f"remove {name}: {exc}") from exc

    def exec(self, name: str, argv: list[str], *, timeout_s: float = 120.0, detach: bool = False,
             env: dict[str, str] | None = None) -> ExecResult:
        container = self._get(name, f"exec in {name}")
        if detach:
            self._do(name, f"exec in {name}", lambda c: c.exec_run(argv, environment=env, detach=True))
            return ExecResult(0, "", "")
        pool = ThreadPoolExecutor(max_workers=1)
        future = pool.submit(container.exec_run, argv, environment=env, demux=True)
        try:
            code, (out, err) = future.result(timeout=timeout_s)
        except FutureTimeout as exc:
            raise ContainerError(f"exec in {name} timed out after {timeout_s:.0f} s: {argv}") from exc
        except (APIError, DockerException) as exc:
            raise ContainerError(f"exec in {name}: {exc}") from exc
        finally:
            pool.shutdown(wait=False)  # a timed-out exec is left to finish in the container
        return ExecResult(int(code), (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"))

    def logs(self, name: str, tail: int | None = None, timestamps: bool = False) -> str:
        """stdout + stderr of the container ("" when it is gone); ``timestamps``: each line
        led by docker's RFC 3339 receive time."""
        try:
            return self.client.containers.get(name).logs(tail=tail or "all",
                                                         timestamps=timestamps).decode(errors="replace")
        except (NotFound, APIError):
            return ""

    def wait(self, name: str, timeout_s: float) -> int:
        """The exit code once the container has stopped; ContainerError after ``timeout_s``."""
        container = self._get(name, f"wait for {name}")
        try:
            return int(container.wait(timeout=timeout_s)["StatusCode"])
        except (APIError, DockerException, OSError) as exc:  # a read timeout is a requests error
            raise ContainerError(f"wait for {name}: {exc}") from exc

    def inspect(self, name: str) -> dict:
        return self._get(name, f"inspect {name}").attrs

    def state(self, name: str) -> str:
        """'running', 'paused', 'exited', 'created', 'dead', … or 'missing'."""
        try:
            return self.client.containers.get(name).status
        except NotFound:
            return MISSING

    def exit_code(self, name: str) -> int | None:
        try:
            return int(self.client.containers.get(name).attrs["State"]["ExitCode"])
        except NotFound:
            return None

    def pid(self, name: str) -> int:
        pid = int(self.inspect(name)["State"]["Pid"])
        if pid <= 0:
            raise ContainerError(f"container {name} is not running (no pid)")
        return pid

    def ip(self, name: str, network: str) -> str:
        nets = self.inspect(name)["NetworkSettings"]["Networks"]
        if network not in nets:
            raise ContainerError(f"container {name} is not on network {network} (on: {', '.join(nets)})")
        return nets[network]["IPAddress"]

    def stats(self, name: str) -> dict:
        """One sample of the daemon's figures of the container (cpu, memory, block and network
        I/O as the cgroup counts them), as ``docker stats`` reads them."""
        return self._do(name, f"stats of {name}", lambda c: c.stats(stream=False, one_shot=True))

    # ---- a lab's containers and networks ---------------------------------------------
    def states(self, lab_id: str) -> dict[str, str]:
        """{container name: state} of every container of a lab, from one list call."""
        return {c.name: c.status for c in self.client.containers.list(all=True, filters=_label_filter(lab_id))}

    def containers(self, lab_id: str | None = None) -> list[str]:
        """Names of lab containers (all labs, or one), running or not."""
        return [c.name for c in self.client.containers.list(all=True, filters=_label_filter(lab_id))]

    def labelled(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(containers, networks) of every lab as (name, lab id). ContainerError when no daemon
        answers: the caller says that these were not checked (a stopped dockerd still holds
        the containers it will show again when it starts)."""
        try:
            every = _label_filter(None)
            containers = [(c.name, c.labels.get(LAB_LABEL, "")) for c in self.client.containers.list(all=True, filters=every)]
            networks = [(n.name, (n.attrs.get("Labels") or {}).get(LAB_LABEL, ""))
                        for n in self.client.networks.list(filters=every)]
        except DockerException as exc:
            raise ContainerError(f"cannot reach dockerd: {exc}") from exc
        return containers, networks

    def create_network(self, name: str, lab_id: str) -> None:
        if self.client.networks.list(names=[name]):
            return
        try:
            self.client.networks.create(name, driver="bridge", labels={LAB_LABEL: lab_id})
        except APIError as exc:
            raise ContainerError(f"create network {name}: {exc}") from exc

    def remove_network(self, name: str) -> None:
        try:
            self.client.networks.get(name).remove()
        except (NotFound, APIError):
            pass

    def networks(self, lab_id: str | None = None) -> list[str]:
        return [n.name for n in self.client.networks.list(filters=_label_filter(lab_id))]

    def watch_exits(self, lab_id: str) -> ExitWatch:
        return ExitWatch(self, lab_id)


class ExitWatch:
    """The daemon's event stream of one lab's containers, filtered to exits (``die``), read by
    a thread into a queue: ``drain()`` returns what happened since the last call. Nothing is
    polled; ``close()`` ends the stream."""

    def __init__(self, docker_: Docker, lab_id: str) -> None:
        self._queue: queue.Queue[ContainerExit] = queue.Queue()
        self._stream = docker_.client.events(decode=True, filters={
            **_label_filter(lab_id), "type": "container", "event": "die"})
        self._thread = threading.Thread(target=self._read, name=f"docker-events-{lab_id}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                attrs = event.get("Actor", {}).get("Attributes", {})
                code = attrs.get("exitCode")
                self._queue.put(ContainerExit(attrs.get("name", ""), int(code) if code is not None else None,
                                              int(event.get("timeNano", 0))))
        except Exception:  # the stream closed (close(), or the daemon went away)
            return

    def drain(self) -> list[ContainerExit]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        self._stream.close()
        self._thread.join(timeout=5)
