"""A replica moved between a broker's dirs: AlterReplicaLogDirs to the broker itself, recorded
(``fault_injected`` with the broker's answer) only once it answered: a move that was never
requested is not in the history. Over when injected."""

from __future__ import annotations

import asyncio
import time

from harness.cluster.node_configs import BROKER_PORT
from harness.history.model import fault_injected_event
from harness.nemesis.protocol import ActiveFault, NemesisHost
from harness.scenario.faults import MoveReplica
from kafka_common.wire import ApiKey

__all__ = ["MoveReplicaNemesis", "alter_replica_log_dir"]


class MoveReplicaNemesis:
    def inject(self, host: NemesisHost, index: int, fault: MoveReplica) -> ActiveFault:
        node_id = host.node_of(fault.node)
        target = host.dirs_of(node_id, fault.to_dir)[0]
        idmap = host.dir_names(node_id)
        path = f"/jbodlab/disks/{target}/data"
        ts = time.time_ns()
        code = asyncio.run(alter_replica_log_dir(host.svc.ip(node_id), BROKER_PORT, path, fault.topic,
                                                 fault.partition))
        event = fault_injected_event(fault, index, ts_ns=ts, node_id=node_id, dir_ids=[idmap.get(target, "")],
                                     paths=[path], backend="admin")
        host.ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event,
                                      node_id=event.node_id, attrs={**event.attrs, "result": code}))
        host.say(f"f{index}: AlterReplicaLogDirs {fault.topic}-{fault.partition} on broker {node_id} -> "
                 f"{target}: {code}")
        if code != "none":
            host.errors.append(f"f{index}: AlterReplicaLogDirs answered {code}")
        return ActiveFault(index, fault, node_id, healed=True)

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        """Over when injected."""

    def describe(self, fault: MoveReplica) -> str:
        return f"{fault.label()} {fault.node}"


async def alter_replica_log_dir(host: str, port: int, path: str, topic: str, partition: int) -> str:
    from kafka_common import wire
    from kafka_runtime.client import KafkaClient
    client = await KafkaClient.connect(host, port, client_id="jbodlab-harness")
    try:
        version = client.pick_version(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
        mod = wire.request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
        req = wire.make(wire.request_class(ApiKey.ALTER_REPLICA_LOG_DIRS, version), dirs=(
            wire.make(mod.AlterReplicaLogDir, path=path, topics=(
                wire.make(mod.AlterReplicaLogDirTopic, name=topic, partitions=(partition,)),)),))
        resp = await client.request(req)
        codes = {p.error_code.name for r in resp.results for p in r.partitions}
        return ",".join(sorted(codes)) or "none"
    finally:
        await client.close()
