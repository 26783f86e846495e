"""The measuring side of the ``service`` check: produce ops, the run's windows, fault domains,
bounds and rolling windows (the definitions are in :mod:`harness.checkers.service`). Pure."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Iterable

from harness.checkers.common import WHOLE_NODE_DIRS, InjectedFault
from harness.checkers.replay import LOST, MIGRATING, UNASSIGNED, MetadataView
from harness.history.model import History

__all__ = ["WARMUP_MS", "MIN_BASELINE_OPS", "WINDOW_MIN_MS", "WINDOW_OPS", "MIN_WINDOW_OPS",
           "DEGRADATION_WINDOW_MS", "PEER_MIN_OPS", "INSTANT_FAULT_KINDS", "SERVICE_METRICS", "WINDOW_NAMES", "MS",
           "ServiceBounds", "percentile", "ProduceOp", "produce_ops", "is_instant", "is_slow", "Windows",
           "service_windows", "fault_domain", "Rolling", "recovery_start", "slow_intervals",
           "recovery_reference"]

WARMUP_MS = 1000            # the first second of the workload is not part of the baseline
MIN_BASELINE_OPS = 20       # fewer ops before the fault: the partition's verdict is unknown
WINDOW_MIN_MS = 1000        # rolling windows are at least this wide …
WINDOW_OPS = 10             # … and wide enough for this many ops at the baseline rate
MIN_WINDOW_OPS = 5          # a rolling window with fewer ops never counts as recovered
DEGRADATION_WINDOW_MS = 5000  # an outside partition degrades when its p50 over this long is beyond the bound
PEER_MIN_OPS = 100          # a leader's pooled baseline p99 counts only with this many ops (a real p99)
ADMIN_PROCESS_PREFIX = "admin-"   # client ops of the schedule's admin actions (harness.nemesis.admin)
INSTANT_FAULT_KINDS = ("restart", "replace-disk", "move-replica", "delete-topic", "create-topic", "reassign",
                       "elect(preferred)", "elect(unclean)")   # labels without a heal
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
    """The workload's produce ops per partition (an admin action's own records, process
    ``admin-f<i>``, are an operator's burst, not a service to judge)."""
    out: dict[tuple[str, int], list[ProduceOp]] = {}
    for pair in history.produce_pairs():
        inv, done = pair.invoke, pair.completion
        if inv.process.startswith(ADMIN_PROCESS_PREFIX):
            continue
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
    return f.kind in ("replace-disk", "move-replica", "admin") or (f.kind == "process" and f.mode == "restart")


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

def _state_dir(st: Any, broker: int) -> str | None:
    if not st.replicas or not st.directories or broker not in st.replicas:
        return None
    i = st.replicas.index(broker)
    return st.directories[i] if i < len(st.directories) else None


def _in_dirs(d: Any, dir_ids: tuple[str, ...]) -> bool:
    """A replica's dir is one of the fault's (an unknown or reserved dir counts as in it)."""
    return d is None or d in (UNASSIGNED, MIGRATING, LOST) or d in dir_ids


def fault_domain(f: InjectedFault, view: MetadataView, timelines: dict | None = None) -> set[tuple[str, int]]:
    if f.kind == "move-replica":
        return {(str(f.attrs.get("topic")), int(f.attrs.get("partition", -1)))}
    if f.kind == "admin" and f.attrs.get("plan"):   # a reassignment: the partitions it moves
        return {(str(k).rpartition("/")[0], int(str(k).rpartition("/")[2])) for k in f.attrs["plan"]}
    nodes = {n for n in (f.node_id, f.attrs.get("peer_id")) if n is not None}
    out = set()
    if f.kind == "disk" and f.mode == "delay" and f.node_id is not None:
        # a produce request answers when its slowest partition is done (Kafka's too): whatever the
        # slow dir's broker leads while the dir is slow waits with the partitions on that dir
        end = f.healed_ns if f.healed_ns is not None else 2**63 - 1
        slow = {f.node_id}
        # ... and so does whatever another broker leads while one of its partitions has an
        # in-sync replica in the slow dir: its acks=all answers wait for that follower until it
        # leaves the ISR (replica.lag.time.max.ms), and a client connection's answers go out in
        # request order (Kafka's too), so the leader's other partitions wait behind them
        b = f.node_id
        for p in view.partitions.values():
            if p.leader not in (None, -1, b) and b in (p.isr or ()) and _in_dirs(p.dir_of(b), f.dir_ids):
                slow.add(p.leader)
        for states in (timelines or {}).values():
            for st in states:
                if f.ts_ns <= st.ts_ns < end and st.leader != b and b in st.isr and \
                        _in_dirs(_state_dir(st, b), f.dir_ids):
                    slow.add(st.leader)
        for key, p in view.partitions.items():
            if p.leader in slow:
                out.add(key)
        for key, states in (timelines or {}).items():
            if any(f.ts_ns <= st.ts_ns < end and st.leader in slow for st in states):
                out.add(key)
    for key, p in view.partitions.items():
        if not p.replicas:
            continue
        for b in nodes & set(p.replicas):
            if f.kind != "disk" or f.dir_ref in WHOLE_NODE_DIRS:
                out.add(key)
                continue
            if _in_dirs(p.dir_of(b), f.dir_ids):
                out.add(key)
    return out


# ---------------------------------------------------------------- rolling windows

class Rolling:
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


def recovery_start(roll: Rolling, ref: int, end: int, bound99: float) -> int | None:
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


def slow_intervals(tp, faults, domains) -> list[tuple[int, int]]:
    out = []
    for f in faults:
        if is_slow(f) and tp in domains[f.fault_id]:
            out.append((f.ts_ns, f.healed_ns if f.healed_ns is not None else 2**63 - 1))
    return out


def recovery_reference(t: int, slow: list[tuple[int, int]]) -> int:
    """Move a recovery reference past every slow interval of the partition that contains it."""
    moved = True
    while moved:
        moved = False
        for a, b in slow:
            if a <= t < b:
                t, moved = b, True
    return t
