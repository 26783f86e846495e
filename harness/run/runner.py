"""One run of a scenario value, end to end (architecture.md "data flow of one run").

    scenario → node image (built if missing) → infra Lab (loop-device disks, backend
    auto|dm|fuse, docker network) → services: format, controller, brokers → wait until every
    broker is unfenced → topics created at the controller, replicas assigned to dirs →
    workload (real Kafka client, ack ledger) + the generator's plan of the schedule
    (:mod:`harness.generator.plan`, done here: the nemesis injects and heals) → heal everything
    (``finally``) → drain every partition → final node status → collect logs and event files
    → history → checks → metrics → recorder (``results/<run_id>/``: Parquet + run.json)

:func:`run_scenario` returns a :class:`RunOutcome` (also when the run failed part-way: the
history recorded so far is still checked and written, with ``error`` set). Ctrl-C stops the
schedule, heals, tears the lab down and re-raises. The lab is always destroyed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.generator.plan import CreateTopic, Heal, Inject, StartReader, plan_of
from harness.results.ledger import load_history
from harness.run.host_load import starved_line
from harness.cluster.node_configs import lab_topology
from harness.run.sampler import Sampler
from harness.cluster.services import ServiceError, Services
from harness.scenario.model import Scenario
from harness.workload.group import GroupConsumerWorkload
from harness.workload.producer import SUPPORTED_CLIENTS, ProducerWorkload, SafeLedger, drain, ready_line

Say = Callable[[str], None]
__all__ = ["RunOptions", "RunOutcome", "run_scenario", "fidelity_label", "create_topic_at_controller"]


@dataclass(frozen=True)
class RunOptions:
    backend: str = "auto"
    results_root: str = "results"
    client: str | None = None          # override workload.client (confluent-kafka | kafka-python)
    say: Say = print
    sample_interval_s: float = 1.0


@dataclass
class RunOutcome:
    scenario: Scenario
    run_id: str
    run_dir: Path | None
    backend: str = "unknown"
    fidelity: str = "unknown"
    report: Any = None
    metrics: list[dict] = field(default_factory=list)
    error: str | None = None
    workload_counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    client: str = ""
    harness_errors: list[str] = field(default_factory=list)   # scheduled actions that could not be carried out

    @property
    def verdict(self) -> str:
        from harness.checkers import valid_text
        if self.report is None:
            return "error"
        return valid_text(self.report.valid)


def fidelity_label(backend: str) -> str:
    return {"dm": "block-layer EIO via device-mapper table swap (dm-error/flakey/delay) under a real filesystem",
            "fuse": "block-layer EIO via a FUSE-served loop-device backing file under a real filesystem "
                    "(the backing file is not synced on the host)",
            "plain": "no disk faults (plain loop devices)"}.get(backend, backend)


async def _create_topic(host: str, port: int, name: str, partitions: int, rf: int) -> str:
    from kafka_runtime.controller_client import create_topic
    from kafka_runtime.client import KafkaClient
    client = await KafkaClient.connect(host, port, client_id="jbodlab-harness")
    try:
        resp = await create_topic(client, name, partitions, rf)
        return resp.topics[0].error_code.name
    finally:
        await client.close()


def create_topic_at_controller(svc: Services, name: str, partitions: int, rf: int) -> str:
    host, port = svc.controller_address()
    return asyncio.run(_create_topic(host, port, name, partitions, rf))


def _wait_topic(svc: Services, name: str, partitions: int, timeout_s: float, *, assigned: bool) -> None:
    """Until every partition has a leader (and, when ``assigned``, no UNASSIGNED directory)."""
    from kafka_common import ids
    deadline = time.monotonic() + timeout_s
    state = "not created"
    while time.monotonic() < deadline:
        image = svc.metadata()
        tid = image.topic_ids.get(name)
        if tid is not None:
            parts = image.partitions_of(tid)
            no_leader = [p for p, r in parts.items() if r.leader < 0]
            unassigned = [p for p, r in parts.items() if ids.UNASSIGNED in r.directories]
            if len(parts) == partitions and not no_leader and (not assigned or not unassigned):
                return
            state = f"{len(parts)} partitions, leaderless {no_leader}, unassigned dirs {unassigned}"
        time.sleep(0.2)
    raise ServiceError(f"topic {name}: not ready within {timeout_s:.0f} s ({state})")


def _wait_producible(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Until the brokers answer Metadata for the topic with a leader for every partition."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=3)
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
                return
            last = f"{t.error if t else 'no topic'}"
        except Exception as exc:  # noqa: BLE001
            last = str(exc)
        time.sleep(0.3)
    raise ServiceError(f"brokers do not serve Metadata for {topic} within {timeout_s:.0f} s ({last})")


def client_listeners(svc: Services) -> list[int]:
    """Brokers whose client port accepts a TCP connection now."""
    import socket
    out = []
    for b in svc.brokers():
        try:
            with socket.create_connection((svc.ip(b), 9092), timeout=1.0):
                out.append(b)
        except Exception:  # noqa: BLE001 - refused, unreachable, or not running
            continue
    return out


def run_scenario(scenario: Scenario, opts: RunOptions = RunOptions()) -> RunOutcome:
    from harness.results.recorder import new_run_id
    t_start = time.monotonic()
    started_ns = time.time_ns()
    run_id = new_run_id(scenario, started_ns)
    run_dir = Path(opts.results_root).resolve() / run_id  # absolute: docker bind mounts need it
    run_dir.mkdir(parents=True, exist_ok=True)
    log_fh = open(run_dir / "runner.log", "a", encoding="utf-8", buffering=1)

    def say(msg: str) -> None:
        log_fh.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
        opts.say(msg)
    outcome = RunOutcome(scenario, run_id, run_dir)
    client = opts.client or (scenario.workload.client if scenario.workload.client in SUPPORTED_CLIENTS
                             else "confluent-kafka")
    outcome.client = client
    (run_dir / "scenario.json").write_text(scenario.to_json())
    ledger = SafeLedger(run_dir / "ledger.jsonl")
    svc: Services | None = None
    sampler = None
    try:
        from infra import image
        from infra.lab import Lab
        image.ensure_node_image(say=lambda m: say(f"  image: {m}"))
        say(f"  lab: {scenario.topology.brokers} brokers x {scenario.topology.dirs_per_broker} dirs "
            f"({scenario.topology.fs}, {scenario.topology.dir_size_mb} MiB, {scenario.topology.disk_cache}), "
            f"backend {opts.backend}")
        with Lab.create(lab_topology(scenario, opts.backend), say=lambda m: say(f"  {m}")) as lab:
            outcome.backend = lab.backend.name
            outcome.fidelity = fidelity_label(lab.backend.name)
            svc = Services(lab, scenario, run_dir, ledger=ledger, say=lambda m: say(f"  {m}"))
            sampler = Sampler(lab, svc)
            try:
                _run_in_lab(scenario, svc, ledger, sampler, outcome, client, say)
            finally:
                svc.collect_logs()
                svc.close()
    except KeyboardInterrupt:
        outcome.error = "interrupted (Ctrl-C)"
        say("  interrupted: lab torn down")
        _finish(outcome, scenario, svc, ledger, sampler, started_ns, say)
        raise
    except Exception as exc:  # noqa: BLE001 - record what we have, then report
        outcome.error = f"{type(exc).__name__}: {exc}"
        (run_dir / "error.txt").write_text(traceback.format_exc())
        say(f"  ERROR: {outcome.error}")
    _finish(outcome, scenario, svc, ledger, sampler, started_ns, say)
    outcome.seconds = time.monotonic() - t_start
    log_fh.close()
    return outcome


def _run_in_lab(scenario: Scenario, svc: Services, ledger, sampler, outcome: RunOutcome, client: str, say) -> None:
    from harness.nemesis.executor import FaultExecutor
    t0 = time.monotonic()
    svc.prepare()
    svc.format_all()
    t_format = time.monotonic()
    # every node at once: a broker looks for the active controller until one answers, so its own
    # start-up (~1-2 s of Python) overlaps the controllers' election instead of following it
    for n in (*svc.controllers(), *svc.brokers()):
        svc.start(n)
    for c in svc.controllers():
        svc.wait_port(c)
    t_ctl = time.monotonic()
    svc.wait_unfenced(svc.brokers(), timeout_s=60)
    say(f"  cluster up: controller + {len(svc.brokers())} brokers unfenced ({time.monotonic() - t0:.1f} s: format "
        f"{t_format - t0:.1f} s, controllers listening {t_ctl - t_format:.1f} s, brokers unfenced "
        f"{time.monotonic() - t_ctl:.1f} s later)")
    w = scenario.workload
    topics_now = [t for t in w.topics if t.create_at_ms is None]
    for t in topics_now:
        code = create_topic_at_controller(svc, t.name, t.partitions, t.replication_factor)
        if code != "none":
            raise ServiceError(f"CreateTopics {t.name}: {code}")
    for t in topics_now:
        _wait_topic(svc, t.name, t.partitions, 30, assigned=scenario.topology.dirs_per_broker > 1)
    bootstrap = svc.bootstrap()
    serving = client_listeners(svc)
    if not serving:   # the faults and the metadata checks still mean something
        say("  WARNING: no broker accepts client connections on port 9092; running the schedule anyway "
            "(client checks will be unknown)")
    for t in topics_now if serving else ():
        try:
            _wait_producible(bootstrap, t.name, 20)
        except ServiceError as exc:
            say(f"  WARNING: {exc}; running the schedule anyway (client checks will be unknown)")
    say(f"  topics {', '.join(f'{t.name}({t.partitions}xRF{t.replication_factor})' for t in topics_now)} ready; "
        f"workload {client} {w.rate_per_s}/s for {w.duration_ms / 1000:.0f} s")
    workload = ProducerWorkload(w, svc.bootstrap, ledger, tag=outcome.run_id.split("-")[0], seed=scenario.seed,
                                client=client, say=lambda m: say(f"  {m}"))
    for t in topics_now:
        workload.add_topic(t.name, t.partitions)
    executor = FaultExecutor(svc, ledger, seed=scenario.seed, say=lambda m: say(f"  {_clock(t0)} {m}"))
    plan = plan_of(scenario)
    readers = []

    def start_reader(op: StartReader) -> None:
        from harness.workload.readers import Reader
        reader = Reader(op.index, svc.bootstrap, ledger, op.reader.topic, op.reader.partition,
                        say=lambda m: say(f"  {_clock(t0)} {m}"))
        reader.start()
        readers.append(reader)

    def create_topic(op: CreateTopic) -> None:
        code = create_topic_at_controller(svc, op.topic.name, op.topic.partitions, op.topic.replication_factor)
        say(f"  {_clock(t0)} created topic {op.topic.name}: {code}")
        workload.add_topic(op.topic.name, op.topic.partitions)

    # how each operation of the plan is done
    do: dict[type, Callable[[Any], object]] = {
        Inject: lambda op: executor.inject(op.index, op.fault),
        Heal: lambda op: executor.heal(op.index),
        StartReader: start_reader,
        CreateTopic: create_topic,
    }
    say(f"  workload: {ready_line(workload.start(), w.producers)}")
    group = None
    if w.group_consumers:   # members of one group reading the initial topics, commit after processing
        group = GroupConsumerWorkload(svc.bootstrap, ledger, group=w.group_id, topics=[t.name for t in topics_now],
                                      members=w.group_consumers, say=lambda m: say(f"  {m}"))
        group.start()
    start = time.monotonic()
    next_sample = start
    next_poll = start
    try:
        while True:
            now_ms = (time.monotonic() - start) * 1000
            due, plan = plan.due(now_ms)
            for op in due:
                try:
                    do[type(op)](op)
                except Exception as exc:  # noqa: BLE001 - one failed action must not end the run
                    msg = f"{op.kind} at {op.at_ms} ms failed: {type(exc).__name__}: {exc}"
                    executor.errors.append(msg)
                    say(f"  {_clock(t0)} {msg}")
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + 0.25
                for n in svc.record_unexpected_exits():
                    say(f"  {_clock(t0)} {svc.nodes[n].name} exited on its own (code {svc.exit_code(n)})")
            if time.monotonic() >= next_sample:
                sampler.sample()
                next_sample += 1.0
            if now_ms >= w.duration_ms:
                break
            time.sleep(0.05)
    finally:
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
        workload.stop(flush_timeout_s=1.0 if interrupted else 25.0)
        for reader in readers:
            reader.stop()
        executor.heal_all()
    if group is not None:
        try:
            group.stop(group.end_offsets({t.name: t.partitions for t in topics_now}),
                       timeout_s=w.drain_timeout_ms / 1000)
            say(f"  group {w.group_id}: {group.counts}" + (f"; errors {group.errors}" if group.errors else ""))
        except Exception as exc:  # noqa: BLE001 - the group_consumption check says unknown then
            executor.errors.append(f"group consumers: {type(exc).__name__}: {exc}")
        workload.errors.extend(group.errors)
    outcome.workload_counts = dict(workload.counts)
    say(f"  workload done: {workload.counts}" + (f"; errors {workload.errors}" if workload.errors else ""))
    for reader in readers:
        say(f"  {reader.process}: {reader.counts}" + (f"; errors {reader.errors}" if reader.errors else ""))
        workload.errors.extend(reader.errors)
    svc.record_unexpected_exits()
    down = [n for n, st in svc.states().items() if st not in ("running", "paused")]
    if down:   # let the controller fence what died, so the history sees it (nothing to wait for otherwise)
        settle_s = max(1.0, scenario.configs.session_timeout_ms / 1000)
        say(f"  {len(down)} node(s) down at the end: {settle_s:.0f} s for the controller to fence them")
        time.sleep(settle_s)
    svc.record_unexpected_exits()
    partitions = {t.name: t.partitions for t in w.topics}
    partitions.update(executor.admin_topics)   # topics the schedule's admin actions created
    if not serving and not client_listeners(svc):
        say("  drain skipped: no broker accepts client connections")
    else:
        try:
            t_drain = time.monotonic()
            ends = drain(svc.bootstrap(), partitions, ledger, timeout_ms=w.drain_timeout_ms,
                         say=lambda m: say(f"  {m}"))
            read = sum(1 for v in ends.values() if v is not None)
            say(f"  drain: {read}/{len(ends)} partitions read to their end ({time.monotonic() - t_drain:.1f} s)")
        except Exception as exc:  # noqa: BLE001
            executor.errors.append(f"drain failed: {exc}")
            say(f"  drain failed: {exc}")
    svc.final_status()
    try:
        svc.record_quorum_logs()
    except Exception as exc:  # noqa: BLE001 - the quorum_logs check says unknown then
        executor.errors.append(f"reading the controllers' metadata logs failed: {exc}")
    outcome.harness_errors = list(executor.errors) + list(workload.errors)
    if executor.errors:
        (outcome.run_dir / "harness_errors.txt").write_text("\n".join(executor.errors) + "\n")
        say(f"  harness problems: {len(executor.errors)} (see harness_errors.txt)")


def _finish(outcome: RunOutcome, scenario: Scenario, svc: Services | None, ledger, sampler, started_ns: int,
            say: Say) -> None:
    """History → checks → metrics → recorder. Never raises (a broken record is reported)."""
    from harness.checkers import run_checks
    from harness.checkers.metrics import compute_metrics
    from harness.results.recorder import record_run
    try:
        ledger.close()
    except Exception:  # noqa: BLE001
        pass
    try:
        files = svc.event_files() if svc is not None else []
        history = load_history(outcome.run_dir / "ledger.jsonl", files)
        outcome.report = run_checks(scenario, history)
        outcome.metrics = compute_metrics(history, scenario)
        host = sampler.host_rows() if sampler else []
        outcome.metrics.extend(host)
        if (line := starved_line(host)) is not None:
            say(f"  WARNING: {line}")
        configs = {str(n): p for n, p in (svc.configs.items() if svc else [])}
        record_run(outcome.run_dir.parent, scenario=scenario, history=history, report=outcome.report,
                   run_id=outcome.run_id, metrics=outcome.metrics, resources=sampler.rows if sampler else (),
                   backend=outcome.backend, fidelity=outcome.fidelity,
                   versions={"client": outcome.client}, node_configs=configs, started_ns=started_ns,
                   ended_ns=time.time_ns())
        if outcome.error:
            info = json.loads((outcome.run_dir / "run.json").read_text())
            info["error"] = outcome.error
            (outcome.run_dir / "run.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    except Exception as exc:  # noqa: BLE001
        outcome.error = (outcome.error + "; " if outcome.error else "") + f"recording failed: {exc}"
        (outcome.run_dir / "record_error.txt").write_text(traceback.format_exc())
        say(f"  recording failed: {exc}")


def _clock(t0: float) -> str:
    return f"[+{time.monotonic() - t0:5.1f}s]"
