"""One voter's Raft state (KIP-595 as KafkaRaftClient implements it, with KIP-996 pre-vote).

Roles (``role``): ``unattached`` (epoch known, no leader, no vote) · ``voted`` (voted in
this epoch) · ``prospective`` (pre-vote round: asks whether it could win without bumping
the epoch) · ``candidate`` (epoch+1, voted for itself, asks for votes) · ``leader`` ·
``follower`` (fetches from the leader) · ``resigned`` (a leader that stepped down; waits
for the next election).

Rules (each has its unit test in ``tests/controller/raft/``):
- Epochs only grow; any message from a higher epoch moves us to it (unattached, or follower
  of the leader it names). Messages from a lower epoch are refused with FENCED_LEADER_EPOCH.
- **Vote**: granted at most once per epoch (``voted_for`` is persisted before the answer
  leaves), never while a leader of the epoch is known, only to a candidate whose log is at
  least as up to date: (last epoch, end offset) compared in that order.
- **Pre-vote** changes no state; granted when the candidate's log is up to date and we have
  not heard from a live leader within the fetch timeout (so a voter cut off from the
  others cannot disrupt a healthy quorum when it comes back).
- **Election**: a timeout of ``election_timeout_ms`` + a random part (seeded rng) in
  unattached/voted/resigned; ``fetch_timeout_ms`` without a good Fetch answer as a
  follower. A candidate or prospective that a majority refuses backs off a random time up
  to ``election_backoff_max_ms`` (exponential in the failed rounds) before the next round.
- **Leader**: appends one record of its epoch at once (``AppendEpochStart``), sends
  BeginQuorumEpoch until each voter fetches (and again to a voter silent for half the
  fetch timeout), answers Fetch with a diverging epoch when the
  follower's (last fetched epoch, offset) is not a prefix of its log (the follower
  truncates to min(the leader's end of that epoch, its own)), or a snapshot id when the
  offset is below its log start. The **high watermark** is the largest offset held by a
  majority of voters, counting the leader's *flushed* end, and moves only past the epoch
  start (so older epochs' records commit only with one of this epoch). It never decreases.
  Check-quorum: a leader that has not heard a Fetch from a majority in 1.5 × the fetch
  timeout resigns.
- **Follower**: high watermark = min(leader's, own flushed end); never truncates below it.
- A single voter elects itself at once.
"""

from __future__ import annotations

import random

from controller_impl.raft import messages as m
from controller_impl.raft.config import (BACKOFF_BASE_MS, CANDIDATE, FOLLOWER, LEADER, PROSPECTIVE, RESIGNED,
                                         UNATTACHED, VOTED, RaftConfig, RaftInvariantError)
from controller_impl.raft.log_shape import LogShape
from controller_impl.raft.quorum_file import ElectionState
from controller_impl.raft.transitions import RoleTransitions


class RaftState:
    """One voter's Raft state: inputs ``handle_*``, ``tick``, ``on_log_*``; outputs effects.
    Composes its :class:`RoleTransitions` (``roles``: the transitions and the election
    bookkeeping), which sees it as a :class:`~controller_impl.raft.transitions.VoterHost`."""

    def __init__(self, cfg: RaftConfig, log: LogShape, election: ElectionState, rng: random.Random,
                 now_ms: int) -> None:
        if cfg.node_id not in cfg.voters:
            raise ValueError(f"node {cfg.node_id} is not one of the voters {list(cfg.voters)}")
        self.cfg = cfg
        self.log = log
        self.rng = rng
        self.epoch = election.epoch
        self.voted_for = election.voted_for
        self.leader_id = election.leader_id
        self.high_watermark = log.snapshot[0] if log.snapshot else 0
        self.flushed_end = log.end_offset   # what is on disk at start is durable
        self._leader_hw = -1                # the followed leader's, as last heard
        self.replica_end: dict[int, int] = {}
        self.replica_fetch_ms: dict[int, int] = {}
        self._fetched_since_check: set[int] = set()
        self._check_quorum_deadline = 0
        self.epoch_start_offset = 0
        self.roles = RoleTransitions(self, now_ms)
        if self.leader_id == cfg.node_id:
            self.role = RESIGNED      # a leader that restarted has lost its unflushed state
        elif self.leader_id >= 0:
            self.role = FOLLOWER
        elif self.voted_for >= 0:
            self.role = VOTED
        else:
            self.role = UNATTACHED

    # ------------------------------------------------------------------ views
    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    @property
    def others(self) -> tuple[int, ...]:
        return tuple(v for v in self.cfg.voters if v != self.cfg.node_id)

    def start_leading(self, now_ms: int) -> None:
        self.epoch_start_offset = self.log.end_offset
        self.replica_end = {v: -1 for v in self.others}
        self.replica_fetch_ms = {}
        self._fetched_since_check = set()
        self._check_quorum_deadline = now_ms + self.cfg.fetch_timeout_ms * 3 // 2

    def start_following(self) -> None:
        self._leader_hw = -1

    def election_state(self) -> ElectionState:
        return ElectionState(self.epoch, self.voted_for, self.leader_id, self.cfg.voters)

    def next_fetch(self) -> m.FetchRequest | None:
        """The follower's next Fetch to its leader (None when not following)."""
        if self.role != FOLLOWER:
            return None
        return m.FetchRequest(self.cfg.node_id, self.epoch, self.log.end_offset, self.log.last_epoch)

    def next_deadline_ms(self) -> int:
        """When :meth:`tick` next has something to do (the runtime may tick earlier)."""
        roles = self.roles
        if self.role == LEADER:
            return min([self._check_quorum_deadline] + [t + roles.retry_ms() for t in roles.asked_ms.values()])
        if self.role == FOLLOWER:
            return roles.fetch_deadline
        asking = self.role in (PROSPECTIVE, CANDIDATE)
        pending = [t + roles.retry_ms() for t in roles.asked_ms.values()] if asking else []
        return min([roles.election_deadline] + pending)

    # ------------------------------------------------------------------ start, tick
    def start(self, now_ms: int) -> list[m.Effect]:
        fx: list[m.Effect] = []
        if self.cfg.voters == (self.cfg.node_id,):
            self.roles.to_candidate(now_ms, fx)
        return fx

    def tick(self, now_ms: int) -> list[m.Effect]:
        fx: list[m.Effect] = []
        role = self.role
        if role == LEADER:
            if len(self.cfg.voters) > 1 and now_ms >= self._check_quorum_deadline:
                self.roles.to_resigned(now_ms, fx)
            else:
                begin = m.BeginEpochRequest(self.cfg.node_id, self.epoch)
                self.roles.resend(now_ms, fx, lambda: begin)
                # a voter silent for half the fetch timeout is told again who leads (it may
                # have given up on us while cut off, and others' answers cannot convince it)
                for v in self.others:
                    last = self.replica_fetch_ms.get(v)
                    silent = last is None or now_ms - last >= self.cfg.fetch_timeout_ms // 2
                    if v not in self.roles.asked_ms and silent:
                        self.roles.asked_ms[v] = now_ms
                        fx.append(m.Send(v, begin))
        elif role == FOLLOWER:
            if now_ms >= self.roles.fetch_deadline:
                self.roles.to_prospective(now_ms, fx)
        elif role in (UNATTACHED, VOTED, RESIGNED):
            if now_ms >= self.roles.election_deadline:
                self.roles.to_prospective(now_ms, fx)
        elif role in (PROSPECTIVE, CANDIDATE):
            if now_ms >= self.roles.election_deadline:
                self.roles.to_prospective(now_ms, fx)  # a new round; pre-vote again, then bump
            else:
                self.roles.resend(now_ms, fx, self.roles.vote_request)
        return fx

    # ------------------------------------------------------------------ Vote
    def handle_vote(self, req: m.VoteRequest, now_ms: int) -> tuple[m.VoteResponse, list[m.Effect]]:
        fx: list[m.Effect] = []
        if req.candidate_id not in self.cfg.voters or req.candidate_id == self.cfg.node_id:
            return self._vote_answer(False, m.INCONSISTENT_VOTER_SET), fx  # we never ask ourselves
        up_to_date = (req.last_epoch, req.last_epoch_end_offset) >= self.log.up_to_date_key()
        if req.pre_vote:
            if req.candidate_epoch <= self.epoch:
                return self._vote_answer(False, m.FENCED_LEADER_EPOCH), fx
            roles = self.roles
            hears_leader = (self.role == LEADER or
                            (self.role == FOLLOWER and now_ms < roles.fetch_deadline and not roles.leader_resigned))
            return self._vote_answer(up_to_date and not hears_leader), fx
        if req.candidate_epoch < self.epoch:
            return self._vote_answer(False, m.FENCED_LEADER_EPOCH), fx
        if req.candidate_epoch > self.epoch:
            self.roles.to_unattached(req.candidate_epoch, now_ms, fx)
        grant = (up_to_date and self.leader_id < 0 and self.voted_for in (-1, req.candidate_id)
                 and self.role in (UNATTACHED, VOTED, PROSPECTIVE))
        if grant and self.voted_for != req.candidate_id:
            self.roles.to_voted(req.candidate_id, now_ms, fx)
        return self._vote_answer(grant), fx

    def handle_vote_response(self, from_id: int, resp: m.VoteResponse, pre_vote: bool,
                             now_ms: int) -> list[m.Effect]:
        fx: list[m.Effect] = []
        if resp.epoch > self.epoch:
            self.roles.to_epoch_of(resp.epoch, resp.leader_id, now_ms, fx)
            return fx
        if (resp.leader_id >= 0 and resp.epoch == self.epoch and self.role in (PROSPECTIVE, UNATTACHED, VOTED)
                and resp.leader_id not in (self.cfg.node_id, self.roles.abandoned_leader)):
            self.roles.to_follower(resp.epoch, resp.leader_id, now_ms, fx)
            return fx
        expected = PROSPECTIVE if pre_vote else CANDIDATE
        if self.role != expected or resp.epoch != self.epoch or from_id not in self.roles.asked_ms:
            return fx
        del self.roles.asked_ms[from_id]
        if resp.vote_granted:
            self.roles.granted.add(from_id)
            self.roles.maybe_won(now_ms, fx)
        else:
            self.roles.refused.add(from_id)
            if len(self.roles.refused) >= self.cfg.majority or \
                    len(self.roles.refused) > len(self.cfg.voters) - self.cfg.majority:
                self.roles.failed_rounds += 1
                self.roles.election_deadline = min(self.roles.election_deadline, now_ms + self.roles.backoff_ms())
        return fx

    # ------------------------------------------------------------------ Begin/EndQuorumEpoch
    def handle_begin_epoch(self, req: m.BeginEpochRequest, now_ms: int) -> tuple[m.EpochResponse, list[m.Effect]]:
        fx: list[m.Effect] = []
        if req.leader_id not in self.cfg.voters or req.leader_id == self.cfg.node_id:
            return self._epoch_answer(m.INCONSISTENT_VOTER_SET), fx
        if req.leader_epoch < self.epoch:
            return self._epoch_answer(m.FENCED_LEADER_EPOCH), fx
        if req.leader_epoch == self.epoch and self.role == LEADER and req.leader_id != self.cfg.node_id:
            raise RaftInvariantError(f"two leaders in epoch {self.epoch}: {self.cfg.node_id} and {req.leader_id}")
        if req.leader_epoch > self.epoch or self.role != FOLLOWER or self.leader_id != req.leader_id:
            self.roles.to_follower(req.leader_epoch, req.leader_id, now_ms, fx)
        return self._epoch_answer(m.NONE), fx

    def handle_begin_epoch_response(self, from_id: int, resp: m.EpochResponse, now_ms: int) -> list[m.Effect]:
        fx: list[m.Effect] = []
        if resp.epoch > self.epoch:
            self.roles.to_epoch_of(resp.epoch, resp.leader_id, now_ms, fx)
        elif self.role == LEADER and resp.epoch == self.epoch and resp.error == m.NONE:
            self.roles.asked_ms.pop(from_id, None)
        return fx

    def handle_end_epoch(self, req: m.EndEpochRequest, now_ms: int) -> tuple[m.EpochResponse, list[m.Effect]]:
        fx: list[m.Effect] = []
        if req.leader_id not in self.cfg.voters or req.leader_id == self.cfg.node_id:
            return self._epoch_answer(m.INCONSISTENT_VOTER_SET), fx
        if req.leader_epoch < self.epoch:
            return self._epoch_answer(m.FENCED_LEADER_EPOCH), fx
        if req.leader_epoch > self.epoch:
            self.roles.to_unattached(req.leader_epoch, now_ms, fx)
        if self.role in (FOLLOWER, UNATTACHED, VOTED) and self.leader_id in (req.leader_id, -1):
            # the leader stepped down: its preferred successors stand first, in order
            self.roles.leader_resigned = True
            succ = list(req.preferred_successors)
            pos = succ.index(self.cfg.node_id) if self.cfg.node_id in succ else len(succ)
            delay = 0 if pos == 0 else min(self.cfg.election_backoff_max_ms, BACKOFF_BASE_MS << pos) \
                + self.rng.randint(0, BACKOFF_BASE_MS)
            self.roles.fetch_deadline = min(self.roles.fetch_deadline, now_ms + delay)
            self.roles.election_deadline = min(self.roles.election_deadline, now_ms + delay)
        return self._epoch_answer(m.NONE), fx

    # ------------------------------------------------------------------ Fetch (leader side)
    def handle_fetch(self, req: m.FetchRequest, now_ms: int) -> tuple[m.FetchAnswer, list[m.Effect]]:
        fx: list[m.Effect] = []
        voter = req.replica_id in self.cfg.voters and req.replica_id != self.cfg.node_id
        if voter and req.leader_epoch > self.epoch:
            return self._fetch_refusal(m.UNKNOWN_LEADER_EPOCH), fx
        if self.role != LEADER:
            return self._fetch_refusal(m.NOT_LEADER_OR_FOLLOWER), fx
        if voter and req.leader_epoch < self.epoch:
            return self._fetch_refusal(m.FENCED_LEADER_EPOCH), fx
        log = self.log
        if req.fetch_offset < 0:
            return self._fetch_refusal(m.OFFSET_OUT_OF_RANGE), fx
        if req.fetch_offset < log.start_offset or (voter and req.fetch_offset > 0 and log.snapshot
                                                   and req.fetch_offset < log.snapshot[0]
                                                   and log.end_offset_for_epoch(req.last_fetched_epoch)[0] < 0):
            return self._answer(snapshot_id=log.snapshot), fx
        if not voter:  # an observer (a broker): committed records only
            if req.fetch_offset > self.high_watermark:
                return self._fetch_refusal(m.OFFSET_OUT_OF_RANGE), fx
            return self._answer(read_from=req.fetch_offset, read_limit=self.high_watermark), fx
        if req.fetch_offset > 0:
            epoch, end = log.end_offset_for_epoch(req.last_fetched_epoch)
            if epoch != req.last_fetched_epoch or end < req.fetch_offset:
                if epoch < 0 and log.snapshot is not None:
                    return self._answer(snapshot_id=log.snapshot), fx
                return self._answer(diverging=(epoch, max(end, 0))), fx
        self.replica_end[req.replica_id] = req.fetch_offset
        self.replica_fetch_ms[req.replica_id] = now_ms
        self._fetched_since_check.add(req.replica_id)
        if len(self._fetched_since_check) + 1 >= self.cfg.majority:
            self._fetched_since_check.clear()
            self._check_quorum_deadline = now_ms + self.cfg.fetch_timeout_ms * 3 // 2
        self.roles.asked_ms.pop(req.replica_id, None)  # it knows the leader: stop BeginQuorumEpoch
        self._advance_leader_hw(fx)
        return self._answer(read_from=req.fetch_offset, read_limit=log.end_offset), fx

    # ------------------------------------------------------------------ Fetch (follower side)
    def handle_fetch_response(self, from_id: int, resp: m.FetchResponse,
                              now_ms: int) -> tuple[bool, list[m.Effect]]:
        """Returns (append the response's records?, effects). Append them, then call
        :meth:`on_log_appended` per batch and :meth:`on_log_flushed`."""
        fx: list[m.Effect] = []
        if resp.epoch > self.epoch:
            self.roles.to_epoch_of(resp.epoch, resp.leader_id, now_ms, fx)
            return False, fx
        if self.role != FOLLOWER or from_id != self.leader_id or resp.epoch != self.epoch or resp.error != m.NONE:
            return False, fx
        self.roles.fetch_deadline = now_ms + self.cfg.fetch_timeout_ms
        self.roles.leader_resigned = False
        if resp.diverging is not None:
            d_epoch, d_end = resp.diverging
            own_epoch, own_end = self.log.end_offset_for_epoch(d_epoch)
            offset = min(d_end, own_end) if own_epoch >= 0 else self.log.start_offset
            offset = max(offset, self.log.start_offset)
            self._truncate(offset, fx)
            return False, fx
        if resp.snapshot_id is not None:
            fx.append(m.FetchSnapshot(from_id, resp.snapshot_id))
            return False, fx
        self._leader_hw = max(self._leader_hw, resp.high_watermark)
        self._advance_follower_hw(fx)
        return True, fx

    # ------------------------------------------------------------------ the local log
    def on_log_appended(self, base_offset: int, last_offset: int, epoch: int) -> None:
        self.log.append(base_offset, last_offset, epoch)

    def on_log_flushed(self, end_offset: int) -> list[m.Effect]:
        fx: list[m.Effect] = []
        self.flushed_end = max(self.flushed_end, min(end_offset, self.log.end_offset))
        if self.role == LEADER:
            self._advance_leader_hw(fx)
        elif self.role == FOLLOWER:
            self._advance_follower_hw(fx)
        return fx

    def on_snapshot_installed(self, end_offset: int, epoch: int) -> list[m.Effect]:
        """A snapshot fetched from the leader replaced the whole log."""
        fx: list[m.Effect] = []
        self.log.reset_to_snapshot(end_offset, epoch)
        self.flushed_end = end_offset
        if end_offset > self.high_watermark:
            self.high_watermark = end_offset
            fx.append(m.HighWatermark(end_offset))
        return fx

    def resign(self, now_ms: int) -> list[m.Effect]:
        """Step down gracefully (shutdown): EndQuorumEpoch to the others."""
        fx: list[m.Effect] = []
        if self.role == LEADER:
            self.roles.to_resigned(now_ms, fx)
        return fx

    def describe(self) -> dict:
        """DescribeQuorum's view (voters' end offsets and last fetch times on the leader)."""
        return {"leader_id": self.leader_id, "epoch": self.epoch, "high_watermark": self.high_watermark,
                "role": self.role, "end_offset": self.log.end_offset, "flushed_end": self.flushed_end,
                "replica_end": dict(self.replica_end), "replica_fetch_ms": dict(self.replica_fetch_ms)}

    # ------------------------------------------------------------------ answers, the log, the high watermark
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
