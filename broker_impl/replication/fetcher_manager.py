"""The follower fetchers of a broker: one :class:`~broker_impl.replication.fetcher.LeaderFetcher`
per leader broker id, each partition followed by the fetcher of its leader (the runtime's
StartFetcher / StopFetcher effects call :meth:`FetcherManager.add` / :meth:`~FetcherManager.remove`).
The manager is each fetcher's :class:`~broker_impl.replication.fetcher.FetcherOwner`.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from typing import Callable

from broker_impl.replication.fetcher import FetcherHost, LeaderFetcher
from broker_impl.replication.follow_round import STEP_WAIT_MS, FollowState
from broker_impl.state.effects import TopicPartition


class FetcherManager:
    def __init__(self, host: FetcherHost, *, wait_max_ms: int, max_bytes: int,
                 on_truncated: Callable[[TopicPartition, int], None] | None = None,
                 step_wait_ms: int = STEP_WAIT_MS) -> None:
        self.host = host
        self.wait_max_ms = wait_max_ms
        self.step_wait_ms = step_wait_ms
        self.max_bytes = max_bytes
        self.fetchers: dict[int, LeaderFetcher] = {}
        self.leader_of: dict[TopicPartition, int] = {}
        self.errors: dict[str, int] = {}
        # every fetcher's rounds, interrupts (a fetch in flight dropped for a joining partition)
        # and session resets since the start: the broker's ``stopped`` event carries them
        self.stats: collections.Counter = collections.Counter()
        self._on_truncated = on_truncated

    def on_truncated(self, tp: TopicPartition, offset: int) -> None:
        if self._on_truncated is not None:
            self._on_truncated(tp, offset)

    def add(self, tp: TopicPartition, topic_id: uuid.UUID, leader_id: int, leader_epoch: int) -> None:
        self.remove((tp,))
        f = self.fetchers.get(leader_id)
        if f is None:
            f = self.fetchers[leader_id] = LeaderFetcher(self, leader_id)
        f.join(FollowState(tp, topic_id, leader_epoch))
        self.leader_of[tp] = leader_id
        f.wake()

    def remove(self, tps) -> None:
        for tp in tps:
            leader = self.leader_of.pop(tp, None)
            if leader is not None and leader in self.fetchers:
                self.fetchers[leader].leave(tp)

    def following(self) -> dict[TopicPartition, int]:
        return dict(self.leader_of)

    async def close(self, timeout_s: float = 1.0) -> None:
        """Every fetcher at once, bounded (see :meth:`LeaderFetcher.close`)."""
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        if fetchers:
            await asyncio.wait([asyncio.ensure_future(f.close(timeout_s)) for f in fetchers], timeout=2 * timeout_s)
