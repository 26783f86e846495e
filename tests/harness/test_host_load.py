"""The host-load metrics (harness.run.host_load): /proc/stat parsing and the two run-level rows."""

from __future__ import annotations

import os

import pytest

from harness.results import schema as rs
from harness.run.host_load import (CpuTimes, HostSample, host_metric_rows, parse_proc_stat, read_proc_stat,
                               starved_line)

pytestmark = pytest.mark.unit

STAT = """cpu  1000 10 300 5000 200 5 15 0 40 0
cpu0 500 5 150 2500 100 2 8 0 20 0
cpu1 500 5 150 2500 100 3 7 0 20 0
intr 12345 0 0
ctxt 999
"""


def test_parse_busy_excludes_idle_and_iowait_and_does_not_count_guest_twice():
    t = parse_proc_stat(STAT)
    # user nice system idle iowait irq softirq steal → total 6530, idle+iowait 5200
    assert (t.busy, t.total, t.cores) == (1330, 6530, 2)


@pytest.mark.parametrize("text", ["", "intr 1 2\n", "cpu  1 2\n", "cpu  a b c d e\n"])
def test_parse_refuses_what_is_not_a_cpu_line(text):
    with pytest.raises(ValueError, match="/proc/stat"):
        parse_proc_stat(text)


def _s(t_s: float, busy: int, total: int, lab_s: float, cores: int = 2) -> HostSample:
    return HostSample(int(t_s * 1e9), CpuTimes(busy, total, cores), lab_s)


def test_rows_busy_and_other_share():
    # 10 s on 2 cores at 100 ticks/s: 2000 jiffies; 1800 busy (90 %) = 18 CPU s, of which the
    # lab took 8 s → 10 s outside it = 50 % of all cores
    rows = host_metric_rows([_s(0, 0, 0, 0.0), _s(5, 900, 1000, 3.0), _s(10, 1800, 2000, 8.0)], 100)
    by = {r["metric"]: r for r in rows}
    assert by["host_cpu_busy_ratio"]["value"] == 0.9 and by["host_cpu_other_ratio"]["value"] == 0.5
    assert all(r["unit"] == "ratio" and r["partition"] is None and r["metric"] in rs.METRICS for r in rows)
    assert starved_line(rows) == ("host CPU 90% busy during the workload, 50% of all cores taken by processes "
                                  "outside the lab: its latency figures come from a starved lab")


def test_a_lab_at_capacity_is_not_called_starved():
    rows = host_metric_rows([_s(0, 0, 0, 0.0), _s(10, 1900, 2000, 18.0)], 100)
    assert [r["value"] for r in rows] == [0.95, 0.05]
    assert starved_line(rows) == ("host CPU 95% busy during the workload, nearly all of it the lab's own "
                                  "(5% outside it): the lab runs at this machine's capacity")


def test_rows_clamped_and_quiet_host_says_nothing():
    # the lab's CPU s read a moment after /proc/stat can exceed the host's busy s: other = 0, not < 0
    rows = host_metric_rows([_s(0, 0, 0, 0.0), _s(10, 500, 2000, 6.0)], 100)
    by = {r["metric"]: r["value"] for r in rows}
    assert by == {"host_cpu_busy_ratio": 0.25, "host_cpu_other_ratio": 0.0}
    assert starved_line(rows) is None


@pytest.mark.parametrize("samples", [[], [_s(0, 0, 0, 0.0)], [_s(1, 5, 10, 0.0), _s(1, 5, 10, 0.0)]])
def test_no_rows_without_an_interval(samples):
    assert host_metric_rows(samples, 100) == []


def test_reads_this_host():
    t = read_proc_stat()
    assert 0 <= t.busy <= t.total and t.cores == os.cpu_count()
