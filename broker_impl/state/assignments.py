"""AssignmentsManager: queue and batch AssignReplicasToDirs (KAFKA-17190 shape).

- ``queue`` puts one entry per partition; the last writer wins (the superseded entry is
  dropped and never acknowledged).
- Send deadline (``AssignmentsManagerDeadlineFunction``): with previous global failures →
  now + backoff(failures) (200 ms, 400 ms, … ≤ 10 s, ±2 % jitter); else with more than
  ``max_per_request`` ready and nothing in flight → now; else now + ``window_ms`` (100).
  An earlier existing deadline is kept, so later items never postpone a batch.
- At most one request in flight, ≤ ``max_per_request`` (2250) partitions each. Before
  sending, entries that are no longer valid (topic/partition gone, broker no longer a
  replica: KAFKA-16886, KAFKA-17190) are dropped.
- Response: a global error (or no response) puts every sent entry back unless a newer one
  is queued, and backs off; per-partition errors and missing results are put back the
  same way and retried after the window; NONE acknowledges.
- ``queued`` = ready + in flight (metric ``QueuedReplicaToDirAssignments``; unfencing waits for it to be 0).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from broker_impl.state.effects import Assignment, SendAssignments, event
from broker_impl.state.lifecycle import backoff_ms
from kafka_common.ids import TopicId

NONE = 0
Key = tuple[TopicId, int]


class AssignmentsManager:
    def __init__(self, rng, *, window_ms: int = 100, max_per_request: int = 2250,
                 backoff_initial_ms: int = 100, backoff_max_ms: int = 10_000, jitter: float = 0.02) -> None:
        self.rng = rng
        self.window_ms = window_ms
        self.max_per_request = max_per_request
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.jitter = jitter
        self.ready: dict[Key, Assignment] = {}
        self.in_flight: dict[Key, Assignment] = {}
        self.previous_global_failures = 0
        self.deadline_ms: int | None = None
        self._seq = 0
        self.dropped = 0  # invalidated before sending (counter for tests/metrics)

    @property
    def queued(self) -> int:
        """QueuedReplicaToDirAssignments."""
        return len(self.ready) + len(self.in_flight)

    def next_deadline_ms(self) -> int | None:
        return self.deadline_ms if not self.in_flight else None

    def _reschedule(self, now_ms: int) -> None:
        if not self.ready:
            return
        if self.previous_global_failures > 0:
            when = now_ms + backoff_ms(self.previous_global_failures, self.backoff_initial_ms,
                                       self.backoff_max_ms, self.jitter, self.rng)
        elif len(self.ready) > self.max_per_request and not self.in_flight:
            when = now_ms
        else:
            when = now_ms + self.window_ms
        if self.deadline_ms is None or when < self.deadline_ms:
            self.deadline_ms = when

    def queue(self, topic_id: TopicId, partition: int, dir_id: uuid.UUID, reason: str, now_ms: int) -> Assignment:
        self._seq += 1
        a = Assignment(topic_id, partition, dir_id, reason, now_ms, self._seq)
        self.ready[a.key] = a  # last writer wins
        self._reschedule(now_ms)
        return a

    def tick(self, now_ms: int, *, broker_epoch: int, is_valid: Callable[[TopicId, int], bool]) -> list:
        if self.in_flight or self.deadline_ms is None or now_ms < self.deadline_ms:
            return []
        self.deadline_ms = None
        batch: list[Assignment] = []
        invalid = 0
        for key in list(self.ready):
            if len(batch) >= self.max_per_request:
                break
            a = self.ready.pop(key)
            if is_valid(a.topic_id, a.partition):
                batch.append(a)
            else:
                invalid += 1
        self.dropped += invalid
        out: list = []
        if invalid:
            out.append(event("assignment_dropped", count=invalid))
        if not batch:
            self._reschedule(now_ms)
            return out
        self.in_flight = {a.key: a for a in batch}
        return out + [SendAssignments(broker_epoch, tuple(batch)),
                      event("assignment_sent", count=len(batch), queued=self.queued)]

    def on_response(self, error_code: int, results: Mapping[Key, int], now_ms: int) -> tuple[list, tuple[Assignment, ...]]:
        """``error_code`` is the top-level error (non-zero also for timeout/disconnect);
        ``results`` maps (topic id, partition) → per-partition error code.
        Returns (effects, the acknowledged assignments)."""
        if not self.in_flight:
            raise RuntimeError("assignments response without a request in flight")
        sent, self.in_flight = self.in_flight, {}
        acked: list[Assignment] = []
        retry = 0
        if error_code != NONE:
            self.previous_global_failures += 1
            for key, a in sent.items():
                self.ready.setdefault(key, a)
            out: list = [event("assignment_failed", count=len(sent), error_code=error_code)]
        else:
            self.previous_global_failures = 0
            for key, a in sent.items():
                code = results.get(key)
                if code == NONE:
                    acked.append(a)
                else:
                    retry += 1
                    self.ready.setdefault(key, a)
            out = [event("assignment_acked", count=len(acked), retried=retry, queued=self.queued)]
        if error_code != NONE:
            self.deadline_ms = None  # the back-off wins over a window opened while in flight
        self._reschedule(now_ms)
        return out, tuple(acked)
