"""Generate result runs with KNOWN distributions, in exactly the ``harness.results.schema`` layout.

Used by the analysis tests (to assert percentiles, joins and the regression gate against a
truth computed independently) and by ``bench/analysis_bench.py`` (any number of event rows).
Everything is drawn from one seeded ``numpy.random.Generator``: the same spec and seed give
the same files.

One synthetic run = one fault on one broker's dir ``d1`` holding ``partitions`` partitions,
of which the first ``leader_partitions`` are led by that broker. Times (ms after the fault):

* ``detect``   = D ~ ``detect_ms``                       (broker ``dir_offline``)
* ``report``   = D + R, R ~ ``report_delta_ms``           (controller commits; ``report_ms``)
* ISR shrink / leader change of partition p = report + J_p, J_p ~ ``partition_jitter_ms``
* client recovery of p = (its ISR shrink or leader change) + C_p, C_p ~ ``client_retry_ms``;
  ``client_unavailable_ms`` = first ok completion after the fault − last ok completion before
* with ``timeout_shutdown``: ``failure_timeout_shutdown`` at ldft + E, E ~ ``timeout_error_ms``
  (the fault is then healed 1 s after the shutdown at the earliest)
* ``fencing_ms`` ~ ``fencing_ms`` at start-up, with ``queued_assignments`` ~ U{0..partitions}

``Dist("grid", lo, hi)`` spreads a group's values evenly over [lo, hi] (shuffled across its
runs) so that every linear-interpolation percentile is known in closed form:
``q(p) = lo + p·(hi − lo)``. Per-group sampling: all values of one
(scenario, backend, config, metric) group are drawn at once.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.results import tables as rio
from harness.results import schema as rs

CONTROLLER_ID = 3000
BROKERS = (1, 2, 3)
FAILED_BROKER = 1
PER_PARTITION = ("partition_jitter_ms", "client_retry_ms")
BACKGROUND_EVENTS = ("heartbeat_sent", "fetch_served", "assignment_sent", "probe_ok", "segment_rolled")


@dataclasses.dataclass(frozen=True)
class Dist:
    """``grid(lo, hi)``, ``lognormal(median, sigma)``, ``normal(mean, sd)`` or ``const(v)``."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "grid":
            values = np.linspace(self.a, self.b, n) if n > 1 else np.array([self.a], dtype=float)
            return rng.permutation(values)
        if self.kind == "lognormal":
            return rng.lognormal(np.log(self.a), self.b, n)
        if self.kind == "normal":
            return rng.normal(self.a, self.b, n)
        if self.kind == "const":
            return np.full(n, float(self.a))
        raise ValueError(f"Dist.kind: unknown kind {self.kind!r} (grid, lognormal, normal, const)")


DEFAULT_DISTS: Mapping[str, Dist] = {
    "detect_ms": Dist("lognormal", 30.0, 0.4),
    "report_delta_ms": Dist("lognormal", 250.0, 0.3),
    "partition_jitter_ms": Dist("lognormal", 4.0, 0.5),
    "client_retry_ms": Dist("lognormal", 120.0, 0.5),
    "timeout_error_ms": Dist("normal", 250.0, 150.0),
    "fencing_ms": Dist("lognormal", 900.0, 0.3),
}


@dataclasses.dataclass(frozen=True)
class ScenarioSpec:
    name: str
    backends: tuple[str, ...] = ("fuse",)
    configs: tuple[int, ...] = (3000,)  # log.dir.failure.timeout.ms values
    runs: int = 4  # per backend × config
    partitions: int = 4
    leader_partitions: int = 2
    timeout_shutdown: bool = False
    dists: Mapping[str, Dist] = dataclasses.field(default_factory=dict)
    backend_scale: Mapping[str, float] = dataclasses.field(default_factory=lambda: {"dm": 0.8})
    duration_ms: int = 8000
    fault_at_ms: int = 2000
    fault_duration_ms: int = 5000
    op_interval_ms: int = 50
    background_events: int = 0  # extra node events per run (benchmark size)
    acked_lost: int = 0
    duplicates: int = 0

    def dist(self, name: str) -> Dist:
        return self.dists.get(name, DEFAULT_DISTS[name])


@dataclasses.dataclass
class Truth:
    """What the generator put in: one DataFrame each, in the results tables' column names."""

    metrics: pd.DataFrame  # every metrics row written
    windows: pd.DataFrame  # run_id, scenario, fault_id, start_ns, end_ns
    unavailability: pd.DataFrame  # run_id, fault_id, topic, partition, last_ok_ns, first_ok_ns
    run_ids: list[str]
    event_rows: int
    client_op_rows: int


def generate(out_dir: str | Path, specs: list[ScenarioSpec], *, seed: int = 0,
             base_ns: int = 1_800_000_000_000_000_000) -> Truth:
    out = Path(out_dir)
    rng = np.random.default_rng(seed)
    metric_rows: list[dict] = []
    windows: list[dict] = []
    unavail: list[dict] = []
    run_ids: list[str] = []
    n_events = n_ops = 0
    run_index = 0
    for spec in specs:
        for backend in spec.backends:
            scale = spec.backend_scale.get(backend, 1.0)
            for ldft in spec.configs:
                R, P = spec.runs, spec.partitions
                draws = {name: spec.dist(name).sample(rng, R * (P if name in PER_PARTITION else 1))
                         for name in DEFAULT_DISTS}
                for name in ("detect_ms", "report_delta_ms", "partition_jitter_ms", "client_retry_ms"):
                    draws[name] = draws[name] * scale
                for r in range(R):
                    run_id = f"{spec.name}-{backend}-{ldft}-{r:04d}-s{seed}"
                    start_ns = base_ns + run_index * 3_600_000_000_000
                    run_index += 1
                    res = _one_run(out / run_id, spec, rng, run_id=run_id, backend=backend, ldft=ldft,
                                   start_ns=start_ns, seed=seed,
                                   d={k: (v[r * P:(r + 1) * P] if k in PER_PARTITION else float(v[r]))
                                      for k, v in draws.items()})
                    metric_rows += res["metrics"]
                    windows.append(res["window"])
                    unavail += res["unavailability"]
                    n_events += res["events"]
                    n_ops += res["ops"]
                    run_ids.append(run_id)
    return Truth(metrics=pd.DataFrame(metric_rows), windows=pd.DataFrame(windows),
                 unavailability=pd.DataFrame(unavail), run_ids=run_ids, event_rows=n_events,
                 client_op_rows=n_ops)


def _ns(ms: float) -> int:
    return int(round(float(ms) * 1_000_000))


def _one_run(run_dir: Path, spec: ScenarioSpec, rng: np.random.Generator, *, run_id: str, backend: str,
             ldft: int, start_ns: int, seed: int, d: dict) -> dict:
    scenario = spec.name
    label = rs.config_label(log_dir_failure_timeout_ms=ldft)
    t0 = start_ns + _ns(spec.fault_at_ms)
    shut_ns = _ns(ldft + d["timeout_error_ms"]) if spec.timeout_shutdown else 0
    # the fault lasts until the broker has shut down (S4), the run 1 s beyond the heal
    t_heal = t0 + max(_ns(spec.fault_duration_ms), shut_ns + _ns(1000))
    end_ns = max(start_ns + _ns(spec.duration_ms), t_heal + _ns(1000))
    fault_id = f"{run_id}-f1"
    dir_id = f"dir-{FAILED_BROKER}-d1"
    topic = "t"
    common = dict(run_id=run_id, scenario=scenario)
    metric_common = dict(common, backend=backend, fidelity=f"block-eio-{backend}", fault_id=fault_id,
                         fault_kind="error", log_dir_failure_timeout_ms=ldft, config=label,
                         broker_heartbeat_interval_ms=500, broker_session_timeout_ms=9000)
    events: list[dict] = []

    def ev(source, ts, event, node_id=None, **fields):
        obj = {"ts_ns": int(ts), "event": event, **({"node_id": node_id} if node_id is not None else {}), **fields}
        events.append(rs.event_row(obj, run_id=run_id, scenario=scenario, source=source))

    metrics: list[dict] = []

    def metric(name, ms_or_count, unit="ms", **kw):
        metrics.append(dict(metric_common, metric=name, value=float(ms_or_count), unit=unit, **kw))

    # start-up: registration → unfenced
    reg = start_ns + _ns(100)
    fencing_ns = _ns(max(d["fencing_ms"], 0.0))
    queued = int(rng.integers(0, spec.partitions + 1))
    for b in BROKERS:
        ev("node", reg, "registered", b, role="broker")
    ev("node", reg + fencing_ns, "unfenced", FAILED_BROKER, role="broker")
    metric("fencing_ms", fencing_ns / 1e6, node_id=FAILED_BROKER, queued_assignments=queued)

    ev("harness", t0, "fault_injected", FAILED_BROKER, fault_id=fault_id, fault_kind="error", dir_id=dir_id,
       path=f"/var/lib/kafka/d1")
    ev("harness", t0 + 200_000, "first_io_error_observed", FAILED_BROKER, fault_id=fault_id, dir_id=dir_id)
    detect_ns = _ns(d["detect_ms"])
    report_ns = detect_ns + _ns(d["report_delta_ms"])
    ev("node", t0 + detect_ns, "dir_offline", FAILED_BROKER, role="broker", dir_id=dir_id, errno=5, op="write",
       path="/var/lib/kafka/d1")
    ev("node", t0 + (detect_ns + report_ns) // 2, "dir_failure_reported", FAILED_BROKER, role="broker", dir_id=dir_id)
    ev("node", t0 + report_ns + 1_000_000, "dir_failure_acked", FAILED_BROKER, role="broker", dir_id=dir_id)
    metric("detect_ms", detect_ns / 1e6, node_id=FAILED_BROKER, dir_id=dir_id)
    for b in BROKERS:   # the listeners' periodic request metrics (a measurement, not a milestone)
        ev("node", t0 + _ns(1000), "request_metrics", b, role="broker", listener="PLAINTEXT", window_ms=1000.0,
           apis={"0": {"count": 100, "total": {"mean": 4.0, "p50": 3.4, "p99": 11.6, "max": 14.0}}})
    metric("report_ms", report_ns / 1e6, node_id=FAILED_BROKER, dir_id=dir_id)

    recover_ns = []
    for p in range(spec.partitions):
        change_ns = report_ns + _ns(d["partition_jitter_ms"][p])
        leader_moves = p < spec.leader_partitions
        new_leader = 2 if leader_moves else (2 + p % 2)
        ev("node", t0 + change_ns, "partition_change", CONTROLLER_ID, role="controller", topic=topic,
           partition=p, leader=new_leader, isr=[2, 3], reason="dir_offline")
        metric("isr_shrink_ms", change_ns / 1e6, topic=topic, partition=p, node_id=FAILED_BROKER, dir_id=dir_id)
        if leader_moves:
            metric("leader_failover_ms", change_ns / 1e6, topic=topic, partition=p, node_id=FAILED_BROKER,
                   dir_id=dir_id)
            ev("node", t0 + change_ns + 2_000_000, "leader_change", 2, role="broker", topic=topic, partition=p,
               leader=2)
        ev("node", t0 + change_ns + 3_000_000, "isr_change", new_leader, role="broker", topic=topic, partition=p,
           isr=[2, 3])
        recover_ns.append(change_ns + _ns(d["client_retry_ms"][p]))

    if spec.timeout_shutdown:
        ev("node", t0 + shut_ns, "failure_timeout_shutdown", FAILED_BROKER, role="broker", dir_id=dir_id,
           reason="log.dir.failure.timeout.ms elapsed")
        metric("failure_timeout_shutdown_ms", shut_ns / 1e6, node_id=FAILED_BROKER, dir_id=dir_id)
    ev("harness", t_heal, "fault_healed", FAILED_BROKER, fault_id=fault_id, fault_kind="error", dir_id=dir_id)

    # client ops: one produce per partition every op_interval_ms, 2 ms latency; outage per partition
    op_rows, unavail = _client_ops(spec, run_id, scenario, topic, start_ns, end_ns, t0, recover_ns, fault_id)
    for u in unavail:
        metric("client_unavailable_ms", (u["first_ok_ns"] - u["last_ok_ns"]) / 1e6, topic=topic,
               partition=u["partition"])
    metric("acked_lost", spec.acked_lost, unit="count")
    metric("duplicates", spec.duplicates, unit="count")

    rio.write_table(run_dir, "metrics", metrics)
    events_table = rio.to_table("events", events)
    if spec.background_events:
        events_table = pa.concat_tables([events_table, _background(spec, rng, run_id, scenario, start_ns, end_ns)])
    rio.write_table(run_dir, "events", events_table)
    rio.write_table(run_dir, "client_ops", op_rows)
    rio.write_table(run_dir, "checks", [dict(common, checker=c, valid="true" if spec.acked_lost == 0 else "false",
                                            details=json.dumps({"synthetic": True}))
                                       for c in ("durability", "failover", "liveness")])
    ts = np.arange(start_ns, end_ns, 1_000_000_000, dtype=np.int64)
    rio.write_table(run_dir, "resources", pa.table({
        "run_id": [run_id] * (len(ts) * len(BROKERS)), "scenario": [scenario] * (len(ts) * len(BROKERS)),
        "node_id": pa.array(np.repeat(np.array(BROKERS, dtype=np.int32), len(ts))),
        "ts_ns": np.tile(ts, len(BROKERS)),
        "cpu_percent": rng.uniform(1, 30, len(ts) * len(BROKERS)),
        "rss_bytes": rng.integers(50_000_000, 80_000_000, len(ts) * len(BROKERS)),
    }))
    rio.write_run_json(run_dir, rs.RunInfo(
        run_id=run_id, scenario=scenario, seed=seed, fault_backend=backend,
        fidelity={"dm": "block-eio-dm", "fuse": "block-eio-fuse"}.get(backend, backend),
        scenario_value={"id": scenario, "synthetic": True, "partitions": spec.partitions},
        versions={"jbodlab": "synthetic", "git_sha": "synthetic"}, host={"synthetic": True},
        configs={str(b): {"log.dir.failure.timeout.ms": ldft} for b in BROKERS},
        started_ns=start_ns, ended_ns=end_ns))
    window = dict(common, fault_id=fault_id, start_ns=t0, end_ns=t_heal)
    return {"metrics": metrics, "window": window, "unavailability": unavail,
            "events": events_table.num_rows, "ops": op_rows.num_rows}


def _client_ops(spec: ScenarioSpec, run_id: str, scenario: str, topic: str, start_ns: int, end: int, t0: int,
                recover_ns: list[int], fault_id: str) -> tuple[pa.Table, list[dict]]:
    interval = _ns(spec.op_interval_ms)
    latency = 2_000_000
    slots = np.arange(start_ns, end - latency, interval, dtype=np.int64)
    cols: dict[str, list] = {k: [] for k in ("partition", "offset", "value_id", "outcome", "ts_invoke_ns",
                                             "ts_complete_ns", "error")}
    unavail = []
    for p, rec in enumerate(recover_ns):
        recovered = t0 + rec
        complete = slots + latency
        before = complete <= t0
        failed = (complete > t0) & (complete < recovered)
        after = complete > recovered
        inv = np.concatenate([slots[before], slots[failed], [recovered - latency], slots[after]])
        comp = np.concatenate([complete[before], complete[failed], [recovered], complete[after]])
        outcome = (["ok"] * int(before.sum()) + ["fail"] * int(failed.sum()) + ["ok"] * (1 + int(after.sum())))
        n_ok_before = int(before.sum())
        offsets = np.full(len(inv), -1, dtype=np.int64)
        ok_mask = np.array([o == "ok" for o in outcome])
        offsets[ok_mask] = np.arange(int(ok_mask.sum()))
        cols["partition"] += [p] * len(inv)
        cols["offset"] += [None if o < 0 else int(o) for o in offsets]
        cols["value_id"] += [f"{run_id}/{p}/{i}" for i in range(len(inv))]
        cols["outcome"] += outcome
        cols["ts_invoke_ns"] += inv.tolist()
        cols["ts_complete_ns"] += comp.tolist()
        cols["error"] += [None if o == "ok" else "NOT_LEADER_OR_FOLLOWER" for o in outcome]
        last_ok = int(complete[before][-1]) if n_ok_before else None
        unavail.append(dict(run_id=run_id, scenario=scenario, fault_id=fault_id, topic=topic, partition=p,
                            last_ok_ns=last_ok, first_ok_ns=int(recovered)))
    n = len(cols["partition"])
    table = pa.table({"run_id": [run_id] * n, "scenario": [scenario] * n, "client_id": ["producer-0"] * n,
                      "op": ["produce"] * n, "topic": [topic] * n, **cols})
    return table, unavail


def _background(spec: ScenarioSpec, rng: np.random.Generator, run_id: str, scenario: str, start_ns: int,
                end_ns: int) -> pa.Table:
    n = spec.background_events
    ts = rng.integers(start_ns, end_ns, n, dtype=np.int64)
    names = np.array(BACKGROUND_EVENTS)[rng.integers(0, len(BACKGROUND_EVENTS), n)]
    node = rng.choice(np.array(BROKERS + (CONTROLLER_ID,), dtype=np.int32), n)
    schema = rs.EVENTS
    cols = {f.name: pa.nulls(n, f.type) for f in schema}
    cols.update({
        "run_id": pa.array(np.full(n, run_id, dtype=object), pa.string()),
        "scenario": pa.array(np.full(n, scenario, dtype=object), pa.string()),
        "source": pa.array(np.full(n, "node", dtype=object), pa.string()),
        "node_id": pa.array(node, pa.int32()),
        "ts_ns": pa.array(ts, pa.int64()),
        "event": pa.array(names.astype(object), pa.string()),
        "attrs": pa.array(np.full(n, "{}", dtype=object), pa.string()),
        "role": pa.array(np.where(node == CONTROLLER_ID, "controller", "broker").astype(object), pa.string()),
    })
    return pa.table(cols, schema=schema)
