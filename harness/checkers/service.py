"""Service: acks=all produce latency and throughput before, during and after the faults.

The other checks ask whether the cluster *recovered* (ISR, leaders, no loss); this one asks
whether it kept *serving*: every partition's produce latency, as the client saw it, measured
against that partition's own latency before the first fault. Pure.

**Time base.** A produce's latency is ``completion − invoke``, both stamped by the client
thread on the host (one clock, one process). Windows are cut at harness stamps (fault
injected / healed), taken on the same host clock. Node events are used only to learn where
each replica lived at the fault (the controller's replayed metadata), never to time latency.

**Windows** (one set per run; ``[a, b)`` over the op's *invoke* time; ``start``/``end`` =
the first / last produce invoke):

- ``before``: ``[start + WARMUP_MS, first fault)`` — the baseline (the first second of the
  workload, connection and metadata set-up, is left out).
- ``during``: ``[first fault, end of the disturbance)`` where the disturbance ends at the
  latest heal of a fault that has a duration; an instantaneous fault (``restart``,
  ``replace-disk``, ``move-replica``) ends where it starts; a fault never healed before
  ``end`` (a dir that stays failed) makes ``during`` last to ``end``.
- ``after``: ``[end of the disturbance, end)`` when the faults were healed before ``end``.

Throughput of a window = acked produces whose *completion* falls in it, per second.

**Fault domain.** A fault's domain is the set of partitions it touches directly, read from
the metadata at the fault: a disk fault on broker *b* — the partitions with a replica of *b*
in a faulted dir (every replica of *b* for ``all``/``metadata``; a replica whose dir is
unknown or reserved counts as in it); a process fault, network fault or disk replacement on
*b* — every partition with a replica on *b* (or on the network peer); a move — the moved
partition; a ``delay`` disk fault also holds what *b* leads while the dir is slow (a produce
request is answered when its slowest partition is done, in Kafka too), and what any other
broker leads while one of its partitions has an in-sync replica in the slow dir (its acks=all
answers wait for that follower until it leaves the ISR, and a client connection's answers go
out in request order, Kafka's too). A partition is **outside** when no fault of the run has it in its domain (a
partition that merely gets a new leader, or shares a leader with moved ones, is outside; one the
metadata does not place at the fault counts as inside).

**Bounds** (per partition, from its baseline, scenario values ``expect.service_*``):
``bound(q) = max(factor × baseline q, baseline q + floor_ms)``, factor 2 and floor 100 ms by
default (the floor keeps a 3 ms baseline from turning scheduler noise into a verdict). The p99
baseline is the partition's own or, when higher, the **peers' tail**: the p99 of every acked
produce in ``before`` to the partitions its leader led at the first fault, pooled (when they
hold ≥ ``PEER_MIN_OPS``). A partition's own baseline of a few dozen ops cannot estimate a p99
(with 20 ops it is their maximum): at S15's 1 op/s per partition it missed the leader's
occasional slow second that the pooled thousands show, so one such second after the fault put
the partition "not recovered" for a rolling window and a half — with 300 partitions some
partition did so in most runs, faulted or not (a fake fault placed in fault-free service was
"not recovered" in 4 of 8 such re-checks with the partition's own p99, 0 of 8 with the
peers'; docs/status.md). A partition that stays slower than its leader's normal tail still
fails; the p50 bound stays the partition's own.

**Rolling windows** are ``W`` wide, ``W = max(1 s, time for WINDOW_OPS ops at the
partition's baseline rate)``, and start at every op's invoke time. A failed or indeterminate
produce (``fail``/``info``, or no completion) counts as infinitely slow in a rolling window: it
got no service. With ~10–20 ops per window the rolling p99 is close to the window's maximum.

**Metrics** (per partition and pooled for the run): ``produce_{before,during,after}_p50_ms`` /
``_p99_ms`` (acked ops only), ``produce_{before,during,after}_per_s``;
``latency_degradation_ratio`` = the worst p50 over ``DEGRADATION_WINDOW_MS`` (5 s; the whole
window when ``during`` is shorter) in ``during`` ÷ the baseline p50 (the run's row: the worst
partition outside every domain) — a stall shorter than half of it (a shared host's scheduler,
a pause) does not count, a partition that stays slow does; ``service_recovery_ms`` per fault ×
partition = from the fault (for a ``delay``/``loss`` slowness in the partition's domain: from
its heal, nothing routes around a slow disk; likewise when such a slowness of the partition
starts before it recovered) to the first op from which the rolling p99 is back
within ``bound(p99)`` and stays there for one more window (0 = never left it; the run's row:
the slowest partition, only when all recovered); ``service_unrecovered`` (count of fault ×
partition pairs that never recovered).

**Verdict** per partition, composed false > unknown > true:

- fewer than ``MIN_BASELINE_OPS`` produces in ``before`` → unknown (too few samples); a partition
  whose first op comes after the first fault (a topic created mid-run) has no baseline and
  is listed under ``not_judged`` instead;
- baseline p50 (a produce not acked counting as infinitely slow) above
  ``expect.service_baseline_p50_max_ms`` → false: the cluster did not serve before anything
  failed (a relative bound cannot see that); the bounds themselves come from the acked ops;
- outside every domain and the worst 5 s p50 in ``during`` above ``bound(p50)`` → false;
- not recovered within ``expect.service_recovery_within_ms`` of a fault → false; never
  recovered and the history ends before the bound (plus two windows) → unknown.
No fault, or no produce, → unknown.

**The brokers' own share** (a diagnostic, never judged): the brokers' ``request_metrics``
events (each ``metrics.sample.window.ms``, the lab's 1 s) whose window lies inside a service
window give ``broker_produce_{before,during,after}_mean_ms`` — the count-weighted mean time a
broker took from a Produce request's arrival to its answer (waiting for the followers
included) — and ``_p99_ms``, the highest p99 of any broker in any of those seconds. A client
latency far above them was spent in the client's own queue (librdkafka: one partition per
request, at most 5 in flight), not in the brokers. The event stamps are the nodes' realtime
clock, the host's (:mod:`harness.checkers.broker_produce`).

The ops, windows, fault domains, bounds and rolling windows are measured in
:mod:`harness.checkers.service_windows`; this module judges them;
:mod:`harness.checkers.service_metrics` turns the analysis into rows of the ``metrics`` table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.checkers.base import UNKNOWN, CheckResult, Valid, merge_valid, valid_text
from harness.checkers.broker_produce import broker_produce_stats, broker_seconds
from harness.checkers.common import InjectedFault, injected_faults, partition_timelines
from harness.checkers.replay import view_at
from harness.checkers.service_windows import (DEGRADATION_WINDOW_MS, MIN_BASELINE_OPS, MIN_WINDOW_OPS, MS,
                                              PEER_MIN_OPS,
                                              WARMUP_MS, WINDOW_MIN_MS, WINDOW_NAMES, WINDOW_OPS,
                                              ProduceOp, Rolling, ServiceBounds, Windows, fault_domain, is_slow,
                                              percentile, produce_ops, recovery_reference, recovery_start,
                                              service_windows, slow_intervals)
from harness.history.model import History

__all__ = ["PartitionService", "ServiceAnalysis", "analyse_service", "check_service"]


@dataclass
class PartitionService:
    topic: str
    partition: int
    outside: bool
    faults: list[str]                                   # ids of the faults whose domain holds it
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)   # window -> n, ok, failed, p50, p99, per_s
    window_ms: float | None = None
    bound_p50_ms: float | None = None
    bound_p99_ms: float | None = None
    peer_p99_ms: float | None = None                    # the baseline p99 of its leader's partitions, pooled
    degradation_ratio: float | None = None
    worst_p50_ms: float | None = None
    worst_at_ms: float | None = None                    # start of the worst window, ms after the first fault
    recovery_ms: dict[str, float | None] = field(default_factory=dict)
    # the part of recovery_ms judged against the bound: from the fault, or from the heal of a
    # slowness of the partition that held it back
    recovery_judged_ms: dict[str, float] = field(default_factory=dict)
    valid: Valid = True
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_dict(self) -> dict[str, Any]:
        r = lambda v: None if v is None else (round(v, 3) if math.isfinite(v) else "inf")  # noqa: E731
        return {"outside": self.outside, "faults": self.faults,
                "stats": {w: {k: (r(v) if isinstance(v, float) else v) for k, v in s.items()}
                          for w, s in self.stats.items()},
                "window_ms": r(self.window_ms), "bound_p50_ms": r(self.bound_p50_ms),
                "bound_p99_ms": r(self.bound_p99_ms), "peer_p99_ms": r(self.peer_p99_ms),
                "degradation_ratio": r(self.degradation_ratio),
                "worst_p50_ms": r(self.worst_p50_ms), "worst_at_ms": r(self.worst_at_ms),
                "recovery_ms": {k: r(v) for k, v in self.recovery_ms.items()},
                "recovery_judged_ms": {k: r(v) for k, v in self.recovery_judged_ms.items()},
                "valid": valid_text(self.valid), "problems": self.problems}


def _window_stats(ops: list[ProduceOp], span: tuple[int, int] | None) -> dict[str, Any] | None:
    if span is None:
        return None
    a, b = span
    inside = [o for o in ops if a <= o.invoke_ns < b]
    lat = sorted(o.latency_ms for o in inside if o.outcome == "ok" and o.complete_ns is not None)
    acked = sum(1 for o in ops if o.outcome == "ok" and o.complete_ns is not None and a <= o.complete_ns < b)
    return {"n": len(inside), "ok": len(lat), "failed": len(inside) - len(lat),
            "p50_ms": percentile(lat, 0.5) if lat else None, "p99_ms": percentile(lat, 0.99) if lat else None,
            "per_s": acked / ((b - a) / 1e9), "span_ms": (b - a) / MS}




@dataclass
class ServiceAnalysis:
    bounds: ServiceBounds
    windows: Windows | None
    partitions: list[PartitionService]
    pooled: dict[str, dict[str, Any]]
    faults: list[InjectedFault]
    not_judged: dict[str, str]
    valid: Valid
    summary: str
    brokers: dict[str, dict[str, Any]] = field(default_factory=dict)   # window -> broker_produce_stats

    def details(self) -> dict[str, Any]:
        b = self.bounds
        return {"bounds": {"recovery_within_ms": b.recovery_within_ms, "latency_factor": b.latency_factor,
                           "latency_floor_ms": b.latency_floor_ms, "baseline_p50_max_ms": b.baseline_p50_max_ms,
                           "warmup_ms": WARMUP_MS, "min_baseline_ops": MIN_BASELINE_OPS},
                "windows": None if self.windows is None else self.windows.to_dict(),
                "faults": [f.fault_id for f in self.faults],
                "outside": [p.name for p in self.partitions if p.outside],
                "not_judged": self.not_judged,
                "broker_produce": {w: {k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()}
                                   for w, s in self.brokers.items()},
                "partitions": {p.name: p.to_dict() for p in self.partitions}}


def analyse_service(scenario: Any, history: History) -> ServiceAnalysis:
    bounds = ServiceBounds.of(scenario)
    ops_by = produce_ops(history)
    faults = injected_faults(history)
    windows = service_windows([o for ops in ops_by.values() for o in ops], faults)
    if windows is None:
        return ServiceAnalysis(bounds, None, [], {}, faults, {}, UNKNOWN, "no produce ops: nothing to judge")
    views = {f.fault_id: view_at(history, f.ts_ns) for f in faults}
    timelines = partition_timelines(history) if any(is_slow(f) for f in faults) else {}
    domains = {f.fault_id: fault_domain(f, views[f.fault_id], timelines) for f in faults}
    touched = set().union(*domains.values()) if domains else set()
    placed = set().union(*(v.partitions for v in views.values())) if views else set()
    pooled = {}
    everything = sorted((o for ops in ops_by.values() for o in ops), key=lambda o: o.invoke_ns)
    brokers = {}
    seconds = broker_seconds(history)
    for w in WINDOW_NAMES:
        s = _window_stats(everything, windows.span(w))
        if s is not None:
            pooled[w] = s
        b = broker_produce_stats(seconds, windows.span(w))
        if b is not None:
            brokers[w] = b
    peer_p99 = _peer_baseline_p99(ops_by, windows, views[faults[0].fault_id]) if faults else {}
    out: list[PartitionService] = []
    not_judged: dict[str, str] = {}
    for tp in sorted(ops_by):
        ops = ops_by[tp]
        p = PartitionService(tp[0], tp[1], outside=tp not in touched and tp in placed,
                             faults=[f.fault_id for f in faults if tp in domains[f.fault_id]])
        for w in WINDOW_NAMES:
            s = _window_stats(ops, windows.span(w))
            if s is not None:
                p.stats[w] = s
        out.append(p)
        if not faults:
            continue
        if ops[0].invoke_ns >= windows.fault_ns:
            not_judged[p.name] = "first produced after the first fault: no baseline"
            p.valid = UNKNOWN
            continue
        _judge(p, ops, windows, faults, domains, bounds, peer_p99.get(tp))
    judged = [p for p in out if p.name not in not_judged]
    if not faults:
        return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, UNKNOWN,
                               "no fault in the history: nothing to judge", brokers)
    if not judged:
        return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, UNKNOWN,
                               "no partition with a baseline before the first fault", brokers)
    valid = merge_valid(p.valid for p in judged)
    problems = [f"{p.name}{'' if not p.outside else ' (outside)'}: {msg}" for p in judged for msg in p.problems]
    if problems:
        summary = "; ".join(problems[:4]) + (f"; … {len(problems) - 4} more" if len(problems) > 4 else "")
    else:
        rec = [v for p in judged for v in p.recovery_ms.values() if v is not None]
        held = [(p.recovery_judged_ms[k], v) for p in judged for k, v in p.recovery_ms.items()
                if v is not None and p.recovery_judged_ms.get(k) != v]
        outside = [p for p in judged if p.outside]
        worst = max((p.degradation_ratio for p in outside if p.degradation_ratio is not None), default=None)
        summary = (f"{len(judged)} partitions served: recovered within {max(rec, default=0):.0f} ms of the fault"
                   + (f" ({len(held)} held by a slow dir: within {max(h for h, _ in held):.0f} ms of its heal)"
                      if held else "")
                   + f" (bound {bounds.recovery_within_ms} ms)" +
                   (f"; {len(outside)} outside the faults, worst p50 ×{worst:.2f}" if worst is not None else ""))
    return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, valid, summary, brokers)


def _peer_baseline_p99(ops_by: dict[tuple[str, int], list[ProduceOp]], windows: Windows,
                       view) -> dict[tuple[str, int], float]:
    """Per partition, the baseline p99 of every acked produce to the partitions its broker led at
    the first fault (its peers, itself included): the tail of the service that leader gave."""
    span = windows.span("before")
    if span is None:
        return {}
    by_leader: dict[int, list[float]] = {}
    leader_of: dict[tuple[str, int], int] = {}
    for tp, ops in ops_by.items():
        pv = view.partitions.get(tp)
        if pv is None or pv.leader is None or pv.leader < 0:
            continue
        leader_of[tp] = pv.leader
        by_leader.setdefault(pv.leader, []).extend(
            o.latency_ms for o in ops if span[0] <= o.invoke_ns < span[1] and o.outcome == "ok"
            and o.complete_ns is not None)
    p99 = {b: percentile(sorted(v), 0.99) for b, v in by_leader.items() if len(v) >= PEER_MIN_OPS}
    return {tp: p99[b] for tp, b in leader_of.items() if b in p99}


def _judge(p: PartitionService, ops: list[ProduceOp], windows: Windows, faults, domains, bounds,
           peer_p99: float | None = None) -> None:
    verdicts: list[Valid] = []
    base = p.stats.get("before")
    if base is None or base["n"] < MIN_BASELINE_OPS:
        n = 0 if base is None else base["n"]
        p.problems.append(f"{n} produces before the fault (< {MIN_BASELINE_OPS}): too few samples")
        p.valid = UNKNOWN
        return
    span = windows.span("before")
    rate_per_ms = base["n"] / ((span[1] - span[0]) / MS)
    width_ms = max(WINDOW_MIN_MS, WINDOW_OPS / rate_per_ms) if rate_per_ms > 0 else WINDOW_MIN_MS
    p.window_ms = width_ms
    roll = Rolling(ops, int(width_ms * MS))
    # the baseline judged against the SLO counts a produce that was not acked as infinitely slow
    judged = sorted(o.judged_ms for o in ops if span[0] <= o.invoke_ns < span[1])
    served_p50 = percentile(judged, 0.5)
    if served_p50 > bounds.baseline_p50_max_ms:
        what = (f"{base['failed']} of {base['n']} produces not acked" if math.isinf(served_p50)
                else f"baseline p50 {served_p50:.0f} ms")
        p.problems.append(f"{what} before any fault (p50 bound {bounds.baseline_p50_max_ms:.0f} ms)")
        verdicts.append(False)
    if base["ok"] == 0:
        p.valid = merge_valid(verdicts)
        return
    p.peer_p99_ms = peer_p99
    ref99 = base["p99_ms"] if peer_p99 is None else max(base["p99_ms"], peer_p99)
    p.bound_p50_ms, p.bound_p99_ms = bounds.bound(base["p50_ms"]), bounds.bound(ref99)
    during = windows.span("during")
    if during is not None:
        worst, worst_at = None, None
        slow_roll = Rolling(ops, int(max(width_ms, DEGRADATION_WINDOW_MS) * MS))
        starts = slow_roll.starts(*during) or [during[0]]
        for s in starts:
            v = slow_roll.values(s) if s + slow_roll.width <= during[1] else sorted(
                o.judged_ms for o in ops if during[0] <= o.invoke_ns < during[1])
            if len(v) < MIN_WINDOW_OPS:
                continue
            q = percentile(v, 0.5)
            if worst is None or q > worst:
                worst, worst_at = q, s
        if worst is not None:
            p.worst_p50_ms = worst
            p.worst_at_ms = (worst_at - windows.fault_ns) / MS
            p.degradation_ratio = worst / base["p50_ms"] if base["p50_ms"] > 0 else math.inf
            if p.outside and worst > p.bound_p50_ms:
                shown = "failing" if math.isinf(worst) else f"{worst:.0f} ms"
                p.problems.append(f"p50 {shown} at +{p.worst_at_ms / 1000:.1f} s, beyond {p.bound_p50_ms:.0f} ms "
                                  f"(baseline {base['p50_ms']:.0f} ms)")
                verdicts.append(False)
            elif p.outside:
                verdicts.append(True)
        elif p.outside:
            p.problems.append("too few ops during the faults to judge")
            verdicts.append(UNKNOWN)
    slow = slow_intervals((p.topic, p.partition), faults, domains)
    bound_ns = bounds.recovery_within_ms * MS
    for f in faults:
        ref, s = f.ts_ns, None
        while True:
            ref = recovery_reference(ref, slow)
            if ref >= windows.end_ns:
                break
            s = recovery_start(roll, ref, windows.end_ns, p.bound_p99_ms)
            # a slowness of the partition that starts before it recovered postpones the reference
            later = [b for a, b in slow if ref < a and (s is None or a < s)]
            if not later:
                break
            ref = min(later)
        if ref >= windows.end_ns:
            if ref != f.ts_ns:
                p.recovery_ms[f.fault_id] = None
                p.problems.append(f"{f.fault_id}: its slowness lasts past the workload, recovery not observable")
                verdicts.append(UNKNOWN)
            continue
        if s is not None:
            p.recovery_ms[f.fault_id] = (s - f.ts_ns) / MS
            p.recovery_judged_ms[f.fault_id] = (s - ref) / MS
            if s - ref > bound_ns:
                p.problems.append(f"{f.fault_id}: rolling p99 back within {p.bound_p99_ms:.0f} ms only after "
                                  f"{(s - ref) / MS:.0f} ms (bound {bounds.recovery_within_ms} ms)")
                verdicts.append(False)
            else:
                verdicts.append(True)
            continue
        p.recovery_ms[f.fault_id] = None
        seen_ms = (windows.end_ns - ref) / MS
        if windows.end_ns - ref >= bound_ns + 2 * roll.width:
            p.problems.append(f"{f.fault_id}: rolling p99 never back within {p.bound_p99_ms:.0f} ms "
                              f"in {seen_ms:.0f} ms (bound {bounds.recovery_within_ms} ms)")
            verdicts.append(False)
        else:
            p.problems.append(f"{f.fault_id}: not recovered in the {seen_ms:.0f} ms left of the workload")
            verdicts.append(UNKNOWN)
    p.valid = merge_valid(verdicts)


def check_service(scenario, history: History) -> CheckResult:
    a = analyse_service(scenario, history)
    return CheckResult("service", a.valid, a.summary, a.details())
