"""A voter's Raft configuration, its roles, and the error a broken Raft rule raises."""

from __future__ import annotations

from dataclasses import dataclass

from controller_impl.errors import ControllerError

UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER, RESIGNED = (
    "unattached", "voted", "prospective", "candidate", "leader", "follower", "resigned")
RETRY_MS_MAX = 250
BACKOFF_BASE_MS = 50


class RaftInvariantError(ControllerError):
    """A rule of Raft would be broken (a committed record would be lost): never expected."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: int
    voters: tuple[int, ...]
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    pre_vote: bool = True

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1
