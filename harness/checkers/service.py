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
request is answered when its slowest partition is done, in Kafka too). A partition is **outside** when no fault of the run has it in its domain (a
partition that merely gets a new leader, or shares a leader with moved ones, is outside; one the
metadata does not place at the fault counts as inside).

**Bounds** (per partition, from its baseline, scenario values ``expect.service_*``):
``bound(q) = max(factor × baseline q, baseline q + floor_ms)``, factor 2 and floor 100 ms by
default (the floor keeps a 3 ms baseline from turning scheduler noise into a verdict).

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
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from harness.checkers.base import UNKNOWN, CheckResult, Valid, merge_valid, valid_text
from harness.checkers.common import InjectedFault, injected_faults, partition_timelines
from harness.checkers.replay import LOST, MIGRATING, UNASSIGNED, MetadataView, view_at
from harness.history import History

__all__ = ["WARMUP_MS", "MIN_BASELINE_OPS", "WINDOW_MIN_MS", "WINDOW_OPS", "MIN_WINDOW_OPS",
           "DEGRADATION_WINDOW_MS", "INSTANT_FAULT_KINDS", "SERVICE_METRICS", "ServiceBounds", "Windows",
           "PartitionService",
           "ServiceAnalysis", "analyse_service", "check_service", "service_metric_rows", "percentile",
           "service_windows", "is_instant", "is_slow"]

WARMUP_MS = 1000            # the first second of the workload is not part of the baseline
MIN_BASELINE_OPS = 20       # fewer ops before the fault: the partition's verdict is unknown
WINDOW_MIN_MS = 1000        # rolling windows are at least this wide …
WINDOW_OPS = 10             # … and wide enough for this many ops at the baseline rate
MIN_WINDOW_OPS = 5          # a rolling window with fewer ops never counts as recovered
DEGRADATION_WINDOW_MS = 5000  # an outside partition degrades when its p50 over this long is beyond the bound
INSTANT_FAULT_KINDS = ("restart", "replace-disk", "move-replica")   # fault_kind labels without a heal
MS = 1_000_000
WINDOW_NAMES = ("before", "during", "after")
SERVICE_METRICS = tuple(f"produce_{w}_{q}_ms" for w in WINDOW_NAMES for q in ("p50", "p99")) + \
    tuple(f"produce_{w}_per_s" for w in WINDOW_NAMES) + \
    ("service_recovery_ms", "latency_degradation_ratio", "service_unrecovered")


@dataclass(frozen=True)
class ServiceBounds:
    """The scenario's service expectations (``expect.service_*``)."""

    recovery_within_ms: int = 5000
    latency_factor: float = 2.0
    latency_floor_ms: float = 100.0
    baseline_p50_max_ms: float = 500.0

    @staticmethod
    def of(scenario: Any) -> "ServiceBounds":
        e = getattr(scenario, "expect", None)
        d = ServiceBounds()
        if e is None:
            return d
        return ServiceBounds(recovery_within_ms=getattr(e, "service_recovery_within_ms", d.recovery_within_ms),
                             latency_factor=getattr(e, "service_latency_factor", d.latency_factor),
                             latency_floor_ms=getattr(e, "service_latency_floor_ms", d.latency_floor_ms),
                             baseline_p50_max_ms=getattr(e, "service_baseline_p50_max_ms", d.baseline_p50_max_ms))

    def bound(self, baseline_ms: float) -> float:
        return max(self.latency_factor * baseline_ms, baseline_ms + self.latency_floor_ms)


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (type 7), as the analysis computes it."""
    n = len(sorted_values)
    pos = (n - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    a, b = sorted_values[lo], sorted_values[hi]
    if lo == hi or a == b:
        return float(a)
    return float(a + (pos - lo) * (b - a))


# ---------------------------------------------------------------- ops and windows

@dataclass(frozen=True, slots=True)
class ProduceOp:
    invoke_ns: int
    complete_ns: int | None
    outcome: str            # ok | fail | info (no completion: info)

    @property
    def latency_ms(self) -> float | None:
        return None if self.complete_ns is None else (self.complete_ns - self.invoke_ns) / MS

    @property
    def judged_ms(self) -> float:
        """The latency a rolling window sees: a produce that was not acked got no service."""
        return self.latency_ms if self.outcome == "ok" and self.complete_ns is not None else math.inf


def produce_ops(history: History) -> dict[tuple[str, int], list[ProduceOp]]:
    out: dict[tuple[str, int], list[ProduceOp]] = {}
    for pair in history.produce_pairs():
        inv, done = pair.invoke, pair.completion
        topic = done.topic if done is not None and done.topic is not None else inv.topic
        part = done.partition if done is not None and done.partition is not None else inv.partition
        if topic is None or part is None:
            continue
        out.setdefault((str(topic), int(part)), []).append(
            ProduceOp(inv.ts_ns, None if done is None else done.ts_ns, pair.outcome))
    for ops in out.values():
        ops.sort(key=lambda o: o.invoke_ns)
    return out


def is_instant(f: InjectedFault) -> bool:
    return f.kind in ("replace-disk", "move-replica") or (f.kind == "process" and f.mode == "restart")


def is_slow(f: InjectedFault) -> bool:
    """Slowness that nothing routes around: the partitions it touches recover only at its heal."""
    return (f.kind == "disk" and f.mode == "delay") or (f.kind == "network" and f.mode in ("delay", "loss"))


@dataclass(frozen=True)
class Windows:
    start_ns: int                  # first produce invoke
    end_ns: int                    # just after the last produce invoke
    fault_ns: int | None           # first fault injected
    disturbance_end_ns: int | None  # None: the faults last to the end

    def span(self, name: str) -> tuple[int, int] | None:
        if name == "before":
            a, b = self.start_ns + WARMUP_MS * MS, self.fault_ns if self.fault_ns is not None else self.end_ns
        elif self.fault_ns is None:
            return None
        elif name == "during":
            a = self.fault_ns
            b = self.end_ns if self.disturbance_end_ns is None else min(self.disturbance_end_ns, self.end_ns)
        else:
            if self.disturbance_end_ns is None:
                return None
            a, b = max(self.disturbance_end_ns, self.fault_ns), self.end_ns
        return (a, b) if a < b else None

    def to_dict(self) -> dict[str, Any]:
        ref = self.fault_ns if self.fault_ns is not None else self.start_ns
        return {name: (None if s is None else [round((s[0] - ref) / MS, 3), round((s[1] - ref) / MS, 3)])
                for name in WINDOW_NAMES for s in [self.span(name)]} | {"relative_to": "first fault"}


def service_windows(ops: Iterable[ProduceOp], faults: list[InjectedFault]) -> Windows | None:
    invokes = [o.invoke_ns for o in ops]
    if not invokes:
        return None
    if not faults:
        return Windows(min(invokes), max(invokes) + 1, None, None)
    ends = []
    for f in faults:
        if f.healed_ns is not None:
            ends.append(f.healed_ns)
        elif is_instant(f):
            ends.append(f.ts_ns)
        else:
            ends.append(None)
    end = None if any(e is None for e in ends) else max(ends)
    return Windows(min(invokes), max(invokes) + 1, min(f.ts_ns for f in faults), end)


# ---------------------------------------------------------------- fault domains

def fault_domain(f: InjectedFault, view: MetadataView, timelines: dict | None = None) -> set[tuple[str, int]]:
    if f.kind == "move-replica":
        return {(str(f.attrs.get("topic")), int(f.attrs.get("partition", -1)))}
    nodes = {n for n in (f.node_id, f.attrs.get("peer_id")) if n is not None}
    out = set()
    if f.kind == "disk" and f.mode == "delay" and f.node_id is not None:
        # a produce request answers when its slowest partition is done (Kafka's too): whatever the
        # slow dir's broker leads while the dir is slow waits with the partitions on that dir
        end = f.healed_ns if f.healed_ns is not None else 2**63 - 1
        for key, p in view.partitions.items():
            if p.leader == f.node_id:
                out.add(key)
        for key, states in (timelines or {}).items():
            if any(f.ts_ns <= st.ts_ns < end and st.leader == f.node_id for st in states):
                out.add(key)
    for key, p in view.partitions.items():
        if not p.replicas:
            continue
        for b in nodes & set(p.replicas):
            if f.kind != "disk" or f.dir_ref in ("all", "metadata"):
                out.add(key)
                continue
            d = p.dir_of(b)
            if d is None or d in (UNASSIGNED, MIGRATING, LOST) or d in f.dir_ids:
                out.add(key)
    return out


# ---------------------------------------------------------------- per partition

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
                "bound_p99_ms": r(self.bound_p99_ms), "degradation_ratio": r(self.degradation_ratio),
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


class _Rolling:
    """Rolling windows ``[s, s + width)`` over one partition's ops (by invoke time)."""

    def __init__(self, ops: list[ProduceOp], width_ns: int) -> None:
        self.times = [o.invoke_ns for o in ops]
        self.lat = [o.judged_ms for o in ops]
        self.width = width_ns

    def values(self, s: int) -> list[float]:
        i = bisect.bisect_left(self.times, s)
        j = bisect.bisect_left(self.times, s + self.width)
        return sorted(self.lat[i:j])

    def starts(self, a: int, b: int) -> list[int]:
        """``a`` and every invoke time in ``(a, b − width]``: the complete windows in ``[a, b)``."""
        i = bisect.bisect_right(self.times, a)
        j = bisect.bisect_right(self.times, b - self.width)
        return ([a] if a + self.width <= b else []) + self.times[i:j]


def _recovery(roll: _Rolling, ref: int, end: int, bound99: float) -> int | None:
    """The first window start ≥ ``ref`` whose window is good (≥ MIN_WINDOW_OPS ops, p99 within
    the bound) and after which every window starting within one more width is good too."""
    starts = roll.starts(ref, end)
    good = []
    for s in starts:
        v = roll.values(s)
        good.append(len(v) >= MIN_WINDOW_OPS and percentile(v, 0.99) <= bound99)
    for i, s in enumerate(starts):
        if not good[i]:
            continue
        k = i + 1
        while k < len(starts) and starts[k] <= s + roll.width and good[k]:
            k += 1
        if k == len(starts) or starts[k] > s + roll.width:
            return s
    return None


def _slow_intervals(tp, faults, domains) -> list[tuple[int, int]]:
    out = []
    for f in faults:
        if is_slow(f) and tp in domains[f.fault_id]:
            out.append((f.ts_ns, f.healed_ns if f.healed_ns is not None else 2**63 - 1))
    return out


def _reference(t: int, slow: list[tuple[int, int]]) -> int:
    """Move a recovery reference past every slow interval of the partition that contains it."""
    moved = True
    while moved:
        moved = False
        for a, b in slow:
            if a <= t < b:
                t, moved = b, True
    return t


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

    def details(self) -> dict[str, Any]:
        b = self.bounds
        return {"bounds": {"recovery_within_ms": b.recovery_within_ms, "latency_factor": b.latency_factor,
                           "latency_floor_ms": b.latency_floor_ms, "baseline_p50_max_ms": b.baseline_p50_max_ms,
                           "warmup_ms": WARMUP_MS, "min_baseline_ops": MIN_BASELINE_OPS},
                "windows": None if self.windows is None else self.windows.to_dict(),
                "faults": [f.fault_id for f in self.faults],
                "outside": [p.name for p in self.partitions if p.outside],
                "not_judged": self.not_judged,
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
    for w in WINDOW_NAMES:
        s = _window_stats(everything, windows.span(w))
        if s is not None:
            pooled[w] = s
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
        _judge(p, ops, windows, faults, domains, bounds)
    judged = [p for p in out if p.name not in not_judged]
    if not faults:
        return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, UNKNOWN,
                               "no fault in the history: nothing to judge")
    if not judged:
        return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, UNKNOWN,
                               "no partition with a baseline before the first fault")
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
    return ServiceAnalysis(bounds, windows, out, pooled, faults, not_judged, valid, summary)


def _judge(p: PartitionService, ops: list[ProduceOp], windows: Windows, faults, domains, bounds) -> None:
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
    roll = _Rolling(ops, int(width_ms * MS))
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
    p.bound_p50_ms, p.bound_p99_ms = bounds.bound(base["p50_ms"]), bounds.bound(base["p99_ms"])
    during = windows.span("during")
    if during is not None:
        worst, worst_at = None, None
        slow_roll = _Rolling(ops, int(max(width_ms, DEGRADATION_WINDOW_MS) * MS))
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
    slow = _slow_intervals((p.topic, p.partition), faults, domains)
    bound_ns = bounds.recovery_within_ms * MS
    for f in faults:
        ref, s = f.ts_ns, None
        while True:
            ref = _reference(ref, slow)
            if ref >= windows.end_ns:
                break
            s = _recovery(roll, ref, windows.end_ns, p.bound_p99_ms)
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


# ---------------------------------------------------------------- metric rows

def service_metric_rows(a: ServiceAnalysis, row) -> list[dict]:
    """Rows of the ``metrics`` table; ``row(metric, value, unit=…, fault=…, **kw)`` builds one."""
    rows: list[dict] = []

    def windows_of(stats: dict[str, dict[str, Any]], **kw) -> None:
        for w, s in stats.items():
            for q in ("p50", "p99"):
                if s[f"{q}_ms"] is not None:
                    rows.append(row(f"produce_{w}_{q}_ms", s[f"{q}_ms"], **kw))
            rows.append(row(f"produce_{w}_per_s", s["per_s"], unit="per_s", **kw))

    windows_of(a.pooled)
    by_id = {f.fault_id: f for f in a.faults}
    unrecovered = 0
    worst_outside = None
    for p in a.partitions:
        kw = {"topic": p.topic, "partition": p.partition}
        windows_of(p.stats, **kw)
        if p.degradation_ratio is not None and math.isfinite(p.degradation_ratio):
            rows.append(row("latency_degradation_ratio", p.degradation_ratio, unit="ratio", **kw))
        if p.outside and p.degradation_ratio is not None:
            worst_outside = p.degradation_ratio if worst_outside is None else max(worst_outside, p.degradation_ratio)
        for fid, ms in p.recovery_ms.items():
            if ms is None:
                unrecovered += 1
            else:
                rows.append(row("service_recovery_ms", ms, fault=by_id[fid], **kw))
    if worst_outside is not None and math.isfinite(worst_outside):
        rows.append(row("latency_degradation_ratio", worst_outside, unit="ratio"))
    judged = [p for p in a.partitions if p.name not in a.not_judged and p.window_ms is not None]
    for f in a.faults:
        vals = [p.recovery_ms.get(f.fault_id) for p in judged if f.fault_id in p.recovery_ms]
        if vals and all(v is not None for v in vals):
            rows.append(row("service_recovery_ms", max(vals), fault=f))
    if a.faults and judged:
        rows.append(row("service_unrecovered", unrecovered, unit="count"))
    return rows
