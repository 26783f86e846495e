"""What the benchmarks share: their output and their CPU readings from /proc (not a
benchmark: ``jbodlab bench`` lists ``*_bench.py`` only)."""

from __future__ import annotations

import json
import os


def write_result(out: str, result: dict) -> None:
    """Write ``result`` as JSON to ``out`` (its dir made) and say where."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out}")


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | str = "self") -> float:
    """CPU seconds (user + system) a process has used, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def host_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)   # idle + iowait
    return sum(ticks) - idle, sum(ticks)
