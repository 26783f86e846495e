"""A quorum of real controller processes on loopback (tests, the benchmark, the demo).

:class:`QuorumCluster` formats N controllers with one cluster id and one voters line,
starts them, finds the active one through DescribeQuorum (API 55), kills and restarts
members (asking each with ``controller_impl.runtime.status.describe_quorum``).
"""

from __future__ import annotations

import asyncio
import os
import random
import time

from controller_impl.runtime.status import describe_quorum
from kafka_common import ids
from kafka_runtime.client import ClientError
from kafka_runtime.controller_client import SimBroker
from harness.run.local_processes import ControllerProcess, free_port


class QuorumCluster:
    def __init__(self, workdir: str, n: int = 3, *, extra: dict[str, str] | None = None,
                 cluster_id: str = "", node_extra: dict[int, dict[str, str]] | None = None) -> None:
        ports = [free_port() for _ in range(n)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        defaults = {"controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": "1000",
                    "controller.quorum.election.backoff.max.ms": "300"}
        defaults.update(extra or {})
        self.procs: dict[int, ControllerProcess] = {}
        for i, port in enumerate(ports):
            node = i + 1
            proc = ControllerProcess(os.path.join(workdir, f"controller-{node}"), node_id=node, port=port,
                                     extra={**defaults, **(node_extra or {}).get(node, {})}, voters=voters,
                                     cluster_id=cluster_id)
            proc.format()
            cluster_id = proc.cluster_id
            self.procs[node] = proc
        self.cluster_id = cluster_id
        self.voters = voters

    def start(self) -> None:
        for proc in self.procs.values():
            proc.start()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                proc.stop()

    def alive(self) -> list[int]:
        return [n for n, p in self.procs.items() if p.alive()]

    async def leader(self, timeout_s: float = 20.0, *, exclude: tuple[int, ...] = ()) -> int:
        """The active controller once a live majority agrees on it (and it answers as leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.alive():
                if node in exclude:
                    continue
                try:
                    d = await describe_quorum("127.0.0.1", self.procs[node].port, 1.0)
                except (ClientError, OSError, asyncio.TimeoutError):
                    continue
                if d["error"] == "none" and d["leader_id"] == node:
                    return node
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no active controller within {timeout_s}s among {self.alive()}")

    def port(self, node: int) -> int:
        return self.procs[node].port


async def register_many(q: QuorumCluster, broker_ids, seed: int) -> None:
    """Register a simulated broker (one dir) at the leader for each of ``broker_ids``: fills the
    metadata log, e.g. until it rolls and is dropped below snapshots."""
    rng = random.Random(seed)
    leader = await q.leader()
    for broker_id in broker_ids:
        sim = SimBroker(broker_id, [ids.random_directory_id(rng)], cluster_id=q.cluster_id)
        await sim.connect("127.0.0.1", q.port(leader))
        assert (await sim.register()).error_code.value == 0
        await sim.close()
