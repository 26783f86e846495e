"""Broker lifecycle: registration, heartbeats, fencing wishes, controlled shutdown.

Kafka's ``BrokerLifecycleManager`` as a pure state machine:

- ``start`` → SendRegistration (LogDirs fixed for the process).
- Registration OK → a heartbeat at once; errors → back-off 100 ms ×2 up to the session
  timeout, ±2 % jitter from the injected ``rng``; no success within
  ``initial_registration_timeout_ms`` → Shutdown.
- Heartbeats every ``heartbeat_interval_ms`` (10 ms while not caught up, like Kafka's
  STARTING) carrying the cumulative ``OfflineLogDirs``. At most ONE registration or
  heartbeat in flight (KAFKA-15950); an immediate send wanted while one is in flight is
  coalesced into the send after the response (a failed response keeps the back-off).
- ``want_fence`` = true until the broker has been unfenced once, as long as it is not ready
  (``set_ready_to_unfence``) or its assignment queue is non-empty. Once unfenced it
  never asks to be fenced again.
- An error-free heartbeat response acknowledges every dir it carried
  (:meth:`on_heartbeat_response` returns them, the failure timer is cleared with them).
- ``begin_controlled_shutdown`` → want_shut_down=true; ``should_shut_down`` → Shutdown.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kafka_common.ids import to_base64
from broker_impl.state.effects import SendHeartbeat, SendRegistration, Shutdown, event

NONE = 0


class State(enum.Enum):
    NOT_STARTED = "not_started"
    STARTING = "starting"          # registering / not yet caught up
    RECOVERY = "recovery"          # caught up, still fenced
    RUNNING = "running"            # unfenced at least once
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    initial_registration_timeout_ms: int = 60000
    controlled_shutdown_timeout_ms: int = 30000
    starting_heartbeat_ms: int = 10
    pending_shutdown_heartbeat_ms: int = 50
    initial_backoff_ms: int = 100
    jitter: float = 0.02


def backoff_ms(failures: int, initial_ms: int, max_ms: int, jitter: float, rng) -> int:
    """``initial·2^failures`` capped at ``max_ms``, times (1 ± jitter) drawn from ``rng``."""
    base = min(initial_ms * (2 ** min(failures, 40)), max_ms)
    if jitter <= 0:
        return int(base)
    return max(0, int(base * (1 + (rng.random() * 2 - 1) * jitter)))


class Lifecycle:
    def __init__(self, registration_dirs: tuple[uuid.UUID, ...], config: LifecycleConfig, rng) -> None:
        self.config = config
        self.rng = rng
        self.registration_dirs = registration_dirs
        self.state = State.NOT_STARTED
        self.registered = False
        self.broker_epoch = -1
        self.metadata_offset = -1
        self.ready_to_unfence = False
        self.queued_assignments = 0
        self.is_fenced = True
        self._unfenced_once = False
        # the dir failures this broker reports in every heartbeat: dir id → acknowledged by
        # the controller? (insertion order = failure order; never cleared). Whether a dir is
        # offline is LogDirs' fact; this is only what the controller was told and confirmed.
        self.dir_reports: dict[uuid.UUID, bool] = {}
        self._in_flight: str | None = None            # "registration" | "heartbeat"
        self._in_flight_dirs: tuple[uuid.UUID, ...] = ()
        self._next_send_ms: int | None = None
        self._immediate_after_response = False
        self._failures = 0
        self._started_ms = 0
        self._shutdown_deadline_ms: int | None = None
        self._first_pending_response = True
        self.last_registration_error: int | None = None  # -1: no response

    # ------------------------------------------------------------------ queries
    @property
    def in_flight(self) -> str | None:
        return self._in_flight

    @property
    def want_fence(self) -> bool:
        if self._unfenced_once:
            return False
        return not self.ready_to_unfence or self.queued_assignments > 0

    @property
    def want_shut_down(self) -> bool:
        return self.state == State.PENDING_CONTROLLED_SHUTDOWN

    def next_deadline_ms(self) -> int | None:
        ds = [d for d in (self._next_send_ms if self._in_flight is None else None,
                          self._shutdown_deadline_ms) if d is not None]
        if self.state == State.STARTING and not self.registered:
            ds.append(self._started_ms + self.config.initial_registration_timeout_ms)
        return min(ds) if ds else None

    # ------------------------------------------------------------------ inputs
    def start(self, now_ms: int) -> list:
        if self.state != State.NOT_STARTED:
            raise RuntimeError("lifecycle already started")
        self.state = State.STARTING
        self._started_ms = now_ms
        self._next_send_ms = now_ms
        return self.tick(now_ms)

    def tick(self, now_ms: int) -> list:
        if self.state in (State.NOT_STARTED, State.SHUTTING_DOWN):
            return []
        if (self.state == State.STARTING and not self.registered
                and now_ms >= self._started_ms + self.config.initial_registration_timeout_ms):
            last = "" if self.last_registration_error is None else f" (last error code {self.last_registration_error})"
            return self._shutdown("unable to register with the controller quorum within "
                                  f"{self.config.initial_registration_timeout_ms} ms{last}", clean=False)
        if self._shutdown_deadline_ms is not None and now_ms >= self._shutdown_deadline_ms:
            return self._shutdown("timed out waiting for the controller to approve controlled shutdown")
        if self._in_flight is not None or self._next_send_ms is None or now_ms < self._next_send_ms:
            return []
        self._next_send_ms = None
        if not self.registered:
            self._in_flight = "registration"
            return [SendRegistration(self.registration_dirs)]
        self._in_flight = "heartbeat"
        self._in_flight_dirs = tuple(self.dir_reports)
        out: list = [SendHeartbeat(self.broker_epoch, self.metadata_offset, self.want_fence,
                                   self.want_shut_down, self._in_flight_dirs)]
        unacked = [d for d in self._in_flight_dirs if not self.dir_reports[d]]
        if unacked:
            out.append(event("dir_failure_reported", dir_ids=[to_base64(d) for d in unacked]))
        return out

    def _schedule(self, delay_ms: int, now_ms: int) -> None:
        when = now_ms + delay_ms
        if self._next_send_ms is None or when < self._next_send_ms:
            self._next_send_ms = when

    def _send_now(self, now_ms: int) -> list:
        """Immediate send, or coalesced after the in-flight response."""
        if self._in_flight is not None:
            self._immediate_after_response = True
            return []
        self._schedule(0, now_ms)
        return self.tick(now_ms)

    def _backoff(self, now_ms: int) -> None:
        self._immediate_after_response = False  # after a failure the back-off wins
        delay = backoff_ms(self._failures, self.config.initial_backoff_ms, self.config.session_timeout_ms,
                           self.config.jitter, self.rng)
        self._failures += 1
        self._next_send_ms = now_ms + delay

    def on_registration_response(self, error_code: int, broker_epoch: int, now_ms: int) -> list:
        if self._in_flight != "registration":
            raise RuntimeError("registration response without a registration in flight")
        self._in_flight = None
        if error_code != NONE:
            self.last_registration_error = error_code
            self._backoff(now_ms)
            return [event("registration_failed", error_code=error_code)] + self.tick(now_ms)
        self._failures = 0
        self.registered = True
        self.broker_epoch = broker_epoch
        self._immediate_after_response = False
        self._next_send_ms = now_ms
        return [event("registered", broker_epoch=broker_epoch,
                      log_dirs=[to_base64(d) for d in self.registration_dirs])] + self.tick(now_ms)

    def on_heartbeat_response(self, error_code: int, now_ms: int, *, is_caught_up: bool = False,
                              is_fenced: bool = True, should_shut_down: bool = False) -> tuple[list, tuple[uuid.UUID, ...]]:
        """Returns (effects, dirs newly acknowledged by this error-free response)."""
        if self._in_flight != "heartbeat":
            raise RuntimeError("heartbeat response without a heartbeat in flight")
        self._in_flight = None
        carried, self._in_flight_dirs = self._in_flight_dirs, ()
        if error_code != NONE:
            self._backoff(now_ms)
            return [event("heartbeat_failed", error_code=error_code)] + self.tick(now_ms), ()
        self._failures = 0
        out: list = []
        acked = tuple(d for d in carried if not self.dir_reports.get(d, True))
        for d in acked:
            self.dir_reports[d] = True
        if acked:
            out.append(event("dir_failure_acked", dir_ids=[to_base64(d) for d in acked]))
        if is_fenced != self.is_fenced:
            self.is_fenced = is_fenced
            out.append(event("fenced" if is_fenced else "unfenced", broker_epoch=self.broker_epoch))
        if self.state == State.STARTING and is_caught_up:
            self.state = State.RECOVERY
        if self.state == State.RECOVERY and not is_fenced:
            self.state = State.RUNNING
            self._unfenced_once = True
        if self.state == State.PENDING_CONTROLLED_SHUTDOWN:
            if should_shut_down:
                return out + self._shutdown("controlled shutdown approved by the controller"), acked
            delay = self.config.pending_shutdown_heartbeat_ms if self._first_pending_response \
                else self.config.heartbeat_interval_ms
            self._first_pending_response = False
        elif self.state == State.STARTING:
            delay = self.config.starting_heartbeat_ms
        else:
            delay = self.config.heartbeat_interval_ms
        if self._immediate_after_response:
            self._immediate_after_response = False
            delay = 0
        self._schedule(delay, now_ms)
        return out + self.tick(now_ms), acked

    def on_request_failed(self, now_ms: int) -> tuple[list, tuple[uuid.UUID, ...]]:
        """Timeout / disconnect of whatever is in flight: acknowledges nothing."""
        if self._in_flight == "registration":
            return self.on_registration_response(-1, -1, now_ms), ()
        if self._in_flight == "heartbeat":
            return self.on_heartbeat_response(-1, now_ms)
        return [], ()

    def on_dir_failure(self, dir_id: uuid.UUID, now_ms: int) -> list:
        if dir_id in self.dir_reports:
            return []
        self.dir_reports[dir_id] = False
        if not self.registered:
            return []  # rides along in the first heartbeat after registration
        return self._send_now(now_ms)

    def is_acknowledged(self, dir_id: uuid.UUID) -> bool:
        return self.dir_reports.get(dir_id, False)

    def on_metadata_offset(self, offset: int) -> None:
        self.metadata_offset = max(self.metadata_offset, offset)

    def set_ready_to_unfence(self, now_ms: int) -> list:
        if self.ready_to_unfence:
            return []
        self.ready_to_unfence = True
        return self._send_now(now_ms) if self.registered else []

    def set_queued_assignments(self, count: int, now_ms: int) -> list:
        """The heartbeat after the queue drains goes at once (so unfencing is not
        delayed by a heartbeat interval)."""
        was = self.queued_assignments
        self.queued_assignments = count
        if was > 0 and count == 0 and self.registered and self.ready_to_unfence and not self._unfenced_once:
            return self._send_now(now_ms)
        return []

    def begin_controlled_shutdown(self, now_ms: int) -> list:
        if self.state in (State.PENDING_CONTROLLED_SHUTDOWN, State.SHUTTING_DOWN):
            return []
        if not self.registered or self.state == State.NOT_STARTED:
            return self._shutdown("shutdown requested before registration")
        self.state = State.PENDING_CONTROLLED_SHUTDOWN
        self._first_pending_response = True
        self._shutdown_deadline_ms = now_ms + self.config.controlled_shutdown_timeout_ms
        return [event("controlled_shutdown_requested")] + self._send_now(now_ms)

    def _shutdown(self, reason: str, clean: bool = True) -> list:
        self.state = State.SHUTTING_DOWN
        self._next_send_ms = None
        self._shutdown_deadline_ms = None
        return [event("shutdown", reason=reason), Shutdown(reason, clean)]
