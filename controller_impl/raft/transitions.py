"""Role transitions of one voter's Raft state (unattached, voted, prospective, candidate,
leader, follower, resigned) and the helpers the message handlers share: vote rounds,
timeouts and backoff, answers, truncation, the high watermark.

:class:`RoleTransitions` is mixed into :class:`~controller_impl.raft.quorum.RaftState` and
works on its attributes; the rules are in that module's docstring."""

from __future__ import annotations

from controller_impl.raft import messages as m
from controller_impl.raft.config import (BACKOFF_BASE_MS, CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED,
                                         RETRY_MS_MAX, UNATTACHED, VOTED, RaftInvariantError)


class RoleTransitions:
    """Transitions and shared helpers of :class:`~controller_impl.raft.quorum.RaftState`."""

    # ------------------------------------------------------------------ transitions
    def _to_epoch_of(self, epoch: int, leader_id: int, now_ms: int, fx: list[m.Effect]) -> None:
        if leader_id >= 0 and leader_id != self.cfg.node_id:
            self._to_follower(epoch, leader_id, now_ms, fx)
        else:
            self._to_unattached(epoch, now_ms, fx)

    def _set_role(self, role: str, fx: list[m.Effect]) -> None:
        previous = self.role
        changed = (role, self.epoch, self.leader_id) != (previous, self._announced_epoch, self._announced_leader)
        self.role = role
        self._asked_ms = {}
        self._persist(fx)
        if changed:  # a new pre-vote round in the same epoch is no news
            self._announced_epoch, self._announced_leader = self.epoch, self.leader_id
            fx.append(m.RoleChange(role, self.epoch, self.leader_id, previous))

    def _persist(self, fx: list[m.Effect]) -> None:
        key = (self.epoch, self.voted_for, self.leader_id)
        if key != self._persisted:
            self._persisted = key
            fx.append(m.PersistQuorumState(*key))

    def _to_unattached(self, epoch: int, now_ms: int, fx: list[m.Effect]) -> None:
        if epoch != self.epoch:
            self._abandoned_leader = -1
        self.epoch, self.voted_for, self.leader_id = epoch, -1, -1
        self._leader_resigned = False
        self._election_deadline = now_ms + self._election_timeout()
        self._set_role(UNATTACHED, fx)

    def _to_voted(self, candidate: int, now_ms: int, fx: list[m.Effect]) -> None:
        self.voted_for = candidate
        self._election_deadline = now_ms + self._election_timeout()
        self._set_role(VOTED, fx)

    def _to_follower(self, epoch: int, leader_id: int, now_ms: int, fx: list[m.Effect]) -> None:
        if leader_id == self.cfg.node_id:
            raise RaftInvariantError(f"node {leader_id} cannot follow itself")
        if epoch != self.epoch:
            self.voted_for = -1
            self._abandoned_leader = -1
        self.epoch, self.leader_id = epoch, leader_id
        self._leader_hw = -1
        self._leader_resigned = False
        self._failed_rounds = 0
        self._fetch_deadline = now_ms + self.cfg.fetch_timeout_ms
        self._set_role(FOLLOWER, fx)

    def _to_prospective(self, now_ms: int, fx: list[m.Effect]) -> None:
        if not self.cfg.pre_vote:
            self._to_candidate(now_ms, fx)
            return
        if self.role == LEADER:
            raise RaftInvariantError("a leader does not pre-vote")
        if self.role == FOLLOWER:  # the leader is gone: forget it, keep the epoch
            self._abandoned_leader = self.leader_id  # others may still name it: not followed again
            self.leader_id = -1
        self._election_deadline = now_ms + self._election_timeout() + self._backoff_ms()
        self._set_role(PROSPECTIVE, fx)
        self._granted, self._refused = {self.cfg.node_id}, set()
        self._ask_all(now_ms, fx, self._vote_request)
        self._maybe_won(now_ms, fx)

    def _to_candidate(self, now_ms: int, fx: list[m.Effect]) -> None:
        self.epoch += 1
        self.voted_for, self.leader_id = self.cfg.node_id, -1
        self._election_deadline = now_ms + self._election_timeout() + self._backoff_ms()
        self._set_role(CANDIDATE, fx)
        self._granted, self._refused = {self.cfg.node_id}, set()
        self._ask_all(now_ms, fx, self._vote_request)
        self._maybe_won(now_ms, fx)

    def _to_leader(self, now_ms: int, fx: list[m.Effect]) -> None:
        self.leader_id = self.cfg.node_id
        self._failed_rounds = 0
        self.epoch_start_offset = self.log.end_offset
        self.replica_end = {v: -1 for v in self.others}
        self.replica_fetch_ms = {}
        self._fetched_since_check = set()
        self._check_quorum_deadline = now_ms + self.cfg.fetch_timeout_ms * 3 // 2
        self._set_role(LEADER, fx)
        fx.append(m.AppendEpochStart(self.epoch))
        self._ask_all(now_ms, fx, lambda: m.BeginEpochRequest(self.cfg.node_id, self.epoch))

    def _to_resigned(self, now_ms: int, fx: list[m.Effect]) -> None:
        successors = tuple(sorted(self.others, key=lambda v: -self.replica_end.get(v, -1)))
        self._election_deadline = now_ms + self._election_timeout()
        self._set_role(RESIGNED, fx)
        for v in self.others:
            fx.append(m.Send(v, m.EndEpochRequest(self.cfg.node_id, self.epoch, successors)))

    # ------------------------------------------------------------------ helpers
    def _maybe_won(self, now_ms: int, fx: list[m.Effect]) -> None:
        if len(self._granted) < self.cfg.majority:
            return
        if self.role == PROSPECTIVE:
            self._to_candidate(now_ms, fx)
        elif self.role == CANDIDATE:
            self._to_leader(now_ms, fx)

    def _vote_request(self) -> m.VoteRequest:
        pre = self.role == PROSPECTIVE
        return m.VoteRequest(self.cfg.node_id, self.epoch + 1 if pre else self.epoch,
                             self.log.last_epoch, self.log.end_offset, pre_vote=pre)

    def _ask_all(self, now_ms: int, fx: list[m.Effect], build) -> None:
        self._asked_ms = {}
        for v in self.others:
            self._asked_ms[v] = now_ms
            fx.append(m.Send(v, build()))

    def _resend(self, now_ms: int, fx: list[m.Effect], build) -> None:
        retry = self._retry_ms()
        for v, t in list(self._asked_ms.items()):
            if now_ms >= t + retry:
                self._asked_ms[v] = now_ms
                fx.append(m.Send(v, build()))

    def _retry_ms(self) -> int:
        return max(1, min(RETRY_MS_MAX, self.cfg.election_timeout_ms // 4))

    def _election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return t + self.rng.randint(0, t)

    def _backoff_ms(self) -> int:
        if self._failed_rounds == 0:
            return 0
        cap = min(self.cfg.election_backoff_max_ms, BACKOFF_BASE_MS << min(self._failed_rounds, 10))
        return self.rng.randint(0, max(0, cap))

    def _vote_answer(self, granted: bool, error=m.NONE) -> m.VoteResponse:
        return m.VoteResponse(error, self.epoch, self.leader_id, granted)

    def _epoch_answer(self, error) -> m.EpochResponse:
        return m.EpochResponse(error, self.epoch, self.leader_id)

    def _fetch_refusal(self, error) -> m.FetchAnswer:
        return m.FetchAnswer(error, self.epoch, self.leader_id, self.high_watermark, self.log.start_offset)

    def _answer(self, **kw) -> m.FetchAnswer:
        return m.FetchAnswer(m.NONE, self.epoch, self.leader_id, self.high_watermark, self.log.start_offset, **kw)

    def _truncate(self, offset: int, fx: list[m.Effect]) -> None:
        if offset < self.high_watermark:
            raise RaftInvariantError(f"truncation to {offset} below the high watermark {self.high_watermark}")
        if offset < self.log.end_offset:
            self.log.truncate_to(offset)
            self.flushed_end = min(self.flushed_end, offset)
            fx.append(m.TruncateTo(offset))

    def _set_hw(self, hw: int, fx: list[m.Effect]) -> None:
        if hw > self.high_watermark:
            self.high_watermark = hw
            fx.append(m.HighWatermark(hw))

    def _advance_leader_hw(self, fx: list[m.Effect]) -> None:
        ends = sorted([self.flushed_end] + [self.replica_end.get(v, -1) for v in self.others], reverse=True)
        candidate = ends[self.cfg.majority - 1]
        if candidate > self.epoch_start_offset:
            self._set_hw(candidate, fx)

    def _advance_follower_hw(self, fx: list[m.Effect]) -> None:
        if self._leader_hw >= 0:
            self._set_hw(min(self._leader_hw, self.flushed_end), fx)
