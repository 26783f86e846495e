"""The admin actions of a fault schedule (:class:`~harness.scenario.faults.AdminAction`) and of
chaos sessions (``jbodlab delete-topic``), through a real admin client: confluent-kafka's
AdminClient on the brokers' bootstrap, as an operator would.

- ``delete-topic``: DeleteTopics, then until the committed metadata no longer has the topic.
  The ``fault_injected`` action records the deleted incarnation's ``topic_id``.
- ``create-topic``: CreateTopics (``partitions`` × ``replication_factor``), until every
  partition has a leader and no UNASSIGNED dir; records the new ``topic_id``. Then
  ``records`` values (``admin-f<i>-<seq>``, :func:`harness.workload.producer.value_of`) produced with
  acks=all round-robin over its partitions, each an ``invoke`` and an ``ok``/``info`` client op
  of process ``admin-f<i>`` in the ledger, so the durability check and the drain cover them.

Each result is the Kafka error name (``none`` when it succeeded); a refusal is recorded, not
raised (the schedule goes on; the ``topic_admin`` check judges it).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from harness.history.model import fault_injected_event
from harness.nemesis.protocol import ActiveFault, NemesisHost
from harness.results.ledger import LedgerWriter
from harness.scenario.faults import OPERATOR_ACTIONS, AdminAction
from kafka_common import ids
from kafka_runtime.polling import poll_until

Say = Callable[[str], None]
__all__ = ["AdminNemesis", "run_admin_action", "AdminResult", "VALUE_BYTES"]
VALUE_BYTES = 100
WAIT_S = 30.0


class AdminResult:
    def __init__(self, result: str, topic_id: str | None, produced: int = 0, acked: int = 0) -> None:
        self.result, self.topic_id, self.produced, self.acked = result, topic_id, produced, acked


def _error_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return name() if callable(name) else f"{type(exc).__name__}: {exc}"


def _wait(what: str, pred: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    value = poll_until(pred, timeout_s, interval_s=0.2)
    if not value:
        raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
    return value


def run_admin_action(index: int, action: AdminAction, *, bootstrap: str, metadata: Callable[[], Any],
                     ledger: LedgerWriter, say: Say = lambda _m: None) -> AdminResult:
    """Run one admin action and record it (``fault_injected``, backend ``admin``)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    ts = time.time_ns()
    topic = action.topic
    if action.action == "delete-topic":
        before = metadata().topic_ids.get(topic)
        try:
            admin.delete_topics([topic], request_timeout=WAIT_S)[topic].result(WAIT_S)
            result = "none"
            _wait(f"{topic} gone from the metadata", lambda: topic not in metadata().topic_ids)
        except Exception as exc:  # noqa: BLE001 - a refusal is the outcome to record
            result = _error_name(exc)
        out = AdminResult(result, ids.to_base64(before) if before is not None else None)
    else:
        try:
            admin.create_topics([NewTopic(topic, action.partitions, action.replication_factor)],
                                request_timeout=WAIT_S)[topic].result(WAIT_S)
            result = "none"
        except Exception as exc:  # noqa: BLE001
            result = _error_name(exc)
        tid = None
        if result == "none":
            def placed():
                im = metadata()
                t = im.topic_ids.get(topic)
                parts = im.partitions_of(t) if t is not None else {}
                return t if len(parts) == action.partitions and all(
                    p.leader >= 0 and ids.UNASSIGNED not in p.directories for p in parts.values()) else None
            tid = ids.to_base64(_wait(f"{topic} placed", placed))
        out = AdminResult(result, tid)
    event = fault_injected_event(action, index, ts_ns=ts, node_id=None, backend="admin")
    ledger.write(type(event)(ts_ns=event.ts_ns, source=event.source, event=event.event, node_id=None,
                             attrs={**event.attrs, "result": out.result, "topic_id": out.topic_id}))
    if action.action == "create-topic" and out.result == "none" and action.records:
        out.produced, out.acked = _produce(index, action, bootstrap, ledger)
    say(f"f{index}: {action.action} {topic}: {out.result}" + (f" (topic id {out.topic_id})" if out.topic_id else "")
        + (f"; {out.acked}/{out.produced} records acked" if out.produced else ""))
    return out


def _produce(index: int, action: AdminAction, bootstrap: str, ledger: LedgerWriter) -> tuple[int, int]:
    """``action.records`` values, acks=all, round-robin over the partitions; (sent, acked)."""
    from confluent_kafka import Producer
    from harness.workload.producer import value_of
    process = f"admin-f{index}"
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 20000, "log_level": 0})
    acked = [0]
    n = int(action.records or 0)
    for seq in range(n):
        vid, part = f"{process}-{seq}", seq % int(action.partitions or 1)
        ledger.op(time.time_ns(), "invoke", "produce", process, topic=action.topic, partition=part, value_id=vid)

        def done(err, msg, vid=vid, part=part):
            if err is None:
                acked[0] += 1
                ledger.op(time.time_ns(), "ok", "produce", process, topic=action.topic, partition=part,
                          value_id=vid, offset=msg.offset())
            else:
                ledger.op(time.time_ns(), "info", "produce", process, topic=action.topic, partition=part,
                          value_id=vid, error=str(err)[:200])
        while True:
            try:
                p.produce(action.topic, value_of(vid, VALUE_BYTES), partition=part, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(30)
    return n, acked[0]


class AdminNemesis:
    """The schedule's ``admin`` actions: ``reassign`` / ``elect`` through kafka-python
    (:func:`harness.nemesis.operator.run_scheduled`), ``delete-topic`` / ``create-topic`` through
    :func:`run_admin_action`. Over when injected; a refusal is one of the run's errors."""

    def inject(self, host: NemesisHost, index: int, fault: AdminAction) -> ActiveFault:
        if fault.action in OPERATOR_ACTIONS:
            from harness.nemesis.operator import run_scheduled
            node_id = host.node_of(fault.node) if fault.node is not None else None
            act = ActiveFault(index, fault, node_id, healed=True)
            act.answer = run_scheduled(host, index, fault, node_id)
            return act
        res = run_admin_action(index, fault, bootstrap=host.svc.bootstrap(), metadata=host.svc.metadata,
                               ledger=host.ledger, say=host.say)
        if res.result != "none":
            host.errors.append(f"f{index}: {fault.action} {fault.topic} answered {res.result}")
        elif fault.action == "create-topic":
            host.admin_topics[fault.topic] = int(fault.partitions or 0)
        else:
            host.admin_topics.pop(fault.topic, None)
        return ActiveFault(index, fault, None, healed=True, result=res)

    def heal(self, host: NemesisHost, act: ActiveFault) -> None:
        """Over when injected."""

    def describe(self, fault: AdminAction) -> str:
        return f"{fault.label()} {fault.node or fault.topic} {fault.dir}"
