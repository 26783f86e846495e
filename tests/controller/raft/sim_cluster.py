"""A simulated Raft cluster over the pure state: a manual clock, a network that delays,
drops and partitions messages, crashes that lose everything not flushed, and the checks
of Raft's safety properties after every step.

Each node's log is a list of (epoch, payload); "flushed" is how much of it survives a crash.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from controller_impl.raft import messages as m
from controller_impl.raft.log_shape import LogShape
from controller_impl.raft.config import LEADER, FOLLOWER, RaftConfig
from controller_impl.raft.quorum import RaftState
from controller_impl.raft.quorum_file import ElectionState


@dataclass
class Node:
    node_id: int
    state: RaftState | None
    log: list[tuple[int, str]] = field(default_factory=list)
    flushed: int = 0
    election: ElectionState = field(default_factory=ElectionState)
    fetch_in_flight: bool = False
    fetch_seq: int = 0
    flush_due_ms: int | None = None


class SafetyViolation(AssertionError):
    pass


class SimCluster:
    def __init__(self, n: int, seed: int, *, loss: float = 0.0, delay_ms: tuple[int, int] = (1, 5),
                 election_timeout_ms: int = 100, fetch_timeout_ms: int = 200, pre_vote: bool = True) -> None:
        self.rng = random.Random(seed)
        self.voters = tuple(range(1, n + 1))
        self.loss = loss
        self.delay_ms = delay_ms
        self.cfgs = {i: RaftConfig(i, self.voters, election_timeout_ms=election_timeout_ms,
                                   fetch_timeout_ms=fetch_timeout_ms, election_backoff_max_ms=100,
                                   pre_vote=pre_vote) for i in self.voters}
        self.now = 0
        self.queue: list[tuple[int, int, int, int, Any]] = []  # (time, seq, to, from, message)
        self._seq = 0
        self.cut: set[frozenset[int]] = set()
        self.nodes: dict[int, Node] = {}
        self.leaders_by_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple[int, str]] = {}   # offset -> entry, as first seen committed
        self.proposed = 0
        for i in self.voters:
            self.nodes[i] = Node(i, None)
            self._boot(i)

    # -- node life ------------------------------------------------------------------
    def _boot(self, i: int) -> None:
        node = self.nodes[i]
        shape = LogShape()
        for off, (epoch, _) in enumerate(node.log):
            shape.append(off, off, epoch)
        node.state = RaftState(self.cfgs[i], shape, node.election, random.Random(self.rng.random()), self.now)
        node.fetch_in_flight = False
        node.flush_due_ms = None
        self._effects(i, node.state.start(self.now))

    def crash(self, i: int) -> None:
        node = self.nodes[i]
        del node.log[node.flushed:]   # the unflushed tail is gone
        node.state = None

    def restart(self, i: int) -> None:
        self._boot(i)

    def partition(self, group: set[int]) -> None:
        self.cut = {frozenset((a, b)) for a in group for b in self.voters if b not in group}

    def heal(self) -> None:
        self.cut = set()

    # -- the network ----------------------------------------------------------------
    def send(self, frm: int, to: int, msg: Any) -> None:
        if frozenset((frm, to)) in self.cut or self.rng.random() < self.loss:
            return
        self._seq += 1
        heapq.heappush(self.queue, (self.now + self.rng.randint(*self.delay_ms), self._seq, to, frm, msg))

    def _deliver(self, to: int, frm: int, msg: Any) -> None:
        node = self.nodes[to]
        st = node.state
        if st is None:
            return
        if frozenset((frm, to)) in self.cut:
            return
        kind = msg[0]
        if kind == "fetch_timeout":
            if msg[1] == node.fetch_seq:
                node.fetch_in_flight = False
        elif kind == "vote":
            resp, fx = st.handle_vote(msg[1], self.now)
            self._effects(to, fx)
            self.send(to, frm, ("vote_resp", resp, msg[1].pre_vote))
        elif kind == "vote_resp":
            self._effects(to, st.handle_vote_response(frm, msg[1], msg[2], self.now))
        elif kind == "begin":
            resp, fx = st.handle_begin_epoch(msg[1], self.now)
            self._effects(to, fx)
            self.send(to, frm, ("begin_resp", resp))
        elif kind == "begin_resp":
            self._effects(to, st.handle_begin_epoch_response(frm, msg[1], self.now))
        elif kind == "end":
            resp, fx = st.handle_end_epoch(msg[1], self.now)
            self._effects(to, fx)
        elif kind == "fetch":
            ans, fx = st.handle_fetch(msg[1], self.now)
            self._effects(to, fx)
            entries = []
            if ans.readable:
                entries = node.log[ans.read_from:ans.read_limit][:20]
            self.send(to, frm, ("fetch_resp", ans, ans.read_from, entries, msg[2]))
        elif kind == "fetch_resp":
            if msg[4] != node.fetch_seq or not node.fetch_in_flight:
                return  # an answer to a fetch given up on: one fetch at a time, as the runtime does
            node.fetch_in_flight = False
            ans, start, entries = msg[1], msg[2], msg[3]
            resp = m.FetchResponse(ans.error, ans.epoch, ans.leader_id, ans.high_watermark,
                                   ans.diverging, ans.snapshot_id)
            accept, fx = st.handle_fetch_response(frm, resp, self.now)
            self._effects(to, fx)
            if accept and entries and start == len(node.log):
                for k, entry in enumerate(entries):
                    node.log.append(entry)
                    st.on_log_appended(start + k, start + k, entry[0])
                node.flushed = len(node.log)
                self._effects(to, st.on_log_flushed(node.flushed))

    def _effects(self, i: int, fx: list) -> None:
        node = self.nodes[i]
        st = node.state
        for e in fx:
            if isinstance(e, m.PersistQuorumState):
                node.election = ElectionState(e.epoch, e.voted_for, e.leader_id, self.voters)
            elif isinstance(e, m.Send):
                kind = {m.VoteRequest: "vote", m.BeginEpochRequest: "begin", m.EndEpochRequest: "end"}[type(e.message)]
                self.send(i, e.to, (kind, e.message))
            elif isinstance(e, m.AppendEpochStart):
                self._append(i, [(e.epoch, f"start-{e.epoch}")])
            elif isinstance(e, m.TruncateTo):
                if e.offset < len(node.log):
                    del node.log[e.offset:]
                    node.flushed = min(node.flushed, e.offset)
            elif isinstance(e, m.HighWatermark):
                self._committed(i, e.offset)
            elif isinstance(e, m.RoleChange):
                if e.role == LEADER:
                    prior = self.leaders_by_epoch.setdefault(e.epoch, i)
                    if prior != i:
                        raise SafetyViolation(f"election safety: {prior} and {i} lead epoch {e.epoch}")
                    missing = [o for o, entry in self.committed.items()
                               if o >= len(node.log) or node.log[o] != entry]
                    if missing:
                        raise SafetyViolation(f"leader completeness: leader {i} of epoch {e.epoch} "
                                              f"lacks committed offsets {missing[:5]}")
        assert st is node.state

    def _append(self, i: int, entries: list[tuple[int, str]]) -> None:
        node = self.nodes[i]
        st = node.state
        for entry in entries:
            off = len(node.log)
            node.log.append(entry)
            st.on_log_appended(off, off, entry[0])
        if node.flush_due_ms is None:
            node.flush_due_ms = self.now + self.rng.randint(0, 3)

    def _committed(self, i: int, hw: int) -> None:
        node = self.nodes[i]
        if hw > len(node.log):
            raise SafetyViolation(f"node {i}: high watermark {hw} beyond its log end {len(node.log)}")
        for o in range(hw):
            entry = node.log[o]
            seen = self.committed.setdefault(o, entry)
            if seen != entry:
                raise SafetyViolation(f"state machine safety: offset {o} committed as {seen} and {entry}")

    # -- driving --------------------------------------------------------------------
    def propose(self) -> bool:
        for i, node in self.nodes.items():
            if node.state is not None and node.state.role == LEADER:
                self.proposed += 1
                self._append(i, [(node.state.epoch, f"v{self.proposed}")])
                return True
        return False

    def step(self, ms: int = 1) -> None:
        for _ in range(ms):
            self.now += 1
            while self.queue and self.queue[0][0] <= self.now:
                _, _, to, frm, msg = heapq.heappop(self.queue)
                self._deliver(to, frm, msg)
            for i, node in self.nodes.items():
                st = node.state
                if st is None:
                    continue
                if node.flush_due_ms is not None and self.now >= node.flush_due_ms:
                    node.flush_due_ms = None
                    node.flushed = len(node.log)
                    self._effects(i, st.on_log_flushed(node.flushed))
                self._effects(i, st.tick(self.now))
                if st.role == FOLLOWER and not node.fetch_in_flight:
                    req = st.next_fetch()
                    node.fetch_in_flight = True
                    node.fetch_seq += 1
                    self.send(i, st.leader_id, ("fetch", req, node.fetch_seq))
                    # a lost request or answer: try again after a while
                    self._seq += 1
                    heapq.heappush(self.queue, (self.now + 50, self._seq, i, i, ("fetch_timeout", node.fetch_seq)))
            self.check_log_matching()

    def check_log_matching(self) -> None:
        logs = [n.log for n in self.nodes.values()]
        for a in range(len(logs)):
            for b in range(a + 1, len(logs)):
                la, lb = logs[a], logs[b]
                n = min(len(la), len(lb))
                # the last offset where both hold the same epoch: every entry before it matches
                for o in range(n - 1, -1, -1):
                    if la[o][0] == lb[o][0]:
                        if la[:o + 1] != lb[:o + 1]:
                            raise SafetyViolation(f"log matching broken below offset {o}")
                        break

    def leader(self) -> int | None:
        leaders = [i for i, n in self.nodes.items() if n.state is not None and n.state.role == LEADER]
        return leaders[-1] if leaders else None

    def hw(self, i: int) -> int:
        st = self.nodes[i].state
        return st.high_watermark if st else -1
