"""A small typed container API over the docker CLI (no docker-py dependency).

``ContainerSpec`` is a value; ``Docker`` runs it and offers start/stop/kill/pause/unpause/
restart/exec/logs/pid/ip. Every container the lab starts carries the label
``jbodlab.lab=<lab id>`` so ``jbodlab cleanup`` finds it.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from infra import _cmd
from infra.errors import CommandError, ContainerError
from infra.naming import LAB_LABEL


@dataclass(frozen=True, slots=True)
class BindMount:
    source: str
    target: str
    propagation: str = "rslave"
    read_only: bool = False

    def arg(self) -> str:
        text = f"type=bind,source={self.source},target={self.target},bind-propagation={self.propagation}"
        return text + (",readonly" if self.read_only else "")


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
    extra_args: tuple[str, ...] = field(default=())

    def run_args(self) -> list[str]:
        argv = ["docker", "run", "-d", "--pull", "never", "--name", self.name]
        if self.lab_id:
            argv += ["--label", f"{LAB_LABEL}={self.lab_id}"]
        for k, v in self.labels:
            argv += ["--label", f"{k}={v}"]
        if self.hostname:
            argv += ["--hostname", self.hostname]
        if self.network:
            argv += ["--network", self.network]
            for alias in self.network_aliases:
                argv += ["--network-alias", alias]
        for m in self.mounts:
            argv += ["--mount", m.arg()]
        for k, v in self.env:
            argv += ["-e", f"{k}={v}"]
        for cap in self.cap_add:
            argv += ["--cap-add", cap]
        if self.init:
            argv.append("--init")
        if self.workdir:
            argv += ["-w", self.workdir]
        return [*argv, *self.extra_args, self.image, *self.command]


@dataclass(frozen=True, slots=True)
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


class Docker:
    """Thin wrapper over the docker CLI; every failure is a ContainerError naming the container."""

    def _run(self, argv: list[str], what: str, timeout_s: float = 120.0) -> str:
        try:
            return _cmd.run(argv, timeout_s=timeout_s).stdout
        except CommandError as exc:
            raise ContainerError(f"{what}: {exc}") from exc

    def run(self, spec: ContainerSpec) -> str:
        """Start a container from ``spec`` (removing a stale one of the same name); return its id."""
        _cmd.run(["docker", "rm", "-f", spec.name], check=False)
        return self._run(spec.run_args(), f"start container {spec.name}").strip()

    def start(self, name: str) -> None:
        self._run(["docker", "start", name], f"start {name}")

    def stop(self, name: str, timeout_s: int = 10) -> None:
        self._run(["docker", "stop", "-t", str(timeout_s), name], f"stop {name}", timeout_s + 60)

    def kill(self, name: str, signal: str = "KILL") -> None:
        self._run(["docker", "kill", "--signal", signal, name], f"kill -{signal} {name}")

    def pause(self, name: str) -> None:
        self._run(["docker", "pause", name], f"pause {name}")

    def unpause(self, name: str) -> None:
        self._run(["docker", "unpause", name], f"unpause {name}")

    def restart(self, name: str, timeout_s: int = 10) -> None:
        self._run(["docker", "restart", "-t", str(timeout_s), name], f"restart {name}", timeout_s + 60)

    def remove(self, name: str) -> None:
        _cmd.run(["docker", "rm", "-f", "-v", name], check=False, timeout_s=120)

    def exec(self, name: str, argv: list[str], *, timeout_s: float = 120.0, detach: bool = False,
             env: dict[str, str] | None = None) -> ExecResult:
        cmd = ["docker", "exec"] + (["-d"] if detach else [])
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        try:
            proc = subprocess.run([*cmd, name, *argv], capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ContainerError(f"exec in {name} timed out after {timeout_s:.0f} s: {argv}") from exc
        return ExecResult(proc.returncode, proc.stdout, proc.stderr)

    def logs(self, name: str, tail: int | None = None) -> str:
        argv = ["docker", "logs"] + (["--tail", str(tail)] if tail else []) + [name]
        proc = _cmd.run(argv, check=False, timeout_s=60)
        return proc.stdout + proc.stderr

    def inspect(self, name: str) -> dict:
        return json.loads(self._run(["docker", "inspect", name], f"inspect {name}"))[0]

    def state(self, name: str) -> str:
        """'running', 'paused', 'exited', … or 'missing'."""
        proc = _cmd.run(["docker", "inspect", "-f", "{{.State.Status}}", name], check=False)
        return proc.stdout.strip() if proc.returncode == 0 else "missing"

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

    def create_network(self, name: str, lab_id: str) -> None:
        if _cmd.ok(["docker", "network", "inspect", name]):
            return
        self._run(["docker", "network", "create", "--driver", "bridge", "--label", f"{LAB_LABEL}={lab_id}", name],
                  f"create network {name}")

    def remove_network(self, name: str) -> None:
        _cmd.run(["docker", "network", "rm", name], check=False)

    def containers(self, lab_id: str | None = None) -> list[str]:
        """Names of lab containers (all labs, or one), running or not."""
        label = f"{LAB_LABEL}={lab_id}" if lab_id else LAB_LABEL
        proc = _cmd.run(["docker", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"], check=False)
        return [n for n in proc.stdout.split() if n]

    def networks(self, lab_id: str | None = None) -> list[str]:
        label = f"{LAB_LABEL}={lab_id}" if lab_id else LAB_LABEL
        proc = _cmd.run(["docker", "network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"], check=False)
        return [n for n in proc.stdout.split() if n]

    def label_of(self, name: str, label: str = LAB_LABEL) -> str | None:
        proc = _cmd.run(["docker", "inspect", "-f", f'{{{{index .Config.Labels "{label}"}}}}', name], check=False)
        return proc.stdout.strip() or None
