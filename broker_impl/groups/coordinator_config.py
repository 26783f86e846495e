"""The group coordinator's settings, from server.properties (``offsets.topic.*``,
``offsets.commit.timeout.ms``, ``group.*``, ``offset.metadata.max.bytes``)."""

from __future__ import annotations

from dataclasses import dataclass

from broker_impl.errors import BrokerError
from broker_impl.groups.state.model import GroupConfig


class GroupConfigError(BrokerError, ValueError):
    """A group coordinator key in server.properties with an unusable value."""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    groups: GroupConfig = GroupConfig()
    offsets_partitions: int = 50          # offsets.topic.num.partitions
    offsets_replication_factor: int = 3   # offsets.topic.replication.factor
    commit_timeout_ms: int = 5000         # offsets.commit.timeout.ms

    KEYS = {  # key → (field, group field?, minimum)
        "offsets.topic.num.partitions": ("offsets_partitions", False, 1),
        "offsets.topic.replication.factor": ("offsets_replication_factor", False, 1),
        "offsets.commit.timeout.ms": ("commit_timeout_ms", False, 1),
        "group.min.session.timeout.ms": ("min_session_timeout_ms", True, 0),
        "group.max.session.timeout.ms": ("max_session_timeout_ms", True, 0),
        "group.initial.rebalance.delay.ms": ("initial_rebalance_delay_ms", True, 0),
        "group.max.size": ("max_size", True, 1),
        "offset.metadata.max.bytes": ("offset_metadata_max_bytes", True, 0),
    }

    @classmethod
    def from_properties(cls, raw: dict[str, str]) -> "CoordinatorConfig":
        top: dict[str, int] = {}
        grp: dict[str, int] = {}
        for key, (name, in_group, minimum) in cls.KEYS.items():
            text = raw.get(key)
            if text is None or not text.strip():
                continue
            try:
                value = int(text.strip())
            except ValueError:
                raise GroupConfigError(f"{key}={text!r}: not an integer") from None
            if value < minimum or value > 2**31 - 1:
                raise GroupConfigError(f"{key}={text!r}: must be in [{minimum}, {2**31 - 1}]")
            (grp if in_group else top)[name] = value
        return cls(groups=GroupConfig(**grp), **top)

