"""One follower round's pieces without I/O of their own (:mod:`.fetcher` drives them).

- :class:`FollowState`: one followed partition (its leader epoch, back-off, running step);
- :func:`plan_round`: which partitions the next Fetch carries and its ``max_wait``;
- :func:`needs_storage`: whether a partition's answer needs its dir;
- :func:`storage_step` / :func:`storage_steps`: applying answers to the local log (blocking;
  on the log's dir worker in the broker): append, HW, truncation on divergence or
  OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from broker_impl.state.effects import TopicPartition
from broker_impl.storage.errors import StorageError
from kafka_common.wire import ErrorCode

STEP_WAIT_MS = 50          # a round waits this long for the previous round's storage steps
MIN_STRAGGLER_POLL_MS = 10  # max_wait while a partition sits out: its step's age, at least this


@dataclass(slots=True)
class FollowState:
    tp: TopicPartition
    topic_id: uuid.UUID
    leader_epoch: int
    backoff_until: float = 0.0
    applying: "asyncio.Future | None" = None  # its storage step, while running
    applying_since: float = 0.0                # loop time the step started


def is_ready(st: FollowState, now: float) -> bool:
    """Carried by the next Fetch: not in a storage step, not backing off."""
    return st.applying is None and st.backoff_until <= now


def plan_wait(oldest_step_since: float | None, first_backoff_end: float | None, now: float,
              wait_max_ms: int) -> int:
    """The next Fetch's ``max_wait`` (ms): the full long poll only when no partition sits out;
    otherwise no longer than until the first back-off ends, nor than the age of the oldest
    running step (≥ MIN_STRAGGLER_POLL_MS), so a partition that sits out rejoins soon after
    its step or back-off ends, without busy-polling a hung dir."""
    wait_ms = wait_max_ms
    if oldest_step_since is not None:
        wait_ms = min(wait_ms, max(MIN_STRAGGLER_POLL_MS, int((now - oldest_step_since) * 1000)))
    if first_backoff_end is not None and first_backoff_end > now:
        wait_ms = min(wait_ms, max(MIN_STRAGGLER_POLL_MS, int((first_backoff_end - now) * 1000) + 1))
    return wait_ms


def plan_round(states: "list[FollowState]", now: float, wait_max_ms: int) -> tuple[list[FollowState], int]:
    """Which partitions the next Fetch carries (every partition not backing off and not in a
    storage step) and its ``max_wait`` (:func:`plan_wait`), from the whole list. The fetcher
    keeps the running steps and back-offs aside and asks :func:`plan_wait` directly; this is
    the same rule over a plain list."""
    ready = [st for st in states if is_ready(st, now)]
    running = [st.applying_since for st in states if st.applying is not None]
    backing_off = [st.backoff_until for st in states if st.applying is None and st.backoff_until > now]
    return ready, plan_wait(min(running) if running else None, min(backing_off) if backing_off else None,
                            now, wait_max_ms)


def needs_storage(p: Any) -> bool:
    """Whether a partition's answer needs its dir (records, divergence, out-of-range): the
    rest only carry the leader's HW, taken on the loop (and its log start offset: when that
    moved past ours — retention or DeleteRecords — the step runs on the dir after all)."""
    if p.error_code == ErrorCode.none:
        div = p.diverging_epoch
        return bool(p.records) or (div is not None and div.epoch >= 0 and div.end_offset >= 0)
    return p.error_code == ErrorCode.offset_out_of_range


def storage_step(plog: Any, p: Any) -> tuple[str, Any]:
    """The storage part of applying one partition's fetch answer (blocking; on the log's
    dir worker in the broker). Returns ("truncated", offset) | ("diverged", True) |
    ("appended", got data) | ("error", None); storage errors propagate."""
    err = p.error_code
    if err == ErrorCode.none:
        div = p.diverging_epoch
        if div is not None and div.epoch >= 0 and div.end_offset >= 0:
            local_epoch, local_end = plog.end_offset_for_epoch(div.epoch)
            target = div.end_offset if local_epoch != div.epoch else min(div.end_offset, local_end)
            if plog.truncate_to(target):
                return "truncated", target
            return "diverged", True
        data = p.records
        if data:
            plog.append_as_follower(data)
        plog.high_watermark = min(p.high_watermark, plog.log_end_offset)
        if p.log_start_offset > plog.log_start_offset:  # retention / DeleteRecords on the leader
            plog.increment_log_start_offset(min(p.log_start_offset, plog.high_watermark))
        return "appended", bool(data)
    if err == ErrorCode.offset_out_of_range:
        leo = plog.log_end_offset
        if p.log_start_offset > leo:
            plog.truncate_fully_and_start_at(p.log_start_offset)
        else:
            plog.truncate_to(max(p.high_watermark, plog.log_start_offset))
        return "truncated", plog.log_end_offset
    return "error", None


def storage_steps(items: list[tuple[Any, Any]]) -> list[Any]:
    """Several partitions' storage steps in one job (one dir's worker): each one's result,
    or the storage exception it raised (the others still run)."""
    out: list[Any] = []
    for plog, p in items:
        try:
            out.append(storage_step(plog, p))
        except (StorageError, OSError) as exc:
            out.append(exc)
    return out
