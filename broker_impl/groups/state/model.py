"""Values of the group coordinator's pure state: groups, members, results, effects, config.

See :mod:`broker_impl.groups.state.group` for the rules that change them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Union

CONSUMER = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker keys for the classic group coordinator (defaults as in Kafka)."""
    min_session_timeout_ms: int = 6000            # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000         # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000        # group.initial.rebalance.delay.ms
    max_size: int = 2147483647                    # group.max.size
    offset_metadata_max_bytes: int = 4096         # offset.metadata.max.bytes


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: int | None = None        # a JoinGroup parked until the join phase ends
    sync_token: int | None = None        # a SyncGroup parked until the leader's assignment is stored
    heartbeat_deadline_ms: int = 0
    synced: bool = False                 # sent SyncGroup for the current generation

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()   # (member id, instance id, metadata), leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Reply:
    token: int
    result: Union[JoinResult, SyncResult]


@dataclass(frozen=True, slots=True)
class StoreGroup:
    group_id: str
    generation: int
    replies: tuple[Reply, ...] = ()


Effect = Union[Reply, StoreGroup]


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)      # instance id → member id
    pending_members: dict[str, int] = field(default_factory=dict)     # member id → deadline (MEMBER_ID_REQUIRED)
    join_deadline_ms: int | None = None
    initial_delay_end_ms: int | None = None    # first rebalance of an Empty group: the delay phase
    initial_joined: bool = False               # a member joined during the current delay window
    sync_deadline_ms: int | None = None
    state_timestamp_ms: int = 0
    offsets: dict[tuple[str, int], OffsetEntry] = field(default_factory=dict)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_token is not None for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), or None when unknown."""
        if self.protocol_type != CONSUMER or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription(m.metadata(self.protocol))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def parse_subscription(data: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (int16 version, array of strings, …)."""
    try:
        if len(data) < 6:
            return None
        n = int.from_bytes(data[2:6], "big", signed=True)
        pos, out = 6, []
        for _ in range(max(n, 0)):
            length = int.from_bytes(data[pos:pos + 2], "big", signed=True)
            pos += 2
            if length < 0 or pos + length > len(data):
                return None
            out.append(data[pos:pos + length].decode())
            pos += length
        return out
    except (UnicodeDecodeError, IndexError):
        return None
