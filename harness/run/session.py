"""Chaos sessions: a live lab cluster driven by hand, recorded like a run.

``jbodlab up`` starts a *session server* (``python -m harness.run.session serve DIR``), a detached
process that owns the lab (it is the lab's owner pid, so ``jbodlab cleanup`` leaves it alone
while it lives): it provisions the scenario's topology, starts the controller and brokers,
creates the workload's topics and keeps a real producer running (the ack ledger). The other
commands talk to it over ``DIR/session.sock`` (one JSON request line → one JSON answer line):

- ``status``     brokers fenced/unfenced (controller metadata via Fetch of __cluster_metadata),
                 each dir online/offline with its directory id, partitions with leader/ISR/dir;
- ``fail-disk``  a disk fault value (node, dir, mode) injected through infra's DiskFaultHandle;
- ``partition``  a network partition between two nodes; ``kill`` a node's process;
- ``heal``       heals every open fault;
- ``down``       stops the producer, heals, drains, records the session as a run
                 (``results/<run_id>/``, scenario value = the topology + every fault applied,
                 ``at_ms`` = when it was applied) and tears the lab down.

Every action goes into the session's ledger, so ``jbodlab analyze results/<run_id>`` reads a
session exactly like a run.
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.scenario.faults import (P_MODES, AdminAction, DiskFault, NetworkFault, ProcessFault, parse_dir_ref,
                                     parse_node_ref)
from infra import jsonline

DEFAULT_DIR = Path(os.environ.get("JBODLAB_SESSION_DIR", "/var/lib/jbodlab/session"))
SOCKET = "session.sock"

__all__ = ["SessionError", "request", "node_ref", "serve", "DEFAULT_DIR", "format_status"]


class SessionError(HarnessError, RuntimeError):
    """Bad session command input, or no session running; the message says which."""


def node_ref(text: str) -> str:
    """``broker-1``, ``1``, ``broker:1``, ``controller-3001``, ``leader:t1/0`` → a node ref."""
    t = text.strip()
    if parse_node_ref(t) is not None:
        return t
    for role in ("broker", "controller"):
        if t.startswith(role + "-") and t[len(role) + 1:].isdigit():
            return f"{role}:{t[len(role) + 1:]}"
    if t.isdigit():
        return f"controller:{t}" if int(t) > 3000 else f"broker:{t}"
    raise SessionError(f"NODE: {text!r} is not a node (broker-1, 1, broker:1, controller-3001, leader:t1/0, "
                       "follower:t1/0)")


# ------------------------------------------------------------------ client side
def request(session_dir: Path, payload: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    path = Path(session_dir) / SOCKET
    if not path.exists():
        raise SessionError(f"no chaos session at {session_dir} (start one with `jbodlab up`)")
    try:
        data = jsonline.exchange(path, payload, timeout_s)
    except OSError as exc:
        raise SessionError(f"the session server at {path} does not answer ({exc}); "
                           "`jbodlab cleanup` removes a dead session") from None
    if not data:
        raise SessionError("the session server closed the connection without an answer")
    return json.loads(data)


def format_status(st: dict[str, Any]) -> list[str]:
    lines = [f"session {st.get('run_id')}  up {st.get('uptime_s', 0):.0f} s  backend {st.get('backend')}  "
             f"workload {st.get('workload')}"]
    lines.append("brokers:")
    for b in st.get("brokers", []):
        lines.append(f"  broker {b['id']:<3} {b['container']:9} {'FENCED' if b['fenced'] else 'unfenced':9} "
                     f"epoch {b['epoch']}")
        for d in b["dirs"]:
            lines.append(f"      {d['name']:5} {d['state']:8} {d['id'] or '-':24} {d['path']}")
    lines.append("partitions:")
    for p in st.get("partitions", []):
        lines.append(f"  {p['topic']}-{p['partition']:<3} leader {p['leader']:<3} isr {p['isr']} "
                     f"replicas {p['replicas']} dirs {p['dirs']}")
    if st.get("faults"):
        lines.append("faults:")
        for f in st["faults"]:
            lines.append(f"  f{f['index']} {f['label']} {'healed' if f['healed'] else 'OPEN'}")
    return lines


# ------------------------------------------------------------------ server side
class _Session:
    def __init__(self, session_dir: Path, scenario, backend: str, results_root: str) -> None:
        self.dir = session_dir
        self.scenario = scenario
        self.backend = backend
        self.results_root = str(Path(results_root).resolve())  # absolute: docker bind mounts need it
        self.lock = threading.Lock()
        self.applied: list[Any] = []
        self.done = threading.Event()
        self.t0 = time.monotonic()

    def start(self) -> None:
        from harness.nemesis.executor import FaultExecutor
        from harness.results.recorder import new_run_id
        from harness.run.runner import create_topic_at_controller, fidelity_label
        from harness.cluster.node_configs import lab_topology
        from harness.cluster.services import Services
        from harness.workload.producer import ProducerWorkload, SafeLedger
        from infra import image
        from infra.lab import Lab
        s = self.scenario
        self.started_ns = time.time_ns()
        self.run_id = new_run_id(replace(s, name=f"session-{s.name}"), self.started_ns)
        self.run_dir = Path(self.results_root) / self.run_id
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = SafeLedger(self.run_dir / "ledger.jsonl")
        image.ensure_node_image(say=print)
        self.lab = Lab.create(lab_topology(s, self.backend), say=print)
        self.fidelity = fidelity_label(self.lab.backend.name)
        self.svc = Services(self.lab, s, self.run_dir, ledger=self.ledger, say=print)
        self.svc.prepare()
        for n in self.svc.nodes:
            self.svc.format(n)
        for c in self.svc.controllers():
            self.svc.start(c)
            self.svc.wait_port(c)
        for b in self.svc.brokers():
            self.svc.start(b)
        self.svc.wait_unfenced(self.svc.brokers())
        for t in s.workload.topics:
            create_topic_at_controller(self.svc, t.name, t.partitions, t.replication_factor)
        client = "confluent-kafka"   # the preferred client; a session has no workload value of its own to honour
        self.scenario = s = replace(s, workload=replace(s.workload, client=client))
        self.workload = ProducerWorkload(s.workload, self.svc.bootstrap, self.ledger, tag=self.run_id.split("-")[0],
                                         seed=s.seed, client=client, say=print)
        for t in s.workload.topics:
            self.workload.add_topic(t.name, t.partitions)
        from harness.workload.producer import ready_line
        print(f"workload: {ready_line(self.workload.start(), s.workload.producers)}")
        self.executor = FaultExecutor(self.svc, self.ledger, seed=s.seed, say=print)
        self.t0 = time.monotonic()

    def at_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    # ---- commands ---------------------------------------------------------------------
    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        with self.lock:
            self.svc.record_unexpected_exits()
            if cmd == "status":
                return {"ok": True, "status": self.status()}
            if cmd == "fail-disk":
                ref, d = node_ref(req["node"]), req["dir"]
                if parse_dir_ref(d) is None:
                    raise SessionError(f"DIR: {d!r} is not a dir (d1..dN, metadata, all, replica:<topic>/<p>)")
                mode = req.get("mode", "error")
                fault = DiskFault(at_ms=self.at_ms(), node=ref, dir=d, mode=mode,
                                  p=req.get("p") if mode in P_MODES else None,
                                  delay_ms=req.get("delay_ms") if mode == "delay" else None, file=req.get("file"))
                return self._inject(fault)
            if cmd == "partition":
                fault = NetworkFault(at_ms=self.at_ms(), action="partition", node=node_ref(req["a"]),
                                     peer=node_ref(req["b"]))
                return self._inject(fault)
            if cmd == "kill":
                fault = ProcessFault(at_ms=self.at_ms(), action="power-cut" if req.get("power_cut") else "kill",
                                     node=node_ref(req["node"]), signal=req.get("signal", "SIGKILL"))
                return self._inject(fault)
            if cmd == "delete-topic":
                return self._delete_topic(req)
            if cmd == "admin":   # jbodlab reassign / elect (harness.cli.operator)
                fault = AdminAction(at_ms=self.at_ms(), action=req["action"],
                                    node=node_ref(req["node"]) if req.get("node") else None,
                                    topic=req.get("topic"), election=req.get("election"))
                out = self._inject(fault)
                out.update(self.executor.active[len(self.applied) - 1].answer)
                return out
            if cmd == "reassignments":
                from harness.nemesis.operator import wait_reassignments
                return {"ok": True, "in_progress": wait_reassignments(self.svc.bootstrap(), 0)}
            if cmd == "heal":
                self.executor.heal_all()
                return {"ok": True, "healed": sorted(self.executor.active)}
            if cmd == "down":
                return self.down()
        raise SessionError(f"unknown command {cmd!r}")

    def _delete_topic(self, req: dict[str, Any]) -> dict[str, Any]:
        """DeleteTopics (and with ``recreate`` CreateTopics of the same name) through a real
        admin client, recorded as the schedule's admin actions; a refusal is the error."""
        from harness.scenario.faults import AdminAction
        topic = req["topic"]
        out: dict[str, Any] = {"ok": True}
        steps = [AdminAction(at_ms=self.at_ms(), action="delete-topic", topic=topic)]
        if req.get("recreate"):
            steps.append(AdminAction(at_ms=self.at_ms(), action="create-topic", topic=topic,
                                     partitions=int(req["recreate"]),
                                     replication_factor=int(req.get("replication_factor", 3)),
                                     records=int(req.get("records", 0))))
        for step in steps:
            self._inject(step)
            res = self.executor.active[len(self.applied) - 1].result
            if res.result != "none":
                return {"ok": False, "error": f"{step.action} {topic}: {res.result}"
                        + (" (no such topic)" if res.result == "UNKNOWN_TOPIC_OR_PART" else "")}
            out["deleted" if step.action == "delete-topic" else "created"] = {
                "topic": topic, "topic_id": res.topic_id,
                **({"records_acked": res.acked} if step.action == "create-topic" else {})}
        return out

    def _inject(self, fault) -> dict[str, Any]:
        from harness.scenario.faults import fault_to_dict
        from harness.scenario.fault_tables import TargetCheck, fault_from_dict
        from harness.scenario.fields import Problems
        topo, problems = self.scenario.topology, Problems()
        targets = TargetCheck(set(topo.broker_ids()), set(topo.controller_ids()), topo.dirs_per_broker,
                              {t.name: t.partitions for t in self.scenario.workload.topics})
        fault_from_dict(fault_to_dict(fault), "", problems, targets)
        if problems.items:
            raise SessionError("; ".join(f"{path.lstrip('.')}: {msg}" for path, msg in problems.items))
        index = len(self.applied)
        self.applied.append(fault)
        try:
            act = self.executor.inject(index, fault)
            if isinstance(fault, ProcessFault) and fault.action in ("kill", "power-cut"):
                act.restart_after = True     # in a session, `heal` brings killed nodes back
        except Exception as exc:
            self.applied.pop()
            self.executor.active.pop(index, None)
            raise SessionError(f"{fault.label()} on {fault.node or fault.topic} not applied: {type(exc).__name__}: {exc}") from exc
        return {"ok": True, "fault": f"f{index}", "label": fault.label(), "node_id": self.executor.active[index].node_id}

    def status(self) -> dict[str, Any]:
        from kafka_common import ids
        image = self.svc.metadata()
        brokers = []
        for b in self.svc.brokers():
            reg = image.brokers.get(b)
            online = {ids.to_base64(d) for d in (reg.log_dirs if reg else ())}
            dirs = []
            for name, did in sorted(self.executor.dir_names(b).items()):
                state = "online" if did in online else "offline"
                if name == "meta":
                    state = "metadata"
                dirs.append({"name": name, "id": did, "state": state, "path": f"/jbodlab/disks/{name}/data"})
            brokers.append({"id": b, "container": self.svc.state(b), "fenced": reg.fenced if reg else True,
                            "epoch": reg.epoch if reg else -1, "dirs": dirs})
        names = {b: {v: k for k, v in self.executor.dir_names(b).items()} for b in self.svc.brokers()}
        parts = []
        for tid, topic in image.topics.items():
            for pid, p in sorted(image.partitions_of(tid).items()):
                dirs = [names.get(r, {}).get(ids.to_base64(d), _reserved(d)) for r, d in zip(p.replicas, p.directories)]
                parts.append({"topic": topic.name, "partition": pid, "leader": p.leader, "isr": list(p.isr),
                              "replicas": list(p.replicas), "dirs": dirs})
        faults = [{"index": i, "label": self.executor.describe(f),
                   "healed": self.executor.active[i].healed if i in self.executor.active else False}
                  for i, f in enumerate(self.applied)]
        return {"run_id": self.run_id, "uptime_s": time.monotonic() - self.t0, "backend": self.lab.backend.name,
                "workload": dict(self.workload.counts), "brokers": brokers, "partitions": parts, "faults": faults}

    def down(self) -> dict[str, Any]:
        from harness.checkers import run_checks, valid_text
        from harness.results.ledger import load_history
        from harness.checkers.metrics import compute_metrics
        from harness.results.recorder import record_run
        from harness.workload.producer import drain
        try:
            self.workload.stop()
            self.executor.heal_all()
            from harness.run.runner import client_listeners
            try:
                if not client_listeners(self.svc):
                    raise RuntimeError("no broker accepts client connections")
                drain(self.svc.bootstrap(), {**{t.name: t.partitions for t in self.scenario.workload.topics},
                                             **self.executor.admin_topics},
                      self.ledger, timeout_ms=self.scenario.workload.drain_timeout_ms, say=print)
            except Exception as exc:  # noqa: BLE001
                print(f"drain failed: {exc}")
            self.svc.final_status()
            self.svc.collect_logs()
            self.svc.close()
        finally:
            self.ledger.close()
            self.lab.destroy()
        scenario = replace(self.scenario, name=f"session-{self.scenario.name}", faults=tuple(self.applied),
                           workload=replace(self.scenario.workload, duration_ms=max(1000, self.at_ms())))
        history = load_history(self.run_dir / "ledger.jsonl", self.svc.event_files())
        report = run_checks(scenario, history)
        record_run(self.results_root, scenario=scenario, history=history, report=report, run_id=self.run_id,
                   metrics=compute_metrics(history, scenario), backend=self.lab.backend.name, fidelity=self.fidelity,
                   node_configs={str(n): p for n, p in self.svc.configs.items()}, started_ns=self.started_ns)
        self.done.set()
        return {"ok": True, "run_dir": str(self.run_dir), "valid": valid_text(report.valid),
                "checks": {r.name: valid_text(r.valid) for r in report.results}}


def _reserved(d) -> str:
    from kafka_common import ids
    return {ids.UNASSIGNED: "UNASSIGNED", ids.LOST: "LOST", ids.MIGRATING: "MIGRATING"}.get(d, "?")


def serve(session_dir: Path, scenario, backend: str, results_root: str) -> int:
    session_dir.mkdir(parents=True, exist_ok=True)
    sock_path = session_dir / SOCKET
    sock_path.unlink(missing_ok=True)
    sess = _Session(session_dir, scenario, backend, results_root)
    (session_dir / "server.pid").write_text(str(os.getpid()))
    try:
        sess.start()
    except BaseException as exc:
        (session_dir / "failed.txt").write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        if getattr(sess, "lab", None) is not None:
            sess.lab.destroy()
        return 1

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline()
            try:
                answer = sess.handle(json.loads(line))
            except SessionError as exc:
                answer = {"ok": False, "error": str(exc)}
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write((json.dumps(answer, default=str) + "\n").encode())

    server = socketserver.ThreadingUnixStreamServer(str(sock_path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def on_term(_sig, _frm) -> None:
        if not sess.done.is_set():
            try:
                sess.handle({"cmd": "down"})
            finally:
                sess.done.set()
    signal.signal(signal.SIGTERM, on_term)
    (session_dir / "ready").write_text(sess.run_id)
    print(f"session {sess.run_id} ready", flush=True)
    while not sess.done.wait(1.0):
        with sess.lock:
            sess.svc.record_unexpected_exits()
    time.sleep(0.5)   # let the last answer go out
    server.shutdown()
    sock_path.unlink(missing_ok=True)
    (session_dir / "ready").unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse
    from harness.scenario.model import Scenario
    p = argparse.ArgumentParser(prog="python -m harness.run.session")
    p.add_argument("action", choices=("serve",))
    p.add_argument("dir")
    p.add_argument("--scenario-json", required=True)
    p.add_argument("--backend", default="auto")
    p.add_argument("--results", default="results")
    a = p.parse_args(argv)
    scenario = Scenario.from_dict(json.loads(Path(a.scenario_json).read_text()))
    return serve(Path(a.dir), scenario, a.backend, a.results)


if __name__ == "__main__":
    sys.exit(main())
