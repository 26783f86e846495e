"""What each node of a run is and how it is configured: the node definitions of a scenario
(:class:`NodeDef`), the lab topology that gives them their disks, each node's
``server.properties`` (:func:`render_properties`) and the container's start script.
Plain functions of the scenario value; :mod:`harness.cluster.services` writes and runs them."""

from __future__ import annotations

from dataclasses import dataclass

from harness.scenario.model import Scenario

__all__ = ["NodeDef", "node_defs", "lab_topology", "render_properties", "properties_text", "START_SH",
           "CONTAINER_RUN", "BROKER_PORT", "CONTROLLER_PORT", "META_DIR"]

CONTAINER_RUN = "/jbodlab/run"
# the unprivileged user (uid, gid) every node runs as, as Kafka runs as its own user: file
# modes then apply to the broker (a `permission` fault, chmod a-w, gives it EACCES; as root it
# would not notice). It owns every disk's data/ and the node's run dir.
NODE_USER = (2500, 2500)
BROKER_PORT = 9092
CONTROLLER_PORT = 9093
META_DIR = "meta"


@dataclass(frozen=True, slots=True)
class NodeDef:
    node_id: int
    role: str                      # broker | controller
    name: str                      # lab node name: broker-1, controller-3001
    data_dirs: tuple[str, ...]     # d1..dN (brokers), () for controllers

    @property
    def disk_names(self) -> tuple[str, ...]:
        return (*self.data_dirs, META_DIR)

    @property
    def port(self) -> int:
        return BROKER_PORT if self.role == "broker" else CONTROLLER_PORT


def node_defs(scenario: Scenario) -> dict[int, NodeDef]:
    topo = scenario.topology
    out = {c: NodeDef(c, "controller", f"controller-{c}", ()) for c in topo.controller_ids()}
    dirs = tuple(f"d{i}" for i in range(1, topo.dirs_per_broker + 1))
    out.update({b: NodeDef(b, "broker", f"broker-{b}", dirs) for b in topo.broker_ids()})
    return out


def lab_topology(scenario: Scenario, backend: str):
    from infra.lab import NodeSpec, Topology
    nodes = tuple(NodeSpec(n.name, n.disk_names) for n in node_defs(scenario).values())
    return Topology(nodes=nodes, disk_size_mb=scenario.topology.dir_size_mb, fstype=scenario.topology.fs,
                    backend=backend, disk_cache=scenario.topology.disk_cache, node_user=NODE_USER)


def _log_dir(dirname: str) -> str:
    return f"/jbodlab/disks/{dirname}/data"


def render_properties(node: NodeDef, scenario: Scenario, *, cluster_id: str) -> dict[str, str]:
    """The node's ``server.properties`` as a dict (``advertised.listeners`` of a broker holds the
    placeholder ``@IP@``, replaced by the container's address when it starts)."""
    voters = ",".join(f"{c}@controller-{c}:{CONTROLLER_PORT}" for c in scenario.topology.controller_ids())
    common = {"node.id": str(node.node_id), "controller.quorum.voters": voters,
              "controller.listener.names": "CONTROLLER", "cluster.id": cluster_id,
              "metadata.log.dir": _log_dir(META_DIR), "events.file": f"{CONTAINER_RUN}/events.jsonl",
              # the listeners' request_metrics each second (in the run's events: the broker's
              # own share of produce latency, per window)
              "metrics.sample.window.ms": "1000"}
    c = scenario.configs
    if node.role == "controller":
        props = {"process.roles": "controller", **common,
                 "listeners": f"CONTROLLER://0.0.0.0:{CONTROLLER_PORT}",
                 "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
                 **c.controller_properties()}
        return props
    rf = max(t.replication_factor for t in scenario.workload.topics)
    props = {"process.roles": "broker", **common,
             "listeners": f"PLAINTEXT://0.0.0.0:{BROKER_PORT}",
             "advertised.listeners": f"PLAINTEXT://@IP@:{BROKER_PORT}",
             "inter.broker.listener.name": "PLAINTEXT",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
             "log.dirs": ",".join(_log_dir(d) for d in node.data_dirs),
             "default.replication.factor": str(rf), "num.partitions": "1",
             "auto.create.topics.enable": "false",
             "log.segment.bytes": str(1 << 20), "replica.fetch.wait.max.ms": "200",
             "metadata.fetch.max.wait.ms": "200",
             **c.broker_properties()}
    return props


def properties_text(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


# The container's entry point: fill in the container's own address, then exec the server.
START_SH = """#!/bin/sh
set -e
ip=$(hostname -i 2>/dev/null | awk '{print $1}')
[ -n "$ip" ] || ip=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)
sed "s/@IP@/$ip/g" %(run)s/server.properties.in > %(run)s/server.properties
echo "start $(date -u +%%FT%%T.%%NZ) ip=$ip" >> %(run)s/starts.log
exec %(command)s %(run)s/server.properties
"""

