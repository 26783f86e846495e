"""Incremental fetch sessions (KIP-227) for replica fetches: a follower's fetch costs what
changed, not what it follows.

Without sessions every follower Fetch names every partition it follows from this leader and
every answer lists them all, so one append to one of N partitions costs O(N) on both sides
(decode, checks, ISR bookkeeping, encode) — at 100 partitions per leader that work, not the
disk, bounded acks=all throughput. With a session:

- a FULL request (``session_id`` 0, ``session_epoch`` 0) from a replica (v13+, topic ids)
  creates a session: its partitions and their fetch state are cached here, the answer
  carries the new ``session_id`` and every partition;
- an INCREMENTAL request (``session_id`` S, ``session_epoch`` E = the session's next epoch)
  names only the partitions whose fetch state changed (or that join), and
  ``forgotten_topics_data`` the ones that leave; the fetch covers every cached partition,
  and the answer lists only the partitions with records, an error, a divergence, or a
  HW / log start offset other than the last answer's;
- unknown ``session_id`` → FETCH_SESSION_ID_NOT_FOUND, wrong epoch →
  INVALID_FETCH_SESSION_EPOCH (top level; the follower starts a new session); epoch -1
  closes the session (a sessionless fetch).

Only the partitions that may have changed are looked at per fetch: the session keeps a
purgatory :class:`~broker_impl.api.purgatory.Watch` on all its partitions between fetches
(an append, HW move, leadership or offline change marks a partition), plus the partitions
named in the request and those left unfinished by the response's byte budget. The
follower's progress on unchanged partitions (ISR "caught up" time) is refreshed at most
every ``REFRESH_MS``.

Consumers (replica_id < 0) get no session (``session_id`` 0 in the answer: the KIP lets a
broker decline); they keep full fetches.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Hashable

from broker_impl.api.purgatory import Purgatory, Watch

MAX_SESSIONS = 1000
IDLE_EVICT_S = 120.0
REFRESH_MS = 500
INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    target: Any                     # the fetch's FetchTarget (fetch offset, epochs, max bytes)
    last_hw: int = -2               # what the last answer said (-2: never answered)
    last_log_start: int = -2


@dataclass
class FetchSession:
    id: int
    replica_id: int
    epoch: int                                  # the epoch the next request must carry
    parts: dict[Hashable, CachedPartition]
    watch: Watch
    dirty: set[Hashable] = field(default_factory=set)   # looked at by the next fetch whatever the watch says
    last_used: float = 0.0
    last_refresh_ms: float = 0.0
    busy: bool = False                          # a fetch of this session is being answered

    def close(self) -> None:
        self.watch.close()


class FetchSessionCache:
    def __init__(self, purgatory: Purgatory, *, max_sessions: int = MAX_SESSIONS) -> None:
        self.purgatory = purgatory
        self.max_sessions = max_sessions
        self.sessions: dict[int, FetchSession] = {}
        self._ids = itertools.count(1)
        self.created = 0

    def _evict(self, now: float) -> None:
        for sid, s in list(self.sessions.items()):
            if not s.busy and now - s.last_used > IDLE_EVICT_S:
                self.remove(sid)
        while len(self.sessions) >= self.max_sessions:
            idle = [s for s in self.sessions.values() if not s.busy]
            if not idle:
                break
            self.remove(min(idle, key=lambda s: s.last_used).id)

    def create(self, replica_id: int, targets: list[Any], key_of: Any) -> FetchSession | None:
        now = time.monotonic()
        self._evict(now)
        if len(self.sessions) >= self.max_sessions:
            return None
        # one session per follower: a new full request replaces the follower's older ones
        for sid, s in list(self.sessions.items()):
            if s.replica_id == replica_id and not s.busy:
                self.remove(sid)
        sid = next(self._ids) & INT32_MAX or next(self._ids)
        parts = {key_of(t): CachedPartition(t) for t in targets}
        s = FetchSession(sid, replica_id, 1, parts, self.purgatory.watch(parts), last_used=now)
        self.sessions[sid] = s
        self.created += 1
        return s

    def get(self, sid: int) -> FetchSession | None:
        return self.sessions.get(sid)

    def remove(self, sid: int) -> None:
        s = self.sessions.pop(sid, None)
        if s is not None:
            s.close()

    def close(self) -> None:
        for sid in list(self.sessions):
            self.remove(sid)


def apply_incremental(session: FetchSession, updated: list[Any], forgotten: list[Hashable], key_of: Any) -> None:
    """An incremental request: ``updated`` targets join or replace their cached state (and
    will be looked at), ``forgotten`` keys leave the session."""
    for key in forgotten:
        if session.parts.pop(key, None) is not None:
            session.dirty.discard(key)
            session.watch.discard(key)
    for t in updated:
        key = key_of(t)
        cached = session.parts.get(key)
        if cached is None:
            session.parts[key] = CachedPartition(t)
            session.watch.add(key)
        else:
            cached.target = t
        session.dirty.add(key)


def must_answer(cached: CachedPartition, error: Any, records: bytes, diverging: Any, hw: int, log_start: int,
                none_error: Any) -> bool:
    """Whether an incremental answer lists this partition (Kafka's
    ``CachedPartition.maybeUpdateResponseData``): records, an error, a divergence, or offsets
    other than the last answer's."""
    return (bool(records) or error is not none_error or diverging is not None
            or hw != cached.last_hw or log_start != cached.last_log_start)
