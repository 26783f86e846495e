"""Readers: consumers that start behind and read a partition from its beginning, as a service
(their reads are client ops the analysis measures; the drain is not service).

A reader (``workload.readers``: topic, partition, ``start_at_ms``) is a librdkafka consumer by
assignment, no group. At ``start_at_ms`` after the workload's start it assigns the partition
at its first offset, reads the whole log — the oldest segments included, which a reader at
the tail never touches — and then follows the tail until the workload stops. Every record is
a consume op of process ``reader-<i>`` whose ``error`` says when its value is not what was
produced (``harness.workload.producer.consumed_error``); ``check.crcs`` is off (librdkafka's
default) so that a corrupt batch a broker served reaches that check. A consumer error (a
fetch that failed, e.g. KAFKA_STORAGE_ERROR while the leader's dir fails) is a ``fail``
consume op with the error: the analysis counts those and the gaps between reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from harness.workload.producer import consumed_error, value_id_of

Say = Callable[[str], None]
__all__ = ["Reader"]


class Reader:
    def __init__(self, index: int, bootstrap: Callable[[], str], ledger: Any, topic: str, partition: int,
                 say: Say = lambda _m: None) -> None:
        self.process = f"reader-{index}"
        self.bootstrap = bootstrap
        self.ledger = ledger
        self.topic, self.partition = topic, partition
        self.say = say
        self.counts = {"consumed": 0, "corrupt": 0, "errors": 0}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.process, daemon=True)
        self._thread.start()
        self.say(f"{self.process}: reading {self.topic}-{self.partition} from its beginning")

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
        try:
            c = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": f"jbodlab-{self.process}",
                          "client.id": f"jbodlab-{self.process}", "enable.auto.commit": False,
                          "enable.partition.eof": False, "check.crcs": False, "log_level": 0,
                          "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
                          "fetch.error.backoff.ms": 100})
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{self.process}: cannot create the consumer: {exc}")
            return
        try:
            c.assign([TopicPartition(self.topic, self.partition, OFFSET_BEGINNING)])
            while not self._stop.is_set():
                for m in c.consume(500, 0.2):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        self.counts["errors"] += 1
                        self.ledger.op(time.time_ns(), "fail", "consume", self.process, topic=self.topic,
                                       partition=self.partition, error=str(err)[:200])
                        continue
                    bad = consumed_error(m.value())
                    self.counts["consumed"] += 1
                    self.counts["corrupt"] += bad is not None
                    self.ledger.op(time.time_ns(), "ok", "consume", self.process, topic=m.topic(),
                                   partition=m.partition(), value_id=value_id_of(m.value()), offset=m.offset(),
                                   error=bad)
        except Exception as exc:  # noqa: BLE001 - the run goes on; its ops say what happened
            self.errors.append(f"{self.process}: {type(exc).__name__}: {exc}")
        finally:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
