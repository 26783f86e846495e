"""Leader elections an operator asks for, and the ones the controller starts by itself.

ElectLeaders (API 43), Kafka's ``ReplicationControlManager.electLeaders``, per partition:

- unknown topic or partition → UNKNOWN_TOPIC_OR_PARTITION (3);
- PREFERRED (0): the leader already is the first replica → ELECTION_NOT_NEEDED (84); the
  first replica is in the ISR, its broker active (registered, unfenced, not shutting down)
  and its replica's directory online → it becomes the leader; else
  PREFERRED_LEADER_NOT_AVAILABLE (80);
- UNCLEAN (1): the partition has a leader → ELECTION_NOT_NEEDED; an ISR member is
  acceptable (same rule) → the first of them in replica order (a clean election); else the
  first replica, in replica order, whose broker is active and whose directory is online
  becomes the leader with ISR = [it] and leader recovery state RECOVERING (KIP-704) — an
  operator's explicit UNCLEAN election is allowed whatever ``unclean.leader.election.enable``
  says, as in Kafka; else ELIGIBLE_LEADERS_NOT_AVAILABLE (83).
- ``topic_partitions`` null = every partition; then the ELECTION_NOT_NEEDED results are
  left out of the answer (Kafka's rule).

A replica whose directory is offline (or LOST) is never elected, by any path here.

The controller's own elections (the runtime calls them on a timer, :mod:`.controller`):

- :func:`unclean_for_leaderless`: every leaderless partition whose topic resolves
  ``unclean.leader.election.enable`` to true (topic config → dynamic broker config →
  the controller's server.properties → false) gets the UNCLEAN election above;
- :func:`rebalance`: ``auto.leader.rebalance.enable``: per preferred broker (the first
  replica), the share of the partitions it should lead but does not; above
  ``leader.imbalance.per.broker.percentage`` every such partition whose preferred replica
  is acceptable gets a PREFERRED election (the ZooKeeper controller's rule, which KRaft's
  ``maybeBalancePartitionLeaders`` simplified to "any imbalance").
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from kafka_common import topic_config
from kafka_common import wire
from kafka_common.metadata import records as r
from kafka_common.metadata.model import NO_LEADER, PartitionRegistration
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView

PREFERRED, UNCLEAN = 0, 1
LRS_RECOVERING = 1
UNCLEAN_KEY = "unclean.leader.election.enable"


def acceptable(view: WorkingView, part: PartitionRegistration, broker_id: int, *, in_isr: bool = True) -> bool:
    """Can ``broker_id`` lead ``part``: (in the ISR,) active, its replica's dir online."""
    return ((not in_isr or broker_id in part.isr) and view.is_active(broker_id)
            and view.replica_dir_online(broker_id, part.directory(broker_id)))


def elect_one(view: WorkingView, part: PartitionRegistration, election_type: int
              ) -> tuple[ErrorCode, str | None, r.PartitionChangeRecord | None]:
    """(error, message, the record to write) of one partition's election."""
    replicas = part.replicas
    where = f"partition {part.partition_id}"
    if election_type == PREFERRED:
        preferred = replicas[0]
        if part.leader == preferred:
            return ErrorCode.election_not_needed, f"{where}: the preferred replica {preferred} already leads", None
        if not acceptable(view, part, preferred):
            why = ("not in the ISR" if preferred not in part.isr else
                   "not active (fenced, shutting down or unregistered)" if not view.is_active(preferred) else
                   "its directory is offline")
            return (ErrorCode.preferred_leader_not_available,
                    f"{where}: the preferred replica {preferred} is {why}", None)
        return ErrorCode.none, None, r.PartitionChangeRecord(
            topic_id=part.topic_id, partition_id=part.partition_id, leader=preferred)
    if election_type != UNCLEAN:
        return ErrorCode.invalid_request, f"unknown election type {election_type}", None
    if part.leader != NO_LEADER:
        return ErrorCode.election_not_needed, f"{where}: has leader {part.leader}", None
    record = unclean_record(view, part)
    if record is None:
        return (ErrorCode.eligible_leaders_not_available,
                f"{where}: no replica of {list(replicas)} is active with its directory online", None)
    return ErrorCode.none, None, record


def unclean_record(view: WorkingView, part: PartitionRegistration) -> r.PartitionChangeRecord | None:
    """A leaderless partition's election: clean if an ISR member can lead, else unclean."""
    clean = next((b for b in part.replicas if acceptable(view, part, b)), None)
    if clean is not None:
        return r.PartitionChangeRecord(topic_id=part.topic_id, partition_id=part.partition_id, leader=clean)
    live = next((b for b in part.replicas if acceptable(view, part, b, in_isr=False)), None)
    if live is None:
        return None
    return r.PartitionChangeRecord(topic_id=part.topic_id, partition_id=part.partition_id, leader=live,
                                   isr=(live,), leader_recovery_state=LRS_RECOVERING)


def elect_leaders(view: WorkingView, req: Any) -> Any:
    version = req.__version__
    mod = wire.response_module(ApiKey.ELECT_LEADERS, version)
    cls = wire.response_class(ApiKey.ELECT_LEADERS, version)
    election_type = getattr(req, "election_type", PREFERRED)  # v0 elects preferred leaders only
    wanted: list[tuple[str, Iterable[int]]]
    everything = req.topic_partitions is None
    if everything:
        wanted = [(t.name, sorted(view.image.partitions_of(t.topic_id)))
                  for t in sorted(view.image.topics.values(), key=lambda t: t.name)]
    else:
        wanted = [(t.topic, t.partitions) for t in req.topic_partitions]
    results = []
    for name, partitions in wanted:
        topic = view.topic(name)
        out = []
        for pid in partitions:
            part = view.partition(topic.topic_id, pid) if topic is not None else None
            if part is None:
                code, message, record = (ErrorCode.unknown_topic_or_partition,
                                         f"{name}-{pid} does not exist", None)
            else:
                code, message, record = elect_one(view, part, election_type)
            if record is not None:
                view.emit(record)
            if everything and code == ErrorCode.election_not_needed:
                continue
            out.append(wire.make(mod.PartitionResult, partition_id=pid, error_code=code, error_message=message))
        if out or not everything:
            results.append(wire.make(mod.ReplicaElectionResult, topic=name, partition_result=tuple(out)))
    return wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none,
                     replica_election_results=tuple(results))


# --- the controller's own elections ----------------------------------------------------


def unclean_enabled(view: WorkingView, topic: str, static: topic_config.StaticBrokerConfig) -> bool:
    got = topic_config.resolve_topic(topic, UNCLEAN_KEY, -1, view.image.configs, static)
    return str(got.value).strip().lower() == "true"


def unclean_for_leaderless(view: WorkingView, static: topic_config.StaticBrokerConfig) -> list[str]:
    """Elect a leader for each leaderless partition of a topic with unclean election
    enabled; returns one line per unclean election made (for the log)."""
    lines = []
    cache: dict[str, bool] = {}
    for part in list(view.image.all_partitions()):
        if part.leader != NO_LEADER:
            continue
        current = view.partition(part.topic_id, part.partition_id)
        if current is None or current.leader != NO_LEADER:
            continue
        topic = view.image.topics.get(current.topic_id)
        if topic is None:
            continue
        if topic.name not in cache:
            cache[topic.name] = unclean_enabled(view, topic.name, static)
        if not cache[topic.name]:
            continue
        record = unclean_record(view, current)
        if record is not None:
            view.emit(record)
            if record.isr is not None:
                lines.append(f"unclean leader election: {topic.name}-{current.partition_id} "
                             f"leader {record.leader} (ISR was {list(current.isr)})")
    return lines


def imbalance(view: WorkingView) -> dict[int, tuple[int, int]]:
    """Per preferred broker: (partitions it should lead, of which it does not lead)."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for part in view.image.all_partitions():
        if not part.replicas:
            continue
        c = counts[part.replicas[0]]
        c[0] += 1
        if part.leader != part.replicas[0]:
            c[1] += 1
    return {b: (c[0], c[1]) for b, c in counts.items()}


def rebalance(view: WorkingView, percentage: int) -> list[tuple[int, int, int]]:
    """PREFERRED elections for the partitions of every broker whose imbalance ratio is above
    ``percentage`` % and whose preferred replica is acceptable. Returns
    ``[(broker, should lead, moved back)]`` for the brokers over the threshold."""
    totals = imbalance(view)
    over = {b for b, (total, off) in totals.items() if total and off * 100 > percentage * total}
    if not over:
        return []
    moved: dict[int, int] = defaultdict(int)
    for part in list(view.image.all_partitions()):
        if not part.replicas or part.replicas[0] not in over or part.leader == part.replicas[0]:
            continue
        current = view.partition(part.topic_id, part.partition_id)
        if current is None:
            continue
        code, _msg, record = elect_one(view, current, PREFERRED)
        if record is not None:
            view.emit(record)
            moved[current.replicas[0]] += 1
    return [(b, totals.get(b, (0, 0))[0], moved.get(b, 0)) for b in sorted(over)]
