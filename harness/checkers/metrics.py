"""Metrics of one run, computed from its history (pure): rows of the ``metrics`` table.

Each row is a dict with the ``metrics`` columns the history determines — ``metric``,
``value``, ``unit`` (``ms`` | ``count``), ``topic``, ``partition``, ``node_id``, ``dir_id``,
``fault_id``, ``fault_kind``, ``queued_assignments``; the recorder adds run_id, scenario,
backend, fidelity and the config columns.

==========================  ================================================================
metric                      interval (per disk fault *F* on broker *b* at *T* unless stated)
==========================  ================================================================
detect_ms                   *T* → *b*'s first ``dir_offline`` for a failed dir
report_ms                   *T* → the controller's first commit of it: ``registration_change``
                            of *b* without a failed dir, or a ``partition_change`` with an
                            offline/lost reason taking *b* out of an affected ISR
isr_shrink_ms               per affected partition: *T* → first committed ISR without *b*
leader_failover_ms          per affected partition led by *b* at *T*: *T* → first committed
                            leader other than *b* (not -1)
client_unavailable_ms       per fault (any kind) × partition: last ok produce completion at
                            or before *T* → first ok produce completion after *T*
failure_timeout_shutdown_ms *T* → *b*'s ``failure_timeout_shutdown``
fencing_ms                  per controller ``registered`` of a broker → its next ``unfenced``;
                            ``queued_assignments`` = the broker's largest ``queued`` meanwhile
controller_failover_ms      per fault on a controller that was active at *T* (kill, metadata
                            disk, isolation): *T* → another controller's ``controller_active``
corruption_detect_ms        per corrupt-reads/-writes fault: the first flipped bit the device
                            served the node (``fault_first_hit``) → its ``dir_offline`` with
                            EBADMSG or ``log_truncated_at_recovery``
                            (:mod:`harness.checkers.corruption`)
failover_report_ms          ``report_ms`` of a broker's disk fault whose report crossed a
                            controller failover (a ``controller_active`` between *T* and the
                            commit): dir failure → commit across a failover
leader_rebalance_ms         per ``restart`` of broker *b* that left partitions *b* prefers (first
                            replica) led elsewhere: *T* → all of them led by *b* again
                            (:mod:`harness.checkers.operator`)
acked_lost, duplicates      counts from :func:`harness.checkers.durability.analyse_durability`
produce_<w>_p50_ms / _p99_ms acks=all produce latency in window *w* ∈ before, during, after
                            (per partition, and pooled for the run: topic/partition null)
produce_<w>_per_s           acked produces per second in window *w* (unit ``per_s``)
latency_degradation_ratio   worst 5 s p50 during the faults ÷ the pre-fault p50 (unit
                            ``ratio``; the run's row: the worst partition outside every fault)
service_recovery_ms         per fault × partition: fault → rolling p99 back within the bound
                            (the run's row per fault: the slowest partition, when all recovered)
service_unrecovered         count of fault × partition pairs that never recovered
broker_produce_<w>_mean_ms  the brokers' own Produce time in window *w* (arrival → answer, the
                            wait for followers included; count-weighted mean of their
                            ``request_metrics`` seconds inside *w*); ``_p99_ms``: the highest
                            p99 of any broker in any of those seconds. Run-level; a client
                            latency far above them is the client's own queue
host_cpu_busy_ratio         the host's cores busy over the workload; ``host_cpu_other_ratio``:
                            the share taken outside the lab (not from the history: the runner
                            samples /proc, :mod:`harness.run.host_load`, and adds these two rows)
==========================  ================================================================

The service definitions (windows, fault domains, rolling windows, bounds) are in
:mod:`harness.checkers.service`; they depend on the scenario's ``expect.service_*`` values,
so :func:`compute_metrics` takes the scenario (the defaults when it is ``None``).
"""

from __future__ import annotations

from typing import Any

from harness.checkers.common import NOT_A_FAILURE_MODES, WHOLE_NODE_DIRS, InjectedFault, first_after, injected_faults, partition_timelines
from harness.checkers.corruption import corruption_detect_rows
from harness.checkers.durability import analyse_durability
from harness.checkers.operator import leader_rebalance_rows
from harness.checkers.replay import REGISTRATION_CHANGES, controller_events, is_offline_reason, view_at
from harness.checkers.service import analyse_service
from harness.checkers.service_metrics import service_metric_rows
from harness.checkers.service_windows import SERVICE_METRICS
from harness.history.model import History

__all__ = ["compute_metrics", "METRIC_NAMES"]

METRIC_NAMES = ("detect_ms", "report_ms", "isr_shrink_ms", "leader_failover_ms", "client_unavailable_ms",
                "failure_timeout_shutdown_ms", "fencing_ms", "controller_failover_ms", "failover_report_ms",
                "corruption_detect_ms", "leader_rebalance_ms", "acked_lost", "duplicates") + SERVICE_METRICS
MS = 1_000_000


def _row(metric: str, value: float, *, unit: str = "ms", fault: InjectedFault | None = None, **kw: Any) -> dict:
    row = {"metric": metric, "value": float(value), "unit": unit, "topic": None, "partition": None,
           "node_id": None, "dir_id": None, "fault_id": None, "fault_kind": None, "queued_assignments": None}
    if fault is not None:
        row.update(fault_id=fault.fault_id, fault_kind=fault.label, node_id=fault.node_id)
    row.update({k: v for k, v in kw.items() if v is not None})
    return row


def _disk_metrics(f: InjectedFault, history: History, timelines, controller) -> list[dict]:
    rows: list[dict] = []
    b, T = f.node_id, f.ts_ns
    whole = f.dir_ref in WHOLE_NODE_DIRS
    if f.mode in NOT_A_FAILURE_MODES:   # a slow disk, a volatile cache: no dir fails (a power cut is a process fault)
        return rows
    offline = [e for e in history.events("dir_offline", source="node", node_id=b)
               if e.ts_ns >= T and (whole or str(e.get("dir_id")) in f.dir_ids)]
    if offline:
        rows.append(_row("detect_ms", (offline[0].ts_ns - T) / MS, fault=f, dir_id=str(offline[0].get("dir_id"))))
    view = view_at(history, T)
    affected = [p for p in view.partitions_of(b) if whole or p.dir_of(b) in f.dir_ids]
    affected_keys = {(p.topic, p.partition) for p in affected}
    for e in controller:
        if e.ts_ns < T:
            continue
        dirs = e.get("dirs", e.get("log_dirs", e.get("online_dirs")))
        if e.event in REGISTRATION_CHANGES and e.get("broker_id") == b and dirs is not None \
                and any(d not in dirs for d in f.dir_ids):
            rows.append(_row("report_ms", (e.ts_ns - T) / MS, fault=f))
            break
        if e.event == "partition_change" and is_offline_reason(e.get("reason")) \
                and (str(e.get("topic")), int(e.get("partition", -1))) in affected_keys \
                and e.get("isr") is not None and b not in e.get("isr"):
            rows.append(_row("report_ms", (e.ts_ns - T) / MS, fault=f))
            break
    for p in affected:
        states = timelines.get((p.topic, p.partition), [])
        shrink = first_after(states, T, lambda s: b not in s.isr)
        if shrink is not None:
            rows.append(_row("isr_shrink_ms", (shrink.ts_ns - T) / MS, fault=f, topic=p.topic, partition=p.partition,
                             dir_id=p.dir_of(b)))
        if p.leader == b:
            moved = first_after(states, T, lambda s: s.leader not in (b, -1))
            if moved is not None:
                rows.append(_row("leader_failover_ms", (moved.ts_ns - T) / MS, fault=f, topic=p.topic,
                                 partition=p.partition, dir_id=p.dir_of(b)))
    shutdown = [e for e in history.events("failure_timeout_shutdown", source="node", node_id=b) if e.ts_ns >= T]
    if shutdown:
        rows.append(_row("failure_timeout_shutdown_ms", (shutdown[0].ts_ns - T) / MS, fault=f,
                         dir_id=shutdown[0].get("dir_id")))
    return rows


def _controller_failover(f: InjectedFault, history: History) -> list[dict]:
    """A fault on the controller that was active at its time → the next one taking over."""
    active = [e for e in history.events("controller_active", source="node", role="controller") if e.ts_ns <= f.ts_ns]
    if not active or active[-1].node_id != f.node_id:
        return []   # not the active controller when hit
    after = [e for e in history.events("controller_active", source="node", role="controller")
             if e.ts_ns > f.ts_ns and e.node_id != f.node_id]
    return [_row("controller_failover_ms", (after[0].ts_ns - f.ts_ns) / MS, fault=f)] if after else []


def _across_failover(rows: list[dict], f: InjectedFault, history: History) -> list[dict]:
    out = []
    for row in rows:
        if row["metric"] != "report_ms":
            continue
        end = f.ts_ns + int(row["value"] * MS)
        if any(f.ts_ns <= e.ts_ns <= end for e in history.events("controller_active", source="node",
                                                                   role="controller")):
            out.append({**row, "metric": "failover_report_ms"})
    return out


def _unavailability(f: InjectedFault, oks: dict) -> list[dict]:
    rows = []
    for (topic, part), stamps in sorted(oks.items()):
        before = [t for t in stamps if t <= f.ts_ns]
        after = [t for t in stamps if t > f.ts_ns]
        if before and after:
            rows.append(_row("client_unavailable_ms", (after[0] - before[-1]) / MS, fault=f, topic=topic,
                             partition=part))
    return rows


def _fencing(history: History, controller) -> list[dict]:
    rows = []
    pending: dict[int, int] = {}
    for e in controller:
        b = e.get("broker_id")
        if b is None:
            continue
        b = int(b)
        if e.event == "registered":
            pending[b] = e.ts_ns
        elif e.event == "unfenced" and b in pending:
            reg = pending.pop(b)
            queued = [int(a.get("queued")) for a in history.events(
                ("assignment_queued", "assignment_sent", "assignment_acked"), source="node", node_id=b)
                if reg <= a.ts_ns <= e.ts_ns and a.get("queued") is not None]
            rows.append(_row("fencing_ms", (e.ts_ns - reg) / MS, node_id=b,
                             queued_assignments=max(queued) if queued else None))
    return rows


def compute_metrics(history: History, scenario: Any = None) -> list[dict]:
    """Every metric row the history supports (an interval whose end never happened gives no
    row; the checks say whether that is a failure). ``scenario`` supplies the service bounds."""
    timelines = partition_timelines(history)
    controller = controller_events(history)
    faults = injected_faults(history)
    oks: dict[tuple[str, int], list[int]] = {}
    for pair in history.produce_pairs():
        c = pair.completion
        if c is not None and c.type == "ok":
            topic = c.topic if c.topic is not None else pair.invoke.topic
            part = c.partition if c.partition is not None else pair.invoke.partition
            if topic is not None and part is not None:
                oks.setdefault((topic, part), []).append(c.ts_ns)
    for stamps in oks.values():
        stamps.sort()
    rows: list[dict] = []
    controllers = {e.node_id for e in history.events(source="node", role="controller")}
    for f in faults:
        if f.node_id is not None and f.node_id in controllers:
            rows += _controller_failover(f, history)
        elif f.kind == "disk" and f.node_id is not None:
            disk_rows = _disk_metrics(f, history, timelines, controller)
            rows += disk_rows + _across_failover(disk_rows, f, history)
        if f.kind in ("disk", "network", "process", "replace-disk", "move-replica", "admin"):
            rows += _unavailability(f, oks)
    rows += _fencing(history, controller)
    rows += corruption_detect_rows(history, faults, _row)
    rows += _group_metrics(history, faults)
    rows += leader_rebalance_rows(history, _row)
    if history.ops("produce"):
        report = analyse_durability(history)
        rows.append(_row("acked_lost", len(report.lost), unit="count"))
        rows.append(_row("duplicates", len(report.duplicates), unit="count"))
        rows += service_metric_rows(analyse_service(scenario, history), _row)
    return rows


def _group_metrics(history: History, faults: list[InjectedFault]) -> list[dict]:
    """``rebalance_ms`` per group member start/revocation → assignment; per fault,
    ``coordinator_failover_ms``: fault → the first ``group_coordinator_loaded`` on another
    broker naming a group of the workload (its coordinator is available again)."""
    from harness.checkers.group_consumption import rebalance_ms
    rows = [_row("rebalance_ms", r["value"]) for r in rebalance_ms(history)]
    groups = {e.get("group") for e in history.events(source="client") if e.get("group") is not None}
    if not groups:
        return rows
    loads = history.events("group_coordinator_loaded", source="node")
    for f in faults:
        after = [e for e in loads if e.ts_ns > f.ts_ns and e.node_id != f.node_id
                 and groups & set(e.get("groups") or ())]
        if after:
            rows.append(_row("coordinator_failover_ms", (after[0].ts_ns - f.ts_ns) / 1e6, fault=f,
                             node_id=after[0].node_id, partition=after[0].get("partition")))
    return rows
