"""Broker sessions (soft state, not in the log) and the heartbeat's fencing decision.

A session is the time of the broker's last heartbeat (or registration). It lives only in
the active controller: after a restart every broker's clock starts fresh at the first
tick, as in Kafka. ``has_valid_session`` = unfenced and heard from within the timeout;
it decides DUPLICATE_BROKER_REGISTRATION. ``expired`` lists the unfenced brokers that
have been silent longer than ``broker.session.timeout.ms`` (they get fenced).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.model import BrokerRegistration


class BrokerSessions:
    def __init__(self, timeout_ms: int) -> None:
        if timeout_ms <= 0:
            raise ValueError(f"broker.session.timeout.ms must be > 0, got {timeout_ms}")
        self.timeout_ms = timeout_ms
        self.last_contact_ms: dict[int, int] = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        self.last_contact_ms[broker_id] = now_ms

    def remove(self, broker_id: int) -> None:
        self.last_contact_ms.pop(broker_id, None)

    def has_valid_session(self, reg: BrokerRegistration | None, now_ms: int) -> bool:
        if reg is None or reg.fenced:
            return False
        last = self.last_contact_ms.get(reg.broker_id)
        return last is not None and now_ms - last <= self.timeout_ms

    def expired(self, image: MetadataImage, now_ms: int) -> list[int]:
        """Unfenced brokers silent for longer than the timeout, by id. A broker without a
        session (controller restarted) gets one starting now."""
        out = []
        for broker_id, reg in image.brokers.items():
            if reg.fenced:
                continue
            last = self.last_contact_ms.setdefault(broker_id, now_ms)
            if now_ms - last > self.timeout_ms:
                out.append(broker_id)
        return sorted(out)

    def next_deadline_ms(self, image: MetadataImage) -> int | None:
        """When the oldest unfenced session expires (for a runtime that wants to sleep)."""
        times = [self.last_contact_ms[b] for b, reg in image.brokers.items()
                 if not reg.fenced and b in self.last_contact_ms]
        return min(times) + self.timeout_ms + 1 if times else None


class Transition(enum.Enum):
    NONE = "none"
    UNFENCE = "unfence"
    FENCE = "fence"
    SHUTDOWN = "shutdown"  # move leaderships away, fence, answer should_shut_down


@dataclass(frozen=True, slots=True)
class HeartbeatFacts:
    fenced: bool
    want_fence: bool
    want_shut_down: bool
    caught_up: bool            # current_metadata_offset >= offset of its RegisterBrokerRecord
    assignments_known: bool    # D4: no UNASSIGNED replica on a multi-dir broker
    has_online_dir: bool       # False when every registered dir is reported offline


def next_transition(f: HeartbeatFacts) -> Transition:
    """Kafka's ``calculateNextBrokerState`` with D4 and the all-dirs-offline decision."""
    if f.want_shut_down:
        return Transition.SHUTDOWN
    if f.fenced:
        if not f.want_fence and f.caught_up and f.assignments_known and f.has_online_dir:
            return Transition.UNFENCE
        return Transition.NONE
    if f.want_fence or not f.has_online_dir:
        return Transition.FENCE
    return Transition.NONE
