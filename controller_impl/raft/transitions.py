"""Role transitions of one voter's Raft state (unattached, voted, prospective, candidate,
leader, follower, resigned) and the election bookkeeping they keep: vote rounds, timeouts and
backoff, what was persisted and announced.

:class:`RoleTransitions` is a part of :class:`~controller_impl.raft.quorum.RaftState` and sees
it only through the :class:`VoterHost` protocol; the rules are in that module's docstring.

Who owns which fact: the host the voter's public state (role, epoch, vote, leader; the high
watermark, the flushed end, the leader's view of the replicas); this part the election
bookkeeping (the deadlines, the round's votes, the voters asked and when, the failed rounds,
what was last persisted and announced, the leader given up on). A transition to leader or
follower tells the host to reset its replication tracking (:meth:`VoterHost.start_leading`,
:meth:`VoterHost.start_following`).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Callable, Protocol

from controller_impl.raft import messages as m
from controller_impl.raft.config import (BACKOFF_BASE_MS, CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED,
                                         RETRY_MS_MAX, UNATTACHED, VOTED, RaftConfig, RaftInvariantError)

if TYPE_CHECKING:
    from controller_impl.raft.log_shape import LogShape


Ask = Callable[[], "m.VoteRequest | m.BeginEpochRequest"]  # the request of a round, built per voter


class VoterHost(Protocol):
    """The voter's state as its role transitions see it."""

    cfg: RaftConfig
    log: LogShape
    rng: random.Random
    role: str
    epoch: int
    voted_for: int
    leader_id: int
    replica_end: dict[int, int]

    @property
    def others(self) -> tuple[int, ...]:
        """The other voters."""
        ...

    def start_leading(self, now_ms: int) -> None:
        """Becoming leader: the epoch starts at the log end; no replica is known yet."""
        ...

    def start_following(self) -> None:
        """Following a new leader: its high watermark is not known yet."""
        ...


class RoleTransitions:
    """Transitions and election bookkeeping of :class:`~controller_impl.raft.quorum.RaftState`."""

    def __init__(self, host: VoterHost, now_ms: int) -> None:
        self.host = host
        self.persisted = (host.epoch, host.voted_for, host.leader_id)
        self.announced_epoch, self.announced_leader = host.epoch, host.leader_id
        self.leader_resigned = False       # the followed leader sent EndQuorumEpoch
        self.abandoned_leader = -1         # a leader given up on in this epoch: not followed again
        self.failed_rounds = 0
        self.granted: set[int] = set()
        self.refused: set[int] = set()
        self.asked_ms: dict[int, int] = {}  # voter -> when it was last asked (Vote, BeginQuorumEpoch)
        self.election_deadline = now_ms + self.election_timeout()
        self.fetch_deadline = now_ms + host.cfg.fetch_timeout_ms

    # ------------------------------------------------------------------ transitions
    def to_epoch_of(self, epoch: int, leader_id: int, now_ms: int, fx: list[m.Effect]) -> None:
        if leader_id >= 0 and leader_id != self.host.cfg.node_id:
            self.to_follower(epoch, leader_id, now_ms, fx)
        else:
            self.to_unattached(epoch, now_ms, fx)

    def _set_role(self, role: str, fx: list[m.Effect]) -> None:
        h = self.host
        previous = h.role
        changed = (role, h.epoch, h.leader_id) != (previous, self.announced_epoch, self.announced_leader)
        h.role = role
        self.asked_ms = {}
        self._persist(fx)
        if changed:  # a new pre-vote round in the same epoch is no news
            self.announced_epoch, self.announced_leader = h.epoch, h.leader_id
            fx.append(m.RoleChange(role, h.epoch, h.leader_id, previous))

    def _persist(self, fx: list[m.Effect]) -> None:
        h = self.host
        key = (h.epoch, h.voted_for, h.leader_id)
        if key != self.persisted:
            self.persisted = key
            fx.append(m.PersistQuorumState(*key))

    def to_unattached(self, epoch: int, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        if epoch != h.epoch:
            self.abandoned_leader = -1
        h.epoch, h.voted_for, h.leader_id = epoch, -1, -1
        self.leader_resigned = False
        self.election_deadline = now_ms + self.election_timeout()
        self._set_role(UNATTACHED, fx)

    def to_voted(self, candidate: int, now_ms: int, fx: list[m.Effect]) -> None:
        self.host.voted_for = candidate
        self.election_deadline = now_ms + self.election_timeout()
        self._set_role(VOTED, fx)

    def to_follower(self, epoch: int, leader_id: int, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        if leader_id == h.cfg.node_id:
            raise RaftInvariantError(f"node {leader_id} cannot follow itself")
        if epoch != h.epoch:
            h.voted_for = -1
            self.abandoned_leader = -1
        h.epoch, h.leader_id = epoch, leader_id
        h.start_following()
        self.leader_resigned = False
        self.failed_rounds = 0
        self.fetch_deadline = now_ms + h.cfg.fetch_timeout_ms
        self._set_role(FOLLOWER, fx)

    def to_prospective(self, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        if not h.cfg.pre_vote:
            self.to_candidate(now_ms, fx)
            return
        if h.role == LEADER:
            raise RaftInvariantError("a leader does not pre-vote")
        if h.role == FOLLOWER:  # the leader is gone: forget it, keep the epoch
            self.abandoned_leader = h.leader_id  # others may still name it: not followed again
            h.leader_id = -1
        self.election_deadline = now_ms + self.election_timeout() + self.backoff_ms()
        self._set_role(PROSPECTIVE, fx)
        self.granted, self.refused = {h.cfg.node_id}, set()
        self.ask_all(now_ms, fx, self.vote_request)
        self.maybe_won(now_ms, fx)

    def to_candidate(self, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        h.epoch += 1
        h.voted_for, h.leader_id = h.cfg.node_id, -1
        self.election_deadline = now_ms + self.election_timeout() + self.backoff_ms()
        self._set_role(CANDIDATE, fx)
        self.granted, self.refused = {h.cfg.node_id}, set()
        self.ask_all(now_ms, fx, self.vote_request)
        self.maybe_won(now_ms, fx)

    def to_leader(self, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        h.leader_id = h.cfg.node_id
        self.failed_rounds = 0
        h.start_leading(now_ms)
        self._set_role(LEADER, fx)
        fx.append(m.AppendEpochStart(h.epoch))
        self.ask_all(now_ms, fx, lambda: m.BeginEpochRequest(h.cfg.node_id, h.epoch))

    def to_resigned(self, now_ms: int, fx: list[m.Effect]) -> None:
        h = self.host
        successors = tuple(sorted(h.others, key=lambda v: -h.replica_end.get(v, -1)))
        self.election_deadline = now_ms + self.election_timeout()
        self._set_role(RESIGNED, fx)
        for v in h.others:
            fx.append(m.Send(v, m.EndEpochRequest(h.cfg.node_id, h.epoch, successors)))

    # ------------------------------------------------------------------ vote rounds, timeouts
    def maybe_won(self, now_ms: int, fx: list[m.Effect]) -> None:
        if len(self.granted) < self.host.cfg.majority:
            return
        if self.host.role == PROSPECTIVE:
            self.to_candidate(now_ms, fx)
        elif self.host.role == CANDIDATE:
            self.to_leader(now_ms, fx)

    def vote_request(self) -> m.VoteRequest:
        h = self.host
        pre = h.role == PROSPECTIVE
        return m.VoteRequest(h.cfg.node_id, h.epoch + 1 if pre else h.epoch,
                             h.log.last_epoch, h.log.end_offset, pre_vote=pre)

    def ask_all(self, now_ms: int, fx: list[m.Effect], build: Ask) -> None:
        self.asked_ms = {}
        for v in self.host.others:
            self.asked_ms[v] = now_ms
            fx.append(m.Send(v, build()))

    def resend(self, now_ms: int, fx: list[m.Effect], build: Ask) -> None:
        retry = self.retry_ms()
        for v, t in list(self.asked_ms.items()):
            if now_ms >= t + retry:
                self.asked_ms[v] = now_ms
                fx.append(m.Send(v, build()))

    def retry_ms(self) -> int:
        return max(1, min(RETRY_MS_MAX, self.host.cfg.election_timeout_ms // 4))

    def election_timeout(self) -> int:
        t = self.host.cfg.election_timeout_ms
        return t + self.host.rng.randint(0, t)

    def backoff_ms(self) -> int:
        if self.failed_rounds == 0:
            return 0
        cap = min(self.host.cfg.election_backoff_max_ms, BACKOFF_BASE_MS << min(self.failed_rounds, 10))
        return self.host.rng.randint(0, max(0, cap))
