"""Samples of a run while its workload runs: psutil samples of every node's container (the
``resources`` table) and the host's CPU against the lab's (:mod:`harness.run.host_load`)."""

from __future__ import annotations

import os
import time

from harness.run.host_load import HostSample, host_metric_rows, read_proc_stat
from harness.cluster.services import Services
from infra.procfaults import SELF, ResourceSample

__all__ = ["Sampler"]


class Sampler:
    """psutil samples of every node's container (the ``resources`` table), and the host's CPU
    against the lab's (:mod:`harness.run.host_load`: the ``host_cpu_*`` metrics)."""

    def __init__(self, lab, svc: Services) -> None:
        self.lab, self.svc = lab, svc
        self.rows: list[dict] = []
        self.host: list[HostSample] = []
        self._last: dict[int, tuple[int, float]] = {}
        self._node_cpu: dict[int, float] = {}   # cumulative CPU s of each node (over its restarts)
        self._node_carry: dict[int, float] = {}  # CPU s of a node's earlier containers

    def sample(self) -> None:
        try:
            got = self.lab.sample_all([node.name for node in self.svc.nodes.values()], include_self=True)
        except Exception:  # noqa: BLE001 - no process table (psutil): nothing to sample
            return
        for n, node in self.svc.nodes.items():
            s = got.get(node.name)
            if not isinstance(s, ResourceSample):   # a stopped node has nothing to sample
                continue
            cpu_s = s.cpu_user_s + s.cpu_system_s
            if cpu_s < self._node_cpu.get(n, 0.0) - self._node_carry.get(n, 0.0):   # a new container
                self._node_carry[n] = self._node_cpu[n]
            self._node_cpu[n] = self._node_carry.get(n, 0.0) + cpu_s
            prev = self._last.get(n)
            pct = None if prev is None or s.ts_ns <= prev[0] else 100.0 * (cpu_s - prev[1]) / ((s.ts_ns - prev[0]) / 1e9)
            self._last[n] = (s.ts_ns, cpu_s)
            self.rows.append({"node_id": n, "pid": None, "ts_ns": s.ts_ns, "cpu_percent": pct,
                              "rss_bytes": s.rss_bytes, "read_bytes": s.read_bytes, "write_bytes": s.write_bytes,
                              "read_count": None, "write_count": None})
        own = got.get(SELF)
        if isinstance(own, ResourceSample):
            self._sample_host(own.cpu_user_s + own.cpu_system_s)

    def _sample_host(self, own_cpu_s: float) -> None:
        """The host's /proc/stat and the lab's CPU s so far: the nodes' containers (their last
        sample) plus this process's tree (client threads, the FUSE daemon)."""
        try:
            self.host.append(HostSample(time.time_ns(), read_proc_stat(), own_cpu_s + sum(self._node_cpu.values())))
        except (OSError, ValueError):
            return   # no /proc: the host metrics are left out

    def host_rows(self) -> list[dict]:
        return host_metric_rows(self.host, os.sysconf("SC_CLK_TCK"))
