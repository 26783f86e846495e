"""How busy the host was while a run's workload ran, and how much of that was the lab.

A latency figure from a starved lab says little about the cluster: on a 2-core machine a
CPU-heavy process beside the lab leaves the brokers a fraction of a core and every produce
waits (S15 beside a ``while True`` loop: baseline p99 3.4 s where a quiet run has 0.37 s).
The runner samples, once a second during the workload, the host's CPU times (``/proc/stat``)
and the CPU seconds of the lab — every node's container process tree plus the harness's own
process tree (its client threads and the FUSE daemon) — and turns the samples into two
run-level metrics (unit ``ratio``, share of all the host's cores over the workload):

``host_cpu_busy_ratio``   (busy jiffies) ÷ (all jiffies): 1.0 = every core busy throughout
``host_cpu_other_ratio``  (host busy CPU s − the lab's CPU s) ÷ (wall s × cores), at least
                          0: what processes outside the lab (another job, the kernel's own
                          threads, dockerd) took

The parsing and the arithmetic are pure; :func:`read_proc_stat` is the one read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CpuTimes", "HostSample", "parse_proc_stat", "read_proc_stat", "host_metric_rows",
           "STARVED_BUSY_RATIO", "STARVED_OTHER_RATIO", "starved_line"]

# at or above this busy share the runner says so: a starved lab when processes outside it took at
# least STARVED_OTHER_RATIO of all cores, else a lab at the machine's capacity
STARVED_BUSY_RATIO = 0.9
STARVED_OTHER_RATIO = 0.15


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate ``cpu`` line of /proc/stat, in jiffies."""
    busy: int
    total: int
    cores: int


@dataclass(frozen=True, slots=True)
class HostSample:
    ts_ns: int
    host: CpuTimes
    lab_cpu_s: float     # CPU seconds of the lab's processes so far (cumulative)


def parse_proc_stat(text: str) -> CpuTimes:
    """``cpu  user nice system idle iowait irq softirq steal guest guest_nice`` → busy/total.
    Idle and iowait are not busy; guest time is already inside user/nice (not added twice)."""
    agg: list[int] | None = None
    cores = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu":
            try:
                agg = [int(x) for x in fields[1:]]
            except ValueError:
                raise ValueError(f"/proc/stat: unreadable cpu line {line!r}") from None
        elif fields[0].startswith("cpu") and fields[0][3:].isdigit():
            cores += 1
    if agg is None or len(agg) < 4:
        raise ValueError("/proc/stat: no aggregate cpu line")
    agg = (agg + [0] * 8)[:8]   # user nice system idle iowait irq softirq steal
    idle = agg[3] + agg[4]
    total = sum(agg)
    return CpuTimes(busy=total - idle, total=total, cores=max(1, cores))


def read_proc_stat(path: str = "/proc/stat") -> CpuTimes:
    with open(path, encoding="ascii") as f:
        return parse_proc_stat(f.read())


def host_metric_rows(samples: list[HostSample], clock_ticks: int) -> list[dict]:
    """The two run-level rows over the first → last sample (none with fewer than two
    samples or no elapsed time)."""
    if len(samples) < 2:
        return []
    a, b = samples[0], samples[-1]
    total = b.host.total - a.host.total
    wall_s = (b.ts_ns - a.ts_ns) / 1e9
    if total <= 0 or wall_s <= 0:
        return []
    busy_ratio = (b.host.busy - a.host.busy) / total
    busy_s = (b.host.busy - a.host.busy) / clock_ticks
    lab_s = b.lab_cpu_s - a.lab_cpu_s
    other_ratio = max(0.0, (busy_s - lab_s) / (wall_s * b.host.cores))

    def row(metric: str, value: float) -> dict:
        return {"metric": metric, "value": round(min(1.0, max(0.0, value)), 4), "unit": "ratio", "topic": None,
                "partition": None, "node_id": None, "dir_id": None, "fault_id": None, "fault_kind": None,
                "queued_assignments": None}
    return [row("host_cpu_busy_ratio", busy_ratio), row("host_cpu_other_ratio", other_ratio)]


def starved_line(rows: list[dict]) -> str | None:
    """One line for the run's output when the host was (nearly) saturated, else None."""
    by = {r["metric"]: r["value"] for r in rows}
    busy = by.get("host_cpu_busy_ratio")
    if busy is None or busy < STARVED_BUSY_RATIO:
        return None
    other = by.get("host_cpu_other_ratio", 0.0)
    if other >= STARVED_OTHER_RATIO:
        return (f"host CPU {busy:.0%} busy during the workload, {other:.0%} of all cores taken by processes "
                f"outside the lab: its latency figures come from a starved lab")
    return (f"host CPU {busy:.0%} busy during the workload, nearly all of it the lab's own ({other:.0%} "
            f"outside it): the lab runs at this machine's capacity")
