"""Group consumers for the lab's workload (kafkatest's console consumer in a group).

:class:`GroupConsumerWorkload` runs ``members`` confluent-kafka consumers in one consumer
group, subscribed to the workload's topics, each in its own thread. Per polled batch:

1. every record is written to the ledger as an ``ok`` consume op (process ``group-m<i>``);
2. then the member commits the batch's next offsets synchronously ("commit after
   processing"); a commit the coordinator acknowledged is written as a client event
   ``offsets_committed`` (group, member, topic, partition, offset), a refused or failed one as
   ``offsets_commit_failed`` (error).

Rebalances are client events too: ``group_subscribed`` (a member starts), ``group_revoked`` /
``group_assigned`` (member, partitions) — :func:`harness.checkers.group_consumption.rebalance_ms`
pairs them. :meth:`stop` keeps the
members consuming until every partition's committed offset reaches the end offset read when
the producers stopped (bounded by ``timeout_s``), then reads the group's committed offsets
back (``offsets_fetched``: what the coordinator answers at the end) and closes the members
(LeaveGroup).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from harness.checkers.group_consumption import GROUP_PROCESS_PREFIX
from harness.history.model import Event
from harness.results.ledger import LedgerWriter
from harness.workload.producer import consumed_error, value_id_of

__all__ = ["GroupConsumerWorkload", "GROUP_PROCESS_PREFIX"]
Say = Callable[[str], None]


class GroupConsumerWorkload:
    def __init__(self, bootstrap: Callable[[], str], ledger: LedgerWriter, *, group: str, topics: list[str],
                 members: int = 2, session_timeout_ms: int = 6000, say: Say = lambda _m: None) -> None:
        self.bootstrap = bootstrap
        self.ledger = ledger
        self.group = group
        self.topics = list(topics)
        self.members = members
        self.session_timeout_ms = session_timeout_ms
        self.say = say
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.committed: dict[tuple[str, int], int] = {}
        self.counts = {"consumed": 0, "commits": 0, "commit_failures": 0, "rebalances": 0}
        self.errors: list[str] = []

    def _event(self, event: str, **attrs: Any) -> None:
        self.ledger.write(Event(ts_ns=time.time_ns(), source="client", event=event,
                                attrs={"group": self.group, **attrs}))

    def start(self) -> None:
        for i in range(self.members):
            t = threading.Thread(target=self._run, args=(i,), name=f"{GROUP_PROCESS_PREFIX}{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def _consumer(self, process: str) -> Any:
        from confluent_kafka import Consumer
        return Consumer({"bootstrap.servers": self.bootstrap(), "group.id": self.group,
                         "client.id": f"jbodlab-{process}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": self.session_timeout_ms,
                         "heartbeat.interval.ms": max(100, self.session_timeout_ms // 6),
                         "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000, "log_level": 0,
                         "check.crcs": False})   # a corrupt batch a broker served must reach the value check

    def _run(self, index: int) -> None:
        process = f"{GROUP_PROCESS_PREFIX}{index}"
        try:
            c = self._consumer(process)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{process}: cannot create the consumer: {exc}")
            return

        def on_assign(_c: Any, parts: list) -> None:
            self._event("group_assigned", member=process, partitions=[[p.topic, p.partition] for p in parts])
            with self._lock:
                self.counts["rebalances"] += 1

        def on_revoke(_c: Any, parts: list) -> None:
            self._event("group_revoked", member=process, partitions=[[p.topic, p.partition] for p in parts])
        self._event("group_subscribed", member=process)
        c.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self._stop.is_set():
                batch = c.consume(200, 0.2)
                records = [m for m in batch if m.error() is None]
                if not records:
                    continue
                upto: dict[tuple[str, int], int] = {}
                for m in records:
                    key = (m.topic(), m.partition())
                    self.ledger.op(time.time_ns(), "ok", "consume", process, topic=key[0], partition=key[1],
                                   value_id=value_id_of(m.value()), offset=m.offset(),
                                   error=consumed_error(m.value()))
                    upto[key] = m.offset() + 1
                with self._lock:
                    self.counts["consumed"] += len(records)
                self._commit(c, process, upto)
        finally:
            try:
                c.close()
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"{process}: close: {exc}")

    def _commit(self, c: Any, process: str, upto: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        offsets = [TopicPartition(t, p, o) for (t, p), o in upto.items()]
        try:
            result = c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._event("offsets_commit_failed", member=process, error=str(exc)[:200],
                        partitions=[[t, p, o] for (t, p), o in upto.items()])
            with self._lock:
                self.counts["commit_failures"] += 1
            return
        for tp in result or ():
            if tp.error is not None:
                self._event("offsets_commit_failed", member=process, topic=tp.topic, partition=tp.partition,
                            offset=tp.offset, error=str(tp.error)[:200])
                with self._lock:
                    self.counts["commit_failures"] += 1
                continue
            self._event("offsets_committed", member=process, topic=tp.topic, partition=tp.partition,
                        offset=tp.offset)
            with self._lock:
                self.committed[(tp.topic, tp.partition)] = max(self.committed.get((tp.topic, tp.partition), 0),
                                                               tp.offset)
                self.counts["commits"] += 1

    def end_offsets(self, partitions: dict[str, int]) -> dict[tuple[str, int], int]:
        """The end (high watermark) of every partition now: what the group must commit up to."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": f"{self.group}-ends", "log_level": 0})
        try:
            return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=20)[1]
                    for t, n in partitions.items() for p in range(n)}
        finally:
            c.close()

    def stop(self, ends: dict[tuple[str, int], int], timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """Consume until every partition's committed offset reaches ``ends`` (or the timeout),
        stop the members, and read the committed offsets back; returns them."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                behind = {k: e for k, e in ends.items() if self.committed.get(k, 0) < e}
            if not behind:
                break
            time.sleep(0.1)
        else:
            self.say(f"group {self.group}: not caught up within {timeout_s:.0f} s: {behind}")
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        fetched = self.fetch_committed(list(ends))
        self._event("offsets_fetched", offsets=[[t, p, o] for (t, p), o in sorted(fetched.items())])
        return fetched

    def fetch_committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": self.group, "log_level": 0})
        try:
            got = c.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
        finally:
            c.close()
        return {(tp.topic, tp.partition): tp.offset for tp in got}
