"""The operator's admin calls through a real admin client — kafka-python's
``KafkaAdminClient`` — for the fault schedule's ``admin`` actions and the chaos-session
commands ``jbodlab reassign`` / ``jbodlab elect``.

- :func:`plan_moves` (pure): every partition with a replica on ``broker`` gets that replica
  replaced, in place (the order, and so the preferred leader, of the others kept), by the
  broker holding none of the partition that has the fewest replicas once the earlier moves
  are counted (ties: the lowest id) — so a broker's replicas spread over the others;
- :func:`reassign_off`: the plan sent as one AlterPartitionReassignments; returns the plan
  and the per-partition errors (the move completes in the background: the new replicas
  catch up, join the ISR, then the old ones leave);
- :func:`wait_reassignments`: ListPartitionReassignments until none is left (or the time is up);
- :func:`elect`: ElectLeaders PREFERRED or UNCLEAN for the topics' partitions (all when none
  is named); returns ``{"topic/p": error name or "NONE"}``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Iterable

Key = tuple[str, int]


def plan_moves(replicas: dict[Key, list[int]], broker: int, brokers: Iterable[int]) -> dict[Key, list[int]]:
    """The target replicas of every partition ``broker`` holds (see the module doc)."""
    load = Counter({b: 0 for b in brokers if b != broker})
    for rs in replicas.values():
        for b in rs:
            if b in load:
                load[b] += 1
    out: dict[Key, list[int]] = {}
    for key in sorted(replicas):
        rs = replicas[key]
        if broker not in rs:
            continue
        free = [b for b in sorted(load) if b not in rs]
        if not free:
            raise ValueError(f"{key[0]}-{key[1]}: every other broker already holds a replica of it "
                             f"({rs}); nowhere to move broker {broker}'s replica")
        to = min(free, key=lambda b: (load[b], b))
        load[to] += 1
        out[key] = [to if b == broker else b for b in rs]
    return out


def _admin(bootstrap: str, timeout_s: float):
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="jbodlab-admin",
                            request_timeout_ms=int(timeout_s * 1000))


def replica_sets(admin, topics: list[str] | None) -> dict[Key, list[int]]:
    out: dict[Key, list[int]] = {}
    for t in admin.describe_topics(topics):
        name = str(t.get("name", t.get("topic", "")))
        if t.get("error_code", 0) or t.get("is_internal") or name.startswith("__"):
            continue
        for p in t.get("partitions", ()):
            pid = p.get("partition_index", p.get("partition"))
            out[(name, int(pid))] = [int(b) for b in p.get("replica_nodes", p.get("replicas", ()))]
    return out


def live_brokers(admin) -> list[int]:
    return sorted(int(b.get("broker_id", b.get("node_id"))) for b in admin.describe_cluster()["brokers"])


def reassign_off(bootstrap: str, broker: int, topics: list[str] | None = None, *,
                 only: set[Key] | None = None, timeout_s: float = 30.0) -> tuple[dict[Key, list[int]], dict[str, str]]:
    """Move every replica ``broker`` holds (of ``topics``; all non-internal ones when None;
    only the partitions ``only`` names when given)."""
    from kafka import TopicPartition
    admin = _admin(bootstrap, timeout_s)
    try:
        current = replica_sets(admin, topics)
        if only is not None:
            current = {k: v for k, v in current.items() if k in only}
        plan = plan_moves(current, broker, live_brokers(admin))
        if not plan:
            return plan, {}
        got = admin.alter_partition_reassignments({TopicPartition(t, p): rs for (t, p), rs in plan.items()},
                                                  timeout_ms=int(timeout_s * 1000))
        errors = {f"{tp.topic}/{tp.partition}": _name(err) for tp, err in (got or {}).items() if _name(err) != "NONE"}
        return plan, errors
    finally:
        admin.close()


def wait_reassignments(bootstrap: str, timeout_s: float, *, progress=None) -> list[str]:
    """Poll ListPartitionReassignments until none is in progress; returns those left."""
    admin = _admin(bootstrap, 30.0)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            left = sorted(f"{tp.topic}/{tp.partition}" for tp in admin.list_partition_reassignments())
            if progress is not None:
                progress(left)
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.5)
    finally:
        admin.close()


def elect(bootstrap: str, election: str = "preferred", topics: list[str] | None = None, *,
          timeout_s: float = 30.0) -> dict[str, str]:
    election_type = {"preferred": 0, "unclean": 1}[election]
    admin = _admin(bootstrap, timeout_s)
    try:
        wanted = {t: [p for (tt, p) in replica_sets(admin, [t])] for t in topics} if topics else None
        if wanted is not None:
            wanted = {t: ps for t, ps in wanted.items() if ps}
        resp = admin.elect_leaders(election_type, topic_partitions=wanted, timeout_ms=int(timeout_s * 1000),
                                   raise_errors=False)
        return _election_results(resp)
    finally:
        admin.close()


def _election_results(resp) -> dict[str, str]:
    out: dict[str, str] = {}
    for topic in getattr(resp, "replica_election_results", ()) or ():
        name = topic[0] if isinstance(topic, tuple) else topic.topic
        parts = topic[1] if isinstance(topic, tuple) else topic.partition_result
        for p in parts:
            pid, code = (p[0], p[1]) if isinstance(p, tuple) else (p.partition_id, p.error_code)
            out[f"{name}/{pid}"] = _name(code)
    return out


def _name(err) -> str:
    """A kafka-python error class, instance or int code as Kafka's name (NONE for success)."""
    from kafka.errors import for_code
    if err is None:
        return "NONE"
    if isinstance(err, int):
        err = for_code(err)
    cls = err if isinstance(err, type) else type(err)
    if getattr(cls, "errno", 0) == 0:
        return "NONE"
    return str(getattr(cls, "message", cls.__name__))


def _in_dir(fx, node_id: int, dir_ref: str) -> set[Key]:
    """The partitions whose replica on ``node_id`` the metadata places in the dir ``dir_ref``
    names (bound once per run, as every ref: the dir a disk fault failed)."""
    from kafka_common import ids
    names = fx.dirs_of(node_id, dir_ref)
    by_name = fx.dir_names(node_id)
    wanted = {by_name[n] for n in names if n in by_name}
    image = fx.svc.metadata()
    out: set[Key] = set()
    for tid, topic in image.topics.items():
        for pid, p in image.partitions_of(tid).items():
            if node_id in p.replicas and ids.to_base64(p.directory(node_id)) in wanted:
                out.add((topic.name, pid))
    return out


def run_scheduled(fx, index: int, fault, node_id: int | None) -> dict:
    """A schedule's ``admin`` action, for the nemesis host ``fx`` (:class:`harness.nemesis.protocol.NemesisHost`):
    the call made, then its ``fault_injected`` action recorded with what was asked and
    answered (``plan``: {"t/p": target replicas}, ``result``: {"t/p": error name}); an
    error is one of the run's errors (the run fails, said why)."""
    from harness.history.model import fault_injected_event
    ts = time.time_ns()
    topics = [fault.topic] if fault.topic else None
    attrs: dict = {}
    try:
        if fault.action == "reassign":
            only = _in_dir(fx, node_id, fault.dir) if fault.dir else None
            plan, result = reassign_off(fx.svc.bootstrap(), node_id, topics, only=only)
            attrs = {"plan": {f"{t}/{p}": rs for (t, p), rs in plan.items()}, "result": result or "none"}
            fx.say(f"f{index}: AlterPartitionReassignments: {len(plan)} partition(s) off broker {node_id}"
                   + (f", errors {result}" if result else ""))
            if result:
                fx.errors.append(f"f{index}: AlterPartitionReassignments answered {result}")
        else:
            election = fault.election or "preferred"
            result = elect(fx.svc.bootstrap(), election, topics)
            bad = {k: v for k, v in result.items() if v not in ("NONE", "ELECTION_NOT_NEEDED")}
            attrs = {"result": result}
            fx.say(f"f{index}: ElectLeaders {election.upper()}: "
                   f"{sum(v == 'NONE' for v in result.values())} elected, "
                   f"{sum(v == 'ELECTION_NOT_NEEDED' for v in result.values())} not needed" + (f", {bad}" if bad else ""))
            if bad and election == "preferred":
                attrs["unavailable"] = bad   # a preferred replica not back yet: recorded, not a run error
    except Exception as exc:  # noqa: BLE001 - a failed admin call is the run's error, with the reason
        attrs = {"result": f"{type(exc).__name__}: {exc}"}
        fx.errors.append(f"f{index}: admin {fault.action} failed: {type(exc).__name__}: {exc}")
        fx.say(f"f{index}: admin {fault.action} failed: {exc}")
    event = fault_injected_event(fault, index, ts_ns=ts, node_id=node_id, backend="admin")
    fx.ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event,
                                node_id=event.node_id, attrs={**event.attrs, **attrs}))
    return attrs
