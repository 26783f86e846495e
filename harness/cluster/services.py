"""The cluster's services: controllers and brokers as containers (ducktape's lifecycle, typed).

A :class:`Services` owns the nodes of one run inside an :class:`infra.lab.Lab`:

- configs: one ``server.properties`` per node rendered from the scenario value
  (:func:`harness.cluster.node_configs.render_properties`); listeners on the lab's own docker
  network, the controller reached by its network alias, ``events.file`` in the node's *run
  dir* — a host directory outside every log dir, bind-mounted at ``/jbodlab/run`` so the
  host reads the event log live and keeps it when a disk dies; ``log.dirs`` = the lab's loop-device filesystems.
- ``format_all()``: every node's dirs formatted before the first start (the storage tool's
  function on the disks' host paths); ``format(node)``: ``kraft-storage format`` in a one-off
  container with the node's mounts (a disk replaced mid-run);
- ``start`` / ``stop`` / ``kill`` / ``restart`` of the node's container (its main process
  is ``kraft-controller`` or ``kraft-broker``, so a process fault is a container fault);
- readiness: the controller's port answers; a broker is ready when the active controller's
  metadata shows it registered and unfenced (read through Fetch of ``__cluster_metadata``);
  the active controller is found with DescribeQuorum (:meth:`Services.active_controller`);
- ``collect_logs()``: each container's stdout/stderr into its run dir (always, also on failure).

Every start/stop the harness causes is written to the ledger (``node_started``,
``node_exited`` with ``expected: true``); exits nobody asked for come from the daemon's
event stream (:class:`infra.docker.ExitWatch`) and are recorded by
:meth:`Services.record_unexpected_exits` (``expected: false``) — the liveness check reads
both. ``close()`` ends the stream.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.results.ledger import LedgerWriter
from harness.cluster.controller_reads import read_metadata, read_quorum_logs
from harness.cluster.node_configs import BROKER_PORT, CONTAINER_RUN, CONTROLLER_PORT, META_DIR, START_SH, node_defs, \
    properties_text, render_properties
from harness.scenario.model import Scenario
from kafka_common import ids
from kafka_runtime.event_loop import ENV as EVENT_LOOP_ENV

Say = Callable[[str], None]

__all__ = ["Services", "ServiceError"]


class ServiceError(HarnessError, RuntimeError):
    """A node could not be formatted, started, or did not become ready in time."""


class Services:
    """The nodes of one run, as containers of ``lab``; see the module docstring."""

    def __init__(self, lab: Any, scenario: Scenario, workdir: Path, *, ledger: LedgerWriter | None = None,
                 say: Say = lambda _m: None, cluster_id: str | None = None) -> None:
        self.lab = lab
        self.scenario = scenario
        self.workdir = Path(workdir)
        self.ledger = ledger
        self.say = say
        self.nodes = node_defs(scenario)
        self.cluster_id = cluster_id or ids.to_base64(ids.random_uuid(random.SystemRandom()))
        self.configs: dict[int, dict[str, str]] = {}
        self._expected_down: set[int] = set()   # nodes the harness stopped/killed on purpose
        self._seen_exit: set[int] = set()
        self._started_ns: dict[int, int] = {}  # node -> when the harness last started it
        self._exits = None  # infra.docker.ExitWatch, opened by the first start()

    # ---- paths ----------------------------------------------------------------------
    def run_dir(self, node_id: int) -> Path:
        return self.workdir / "nodes" / self.nodes[node_id].name

    def events_file(self, node_id: int) -> Path:
        return self.run_dir(node_id) / "events.jsonl"

    def event_files(self) -> list[Path]:
        return [self.events_file(n) for n in self.nodes]

    def container(self, node_id: int) -> str:
        return self.lab.container_name(self.nodes[node_id].name)

    def brokers(self) -> list[int]:
        return [n for n, d in self.nodes.items() if d.role == "broker"]

    def controllers(self) -> list[int]:
        return [n for n, d in self.nodes.items() if d.role == "controller"]

    # ---- configs --------------------------------------------------------------------
    def prepare(self) -> None:
        """Write every node's config and entry script into its run dir."""
        for n, node in self.nodes.items():
            d = self.run_dir(n)
            d.mkdir(parents=True, exist_ok=True)
            props = render_properties(node, self.scenario, cluster_id=self.cluster_id)
            self.configs[n] = props
            (d / "server.properties.in").write_text(properties_text(props))
            (d / "server.properties").write_text(properties_text(props))
            command = "kraft-broker" if node.role == "broker" else "kraft-controller"
            (d / "start.sh").write_text(START_SH % {"run": CONTAINER_RUN, "command": command})
            self.events_file(n).touch()
            self._give_to_node_user(d)

    def _give_to_node_user(self, run_dir: Path) -> None:
        """The node's run dir belongs to the user the lab runs nodes as (it writes its config
        and event log there)."""
        user = getattr(self.lab.topology, "node_user", None)
        if user is None:
            return
        for path in (run_dir, *run_dir.iterdir()):
            os.chown(path, *user)

    def _spec(self, node_id: int, command: tuple[str, ...]):
        from infra.docker import BindMount
        mount = BindMount(str(self.run_dir(node_id)), CONTAINER_RUN, "rprivate")
        # the host's choice of event loop, when it makes one, reaches the nodes (A/B runs)
        env = {k: os.environ[k] for k in (EVENT_LOOP_ENV,) if k in os.environ}
        return self.lab.node_spec(self.nodes[node_id].name, command, extra_mounts=(mount,), env=env)

    # ---- lifecycle ------------------------------------------------------------------
    def format(self, node_id: int, *, ignore_formatted: bool = False, timeout_s: float = 60.0) -> str:
        """``kraft-storage format`` of the node's dirs, in a one-off container with its mounts."""
        argv = ["kraft-storage", "format", "-c", f"{CONTAINER_RUN}/server.properties", "--cluster-id",
                self.cluster_id] + (["--ignore-formatted"] if ignore_formatted else [])
        spec = replace(self._spec(node_id, tuple(argv)), name=self.container(node_id) + "-format",
                       network=None, network_aliases=())
        self.lab.docker.run(spec)
        try:
            code = self.lab.docker.wait(spec.name, timeout_s)
            out = self.lab.docker.logs(spec.name)
        finally:
            self.lab.docker.remove(spec.name)
        (self.run_dir(node_id) / "format.log").write_text(out)
        if code != 0:
            raise ServiceError(f"kraft-storage format of {self.nodes[node_id].name} exited {code}: {out.strip()[-500:]}")
        return out

    def format_all(self) -> None:
        """Format every node's dirs before the first start: the storage tool's own function
        (``kafka_runtime.storage_tool.format_dirs``, what ``kraft-storage format`` runs) on the
        disks' host paths, the files then given to the node's user — 0.1 s a node, where a one-off
        container per node cost each run ~2 s of its set-up, side by side. ``format`` (in the
        node's container) stays for a disk replaced mid-run."""
        from kafka_runtime.storage_tool import format_dirs
        user = getattr(self.lab.topology, "node_user", None)
        for n, node in self.nodes.items():
            paths = [str(self.lab.disk(node.name, d).data_path) for d in node.disk_names]
            written = format_dirs(tuple(paths), node_id=n, cluster_id=self.cluster_id, ignore_formatted=False)
            lines = [f"Formatting {path} with directory.id {ids.to_base64(dir_id)}" for path, dir_id in written]
            (self.run_dir(n) / "format.log").write_text("".join(f"{line} (on the host)\n" for line in lines))
            if user is not None:
                for path in paths:
                    for name in os.listdir(path):
                        os.chown(os.path.join(path, name), *user)

    def start(self, node_id: int) -> None:
        """Start (or start again) the node's container: ducktape's start = clean + start."""
        name = self.container(node_id)
        if self._exits is None:
            self._exits = self.lab.docker.watch_exits(self.lab.lab_id)
        state = self.lab.docker.state(name)
        if state in ("exited", "created"):
            self.lab.docker.start(name)
        elif state == "missing":
            self.lab.docker.run(self._spec(node_id, ("sh", f"{CONTAINER_RUN}/start.sh")))
        elif state == "paused":
            self.lab.docker.unpause(name)
        self._started_ns[node_id] = time.time_ns()
        self._expected_down.discard(node_id)
        self._seen_exit.discard(node_id)
        self._action("node_started", node_id)

    def stop(self, node_id: int, *, timeout_s: int = 15) -> int | None:
        """SIGTERM, wait (then SIGKILL after ``timeout_s``); returns the exit code."""
        name = self.container(node_id)
        self._expected_down.add(node_id)
        if self.lab.docker.state(name) == "paused":
            self.lab.docker.unpause(name)
        if self.lab.docker.state(name) == "running":
            self.lab.docker.stop(name, timeout_s)
        return self._record_exit(node_id, expected=True)

    def kill(self, node_id: int, signal: str = "KILL") -> int | None:
        name = self.container(node_id)
        self._expected_down.add(node_id)
        if self.lab.docker.state(name) in ("running", "paused"):
            self.lab.docker.kill(name, signal.removeprefix("SIG"))
            self._wait_state(node_id, ("exited", "missing"), 15.0)
        return self._record_exit(node_id, expected=True)

    def restart(self, node_id: int, *, clean: bool = True, while_down: Callable[[], None] | None = None) -> None:
        """Stop (SIGTERM, or kill) and start again; ``while_down`` runs in between."""
        if clean:
            self.stop(node_id)
        else:
            self.kill(node_id)
        if while_down is not None:
            while_down()
        self.start(node_id)

    def pause(self, node_id: int) -> None:
        self.lab.docker.pause(self.container(node_id))

    def unpause(self, node_id: int) -> None:
        if self.lab.docker.state(self.container(node_id)) == "paused":
            self.lab.docker.unpause(self.container(node_id))

    def state(self, node_id: int) -> str:
        return self.lab.docker.state(self.container(node_id))

    def exit_code(self, node_id: int) -> int | None:
        return self.lab.docker.exit_code(self.container(node_id))

    def alive(self, node_id: int) -> bool:
        return self.state(node_id) in ("running", "paused")

    def states(self) -> dict[int, str]:
        """Every node's container state from one list call."""
        by_name = self.lab.docker.states(self.lab.lab_id)
        return {n: by_name.get(self.container(n), "missing") for n in self.nodes}

    def record_unexpected_exits(self) -> list[int]:
        """Nodes whose container stopped without the harness asking, as the daemon's event
        stream reported since the last call: recorded once as ``node_exited`` with
        ``expected: false`` and the exit code of the event; returns their ids."""
        found = []
        by_name = {self.container(n): n for n in self.nodes}
        for ev in self._exits.drain() if self._exits is not None else ():
            n = by_name.get(ev.name)
            if (n is None or n in self._expected_down or n in self._seen_exit
                    or ev.time_ns < self._started_ns.get(n, ev.time_ns + 1)):
                continue  # not a node, stopped on purpose, already seen, or an earlier life's exit
            self._seen_exit.add(n)
            self._action("node_exited", n, exit_code=ev.exit_code, expected=False)
            found.append(n)
        return found

    def close(self) -> None:
        """End the event stream (after the run; the containers go with the lab)."""
        if self._exits is not None:
            self._exits.close()
            self._exits = None

    def final_status(self) -> dict[int, bool]:
        """Record ``node_status`` (alive) for every node; returns it."""
        self.record_unexpected_exits()
        status = {n: self.alive(n) for n in self.nodes}
        for n, alive in status.items():
            self._action("node_status", n, alive=alive, role=self.nodes[n].role)
        return status

    def _record_exit(self, node_id: int, *, expected: bool) -> int | None:
        if node_id in self._seen_exit:
            return None
        code = self.exit_code(node_id) if self.state(node_id) != "missing" else None
        self._seen_exit.add(node_id)
        self._action("node_exited", node_id, exit_code=code, expected=expected)
        return code

    def _wait_state(self, node_id: int, states: tuple[str, ...], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        st = self.state(node_id)
        while st not in states and time.monotonic() < deadline:
            time.sleep(0.1)
            st = self.state(node_id)
        return st

    def _action(self, event: str, node_id: int, **attrs: Any) -> None:
        if self.ledger is not None:
            self.ledger.action(time.time_ns(), event, node_id, **attrs)

    # ---- addresses and readiness ------------------------------------------------------
    def ip(self, node_id: int) -> str:
        return self.lab.docker.ip(self.container(node_id), self.lab.network)

    def bootstrap(self) -> str:
        return ",".join(f"{self.ip(b)}:{BROKER_PORT}" for b in self.brokers() if self.alive(b))

    def active_controller(self, timeout_s: float = 20.0) -> int:
        """The active controller (the Raft leader), asked with DescribeQuorum (55) of each
        live controller until one answers as the leader."""
        from controller_impl.runtime.status import describe_quorum
        deadline = time.monotonic() + timeout_s
        last = "no live controller"
        while time.monotonic() < deadline:
            for c in self.controllers():
                if not self.alive(c):
                    continue
                try:
                    d = asyncio.run(describe_quorum(self.ip(c), CONTROLLER_PORT, 1.0))
                except Exception as exc:  # noqa: BLE001 - starting, dying or cut off: ask the next
                    last = f"controller {c}: {exc}"
                    continue
                if d["error"] == "none" and d["leader_id"] == c:
                    return c
                last = f"controller {c} names leader {d['leader_id']}"
            time.sleep(0.1)
        raise ServiceError(f"no active controller within {timeout_s:.0f} s ({last})")

    def controller_address(self) -> tuple[str, int]:
        """The active controller's address (the first controller if none answers as leader)."""
        if len(self.controllers()) == 1:
            return self.ip(self.controllers()[0]), CONTROLLER_PORT
        try:
            return self.ip(self.active_controller(timeout_s=10.0)), CONTROLLER_PORT
        except ServiceError:
            return self.ip(self.controllers()[0]), CONTROLLER_PORT

    def record_quorum_logs(self) -> None:
        """After the run: every controller's metadata log as one ``quorum_logs`` action for the
        ``quorum_logs`` check (:func:`~harness.cluster.controller_reads.read_quorum_logs`)."""
        from controller_impl.runtime.status import describe_quorum

        def committed() -> int:
            active = self.active_controller(timeout_s=15.0)
            return asyncio.run(describe_quorum(self.ip(active), CONTROLLER_PORT, 2.0))["high_watermark"]
        meta_dirs = {c: self.lab.disk(self.nodes[c].name, META_DIR).data_path for c in self.controllers()}
        self._action("quorum_logs", None, **read_quorum_logs(meta_dirs, committed))

    def wait_port(self, node_id: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no attempt"
        while time.monotonic() < deadline:
            if not self.alive(node_id):
                raise ServiceError(f"{self.nodes[node_id].name} exited (code {self.exit_code(node_id)}) before "
                                   f"listening: {self.logs_tail(node_id)}")
            try:
                with socket.create_connection((self.ip(node_id), self.nodes[node_id].port), timeout=0.5):
                    return
            except OSError as exc:
                last = str(exc)
                time.sleep(0.1)
        raise ServiceError(f"{self.nodes[node_id].name} did not listen on port {self.nodes[node_id].port} "
                           f"within {timeout_s:.0f} s ({last}): {self.logs_tail(node_id)}")

    def metadata(self, timeout_s: float = 10.0):
        """The committed metadata image, read from the controller through Fetch."""
        return read_metadata(*self.controller_address(), timeout_s=timeout_s)

    def wait_unfenced(self, broker_ids: list[int], timeout_s: float = 60.0):
        """Until every broker in ``broker_ids`` is registered and unfenced; returns the image."""
        deadline = time.monotonic() + timeout_s
        pending = set(broker_ids)
        image = None
        while time.monotonic() < deadline:
            for b in list(pending):
                if not self.alive(b):
                    raise ServiceError(f"broker {b} exited (code {self.exit_code(b)}) before it was unfenced: "
                                       f"{self.logs_tail(b)}")
            try:
                image = self.metadata()
            except Exception as exc:  # noqa: BLE001 - the controller may still be starting
                self.say(f"metadata not readable yet: {exc}")
                time.sleep(0.3)
                continue
            pending = {b for b in broker_ids if b not in image.brokers or image.brokers[b].fenced}
            if not pending:
                return image
            time.sleep(0.2)
        raise ServiceError(f"brokers {sorted(pending)} not unfenced within {timeout_s:.0f} s: "
                           + " | ".join(f"broker {b}: {self.logs_tail(b)}" for b in sorted(pending)))

    # ---- logs -----------------------------------------------------------------------
    def logs_tail(self, node_id: int, chars: int = 600) -> str:
        try:
            text = self.lab.docker.logs(self.container(node_id), tail=30)
        except Exception as exc:  # noqa: BLE001
            text = f"(no logs: {exc})"
        return text.strip()[-chars:] or "(no output)"

    def collect_logs(self) -> None:
        """Every node's container output into ``<run dir>/container.log``, each line led by
        the time docker received it (to line up with the timeline; never raises)."""
        for n in self.nodes:
            try:
                text = self.lab.docker.logs(self.container(n), timestamps=True)
            except Exception as exc:  # noqa: BLE001
                text = f"(cannot read logs: {exc})\n"
            try:
                self.run_dir(n).mkdir(parents=True, exist_ok=True)
                (self.run_dir(n) / "container.log").write_text(text)
            except OSError:
                pass
