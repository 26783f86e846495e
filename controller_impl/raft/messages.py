"""Raft's RPCs between voters and the effects of :class:`~controller_impl.raft.quorum.RaftState`,
as plain values. Error codes are kio ``ErrorCode`` values (Kafka's numbers)."""

from __future__ import annotations

from dataclasses import dataclass

from kafka_common.wire import ErrorCode

NONE = ErrorCode.none
FENCED_LEADER_EPOCH = ErrorCode.fenced_leader_epoch          # 74: the sender's epoch is old
UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_leader_epoch        # 75: the sender is ahead of us
NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower    # 6: ask the leader
INCONSISTENT_VOTER_SET = ErrorCode.inconsistent_voter_set    # 94: not one of our voters
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range          # 1


# -- requests and responses -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_id: int
    candidate_epoch: int          # for a pre-vote: the epoch the candidate would take
    last_epoch: int
    last_epoch_end_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: ErrorCode
    epoch: int                    # the voter's epoch
    leader_id: int                # -1 if unknown
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginEpochRequest:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class EpochResponse:
    """BeginQuorumEpoch's and EndQuorumEpoch's answer."""
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int               # -1: an observer (a broker)
    leader_epoch: int             # the fetcher's view of the current epoch (-1: unknown)
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The leader's decision on a Fetch; the runtime reads ``[read_from, read_limit)``."""
    error: ErrorCode
    epoch: int
    leader_id: int
    high_watermark: int
    log_start_offset: int = 0
    diverging: tuple[int, int] | None = None      # (epoch, end offset): truncate first
    snapshot_id: tuple[int, int] | None = None    # (end offset, epoch): fetch a snapshot first
    read_from: int | None = None
    read_limit: int = 0

    @property
    def readable(self) -> bool:
        return self.read_from is not None and self.read_from < self.read_limit


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """What a follower learns from the leader's answer (the records go to the log apart)."""
    error: ErrorCode
    epoch: int
    leader_id: int
    high_watermark: int
    diverging: tuple[int, int] | None = None
    snapshot_id: tuple[int, int] | None = None


# -- effects --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    """Write the quorum-state file (durably) BEFORE sending anything returned with it."""
    epoch: int
    voted_for: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: VoteRequest | BeginEpochRequest | EndEpochRequest


@dataclass(frozen=True, slots=True)
class AppendEpochStart:
    """A new leader writes one record of its epoch at once (Kafka's LeaderChangeMessage):
    the high watermark cannot pass the epoch start before a record of the epoch is held by
    a majority, which is what commits the older epochs' tail."""
    epoch: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int


@dataclass(frozen=True, slots=True)
class FetchSnapshot:
    leader_id: int
    snapshot_id: tuple[int, int]  # (end offset, epoch)


@dataclass(frozen=True, slots=True)
class HighWatermark:
    offset: int                   # records below it are committed


@dataclass(frozen=True, slots=True)
class RoleChange:
    role: str
    epoch: int
    leader_id: int
    previous_role: str


Effect = PersistQuorumState | Send | AppendEpochStart | TruncateTo | FetchSnapshot | HighWatermark | RoleChange
