"""``log.dir.failure.timeout.ms``: how long a broker may lead partitions in a failed dir.

Armed when a dir failure is propagated (deadline = failure time + timeout). One pending
check at a time: a newer failure replaces it (Kafka's shared ``offlineDirFailure`` tag;
safe because heartbeats are cumulative). Cleared when a heartbeat that carried the dir gets
an error-free response. At the deadline: shut down iff the failure is still unacknowledged
AND this broker leads ≥ 1 partition in that dir (KIP-858's condition).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kafka_common.ids import to_base64
from broker_impl.state.effects import Shutdown, event


class FailureTimer:
    def __init__(self, timeout_ms: int) -> None:
        if timeout_ms < 1:
            raise ValueError(f"log.dir.failure.timeout.ms must be >= 1, got {timeout_ms}")
        self.timeout_ms = timeout_ms
        self.pending: tuple[uuid.UUID, int] | None = None  # (dir, deadline)

    def arm(self, dir_id: uuid.UUID, now_ms: int) -> None:
        self.pending = (dir_id, now_ms + self.timeout_ms)

    def on_acked(self, dirs) -> None:
        if self.pending is not None and self.pending[0] in set(dirs):
            self.pending = None

    def next_deadline_ms(self) -> int | None:
        return None if self.pending is None else self.pending[1]

    def tick(self, now_ms: int, *, is_acknowledged: Callable[[uuid.UUID], bool],
             leads_partition_in: Callable[[uuid.UUID], bool], path_of: Callable[[uuid.UUID], str] = str) -> list:
        if self.pending is None or now_ms < self.pending[1]:
            return []
        dir_id, _ = self.pending
        self.pending = None
        if is_acknowledged(dir_id):
            return []
        if not leads_partition_in(dir_id):
            return [event("failure_timeout_expired", dir_id=to_base64(dir_id), leads_partition=False)]
        reason = (f"could not report the offline log dir {path_of(dir_id)} to the controller within "
                  f"{self.timeout_ms} ms while leading partitions in it")
        return [event("failure_timeout_shutdown", dir_id=to_base64(dir_id), reason=reason),
                Shutdown(reason, clean=False)]
