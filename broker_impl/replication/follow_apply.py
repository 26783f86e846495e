"""A leader fetcher's storage steps: applying the leader's answer for the partitions that need
the disk (records, divergence, out of range) on their log dir's worker, one job per dir per
round, each partition's ``partition_lock`` held across it, then settling the outcome on the
loop. A part of :class:`broker_impl.replication.fetcher.LeaderFetcher` (its ``steps``), holding
no state of its own: the fetcher keeps the bookkeeping (``step_started`` / ``step_ended`` /
``back_off`` / ``leave``), reached through the :class:`StepsHost` protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from broker_impl.replication.follow_round import FollowState, storage_step, storage_steps
from broker_impl.state.effects import TopicPartition
from broker_impl.storage.errors import KafkaStorageError, StorageError

log = logging.getLogger(__name__)
BACKOFF_S = 0.2


class StepsOwner(Protocol):
    """The fetcher manager as the steps see it: the runtime (``host``: ``get_log``, and when
    it has them ``run_io`` and ``partition_lock``), the error counts, the truncation callback."""
    host: Any
    errors: dict[str, int]

    def on_truncated(self, tp: TopicPartition, offset: int) -> None: ...


class StepsHost(Protocol):
    """The leader fetcher as its storage steps see it."""
    mgr: StepsOwner
    partitions: dict[TopicPartition, FollowState]
    changed: asyncio.Event     # set when a step ends: the fetch loop looks again

    def step_started(self, st: FollowState, task: asyncio.Future, now: float) -> None: ...
    def step_ended(self, st: FollowState) -> None: ...
    def back_off(self, st: FollowState, until: float) -> None: ...
    def leave(self, tp: TopicPartition) -> None: ...


class StorageSteps:
    __slots__ = ("host",)

    def __init__(self, host: StepsHost) -> None:
        self.host = host

    def start(self, items: list[tuple[FollowState, Any, Any]], now: float) -> None:
        """One job on the dir's worker for the partitions whose locks are free; a partition
        whose lock is held (a move's swap) gets a job of its own."""
        lock_of = getattr(self.host.mgr.host, "partition_lock", None)
        free, busy = [], []
        for item in items:
            (free if lock_of is None or not lock_of(item[0].tp).locked() else busy).append(item)
        for batch in ([free] if free else []) + [[item] for item in busy]:
            task = asyncio.ensure_future(self.apply_batch(batch))
            for st, _plog, _p in batch:
                self.host.step_started(st, task, now)

    async def apply_batch(self, items: list[tuple[FollowState, Any, Any]]) -> None:
        try:
            await self._apply_batch_async(items)
        except Exception:  # a bug must not kill replication silently
            log.exception("follower %s", [st.tp for st, _plog, _p in items])
        finally:
            for st, _plog, _p in items:
                self.host.step_ended(st)
            self.host.changed.set()

    async def _apply_batch_async(self, items: list[tuple[FollowState, Any, Any]]) -> None:
        """The storage steps of one dir's partitions, in one job on that dir's worker, each
        partition's lock held across it; outcomes settled on the loop."""
        host = self.host.mgr.host
        run_io = getattr(host, "run_io", None)
        lock_of = getattr(host, "partition_lock", None)
        async with contextlib.AsyncExitStack() as stack:
            if lock_of is not None:
                for st, _plog, _p in sorted(items, key=lambda it: (it[0].tp.topic, it[0].tp.partition)):
                    await stack.enter_async_context(lock_of(st.tp))
            live = [(st, plog, p) for st, plog, p in items if host.get_log(st.tp) is plog]  # not swapped meanwhile
            if not live:
                return
            if run_io is None:
                outcomes = storage_steps([(plog, p) for _st, plog, p in live])
            else:
                try:
                    outcomes = await run_io(live[0][1], storage_steps, [(plog, p) for _st, plog, p in live])
                except KafkaStorageError as exc:
                    # the dir failed in the job's flush by count, after the steps: the whole
                    # batch is on that dir, and every partition of it leaves the fetcher
                    outcomes = [exc] * len(live)
        for (st, _plog, p), outcome in zip(live, outcomes):
            if self.host.partitions.get(st.tp) is st:
                self.settle(st, p, outcome)

    def apply(self, st: FollowState, p: Any) -> bool:
        """Apply one partition's answer synchronously (the storage step inline)."""
        plog = self.host.mgr.host.get_log(st.tp)
        if plog is None:
            return False
        try:
            outcome = storage_step(plog, p)
        except (StorageError, OSError) as exc:
            outcome = exc
        return self.settle(st, p, outcome)

    def settle(self, st: FollowState, p: Any, outcome: Any) -> bool:
        """Bookkeeping on the loop after the storage step: ``outcome`` is its result or the
        storage exception it raised."""
        fetcher, mgr = self.host, self.host.mgr
        if isinstance(outcome, BaseException):
            exc = outcome
            if isinstance(exc, StorageError) and not isinstance(exc, KafkaStorageError):
                # bad bytes: retry after a pause, keep the partition
                log.warning("follower %s: %s", st.tp, exc)
                fetcher.back_off(st, asyncio.get_running_loop().time() + BACKOFF_S)
                mgr.errors[type(exc).__name__] = mgr.errors.get(type(exc).__name__, 0) + 1
                return False
            # our dir failed (already reported through the channel) or a raw OSError
            log.warning("follower %s: %s", st.tp, exc)
            fetcher.leave(st.tp)
            return False
        kind, value = outcome
        if kind == "truncated":
            mgr.on_truncated(st.tp, value)
            return True
        if kind in ("diverged", "appended"):
            return bool(value)
        err = p.error_code
        fetcher.back_off(st, asyncio.get_running_loop().time() + BACKOFF_S)
        mgr.errors[err.name] = mgr.errors.get(err.name, 0) + 1
        return False

