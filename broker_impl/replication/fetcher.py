"""Follower fetchers: replicate partitions from their leaders (behaviour §3 "Data plane").

One :class:`LeaderFetcher` per leader broker id (one connection to it, Kafka's
``num.replica.fetchers=1``), carrying every partition this broker follows from that leader.
Each round sends one Fetch (v12+; ``replica_id`` = this broker, v15+ in ``replica_state``)
with, per partition, ``fetch_offset`` = the local LEO, ``last_fetched_epoch`` = the local
log's latest leader epoch and ``current_leader_epoch`` = the epoch the metadata names;
``max_wait`` = ``replica.fetch.wait.max.ms``, ``partition_max_bytes`` =
``replica.fetch.max.bytes``. The leader answers after its long poll.

Per partition in the answer:

- records → ``append_as_follower`` (offsets and epochs as the leader wrote them), then the
  local HW = min(leader HW, local LEO);
- ``diverging_epoch`` (KIP-320/595) → truncate the divergent tail: to the end offset the
  leader gave for that epoch, capped by the local end of the same epoch;
- OFFSET_OUT_OF_RANGE → if the leader's log starts after our LEO, start over empty at its
  log start; otherwise (no epoch the leader knows) truncate to the leader's HW;
- NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / storage errors on
  the leader → back off; the metadata will move the partition (StartFetcher again).

A local storage error (the follower's dir failed) drops the partition from the fetcher:
the DirFailureChannel has already reported the dir and the core stops the fetcher anyway.

The storage step of each partition (:func:`_storage_step`) runs on that log's dir worker
(``FetcherHost.run_io``, under ``partition_lock``), not on the event loop; the partition
sits out of the next rounds until its step is done, so its appends stay in order and a
slow dir holds up only its own partitions (other partitions of the same leader keep
being fetched).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from broker_impl.state.effects import TopicPartition
from broker_impl.storage.errors import KafkaStorageError, StorageError
from kafka_common import ids, wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient

log = logging.getLogger(__name__)
FETCH = 1
RESPONSE_MAX_BYTES = 10 * 1024 * 1024
BACKOFF_S = 0.2


@dataclass(slots=True)
class FollowState:
    tp: TopicPartition
    topic_id: uuid.UUID
    leader_epoch: int
    backoff_until: float = 0.0
    applying: "asyncio.Task | None" = None  # its storage step, while running


class FetcherHost:
    """What the fetchers need from the runtime (kept narrow for the tests)."""
    node_id: int

    def broker_epoch(self) -> int: ...
    def leader_address(self, leader_id: int) -> tuple[str, int] | None: ...
    def get_log(self, tp: TopicPartition) -> Any: ...
    def sasl(self) -> tuple[str, str] | None: ...


class LeaderFetcher:
    def __init__(self, mgr: "FetcherManager", leader_id: int) -> None:
        self.mgr = mgr
        self.leader_id = leader_id
        self.partitions: dict[TopicPartition, FollowState] = {}
        self.client: KafkaClient | None = None
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")
        self.rounds = 0

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        if self.client is not None:
            try:
                await self.client.close()
            except Exception:
                pass
            self.client = None

    async def _connect(self) -> KafkaClient:
        if self.client is not None and not self.client.closed:
            return self.client
        addr = self.mgr.host.leader_address(self.leader_id)
        if addr is None:
            raise ClientError(f"no endpoint for leader {self.leader_id}")
        self.client = await KafkaClient.connect(addr[0], addr[1], client_id=f"replica-fetcher-{self.mgr.host.node_id}",
                                                sasl=self.mgr.host.sasl(), timeout_s=5.0)
        return self.client

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self.partitions:
                self.changed.clear()
                await self.changed.wait()
                continue
            try:
                client = await self._connect()
                got = await self._round(client)
                failures = 0
                if not got:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except (ClientError, OSError, asyncio.TimeoutError) as exc:
                failures += 1
                log.info("fetch from leader %s failed: %s", self.leader_id, exc)
                if self.client is not None:
                    await self.client.close()
                    self.client = None
                await self._sleep(min(BACKOFF_S * failures, 2.0))
            except Exception:  # a bug must not kill replication silently
                log.exception("fetcher for leader %s", self.leader_id)
                await self._sleep(1.0)

    async def _sleep(self, seconds: float) -> None:
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _request(self, client: KafkaClient, states: list[FollowState]) -> tuple[Any, int]:
        host, cfg = self.mgr.host, self.mgr
        version = client.pick_version(FETCH, 12, 16)
        mod = wire.request_module(FETCH, version)
        topics: dict[uuid.UUID, list] = {}
        names: dict[uuid.UUID, str] = {}
        for st in states:
            plog = host.get_log(st.tp)
            if plog is None:
                continue
            epoch = plog.latest_epoch
            topics.setdefault(st.topic_id, []).append(wire.make(
                mod.FetchPartition, partition=st.tp.partition, current_leader_epoch=st.leader_epoch,
                fetch_offset=plog.log_end_offset, last_fetched_epoch=epoch if epoch is not None else -1,
                log_start_offset=plog.log_start_offset, partition_max_bytes=cfg.max_bytes))
            names[st.topic_id] = st.tp.topic
        fetch_topics = tuple(wire.make(mod.FetchTopic, topic=names[t], topic_id=t, partitions=tuple(ps))
                             for t, ps in topics.items())
        fields: dict[str, Any] = dict(
            replica_id=host.node_id, max_wait=datetime.timedelta(milliseconds=cfg.wait_max_ms), min_bytes=1,
            max_bytes=RESPONSE_MAX_BYTES, isolation_level=0, session_id=0, session_epoch=-1, topics=fetch_topics,
            forgotten_topics_data=(), rack_id="", cluster_id=None)
        if version >= 15:
            fields["replica_state"] = mod.ReplicaState(replica_id=host.node_id, replica_epoch=host.broker_epoch())
        return wire.make(wire.request_class(FETCH, version), **fields), version

    async def _round(self, client: KafkaClient) -> bool:
        now = asyncio.get_running_loop().time()
        states = [st for st in self.partitions.values() if st.backoff_until <= now and st.applying is None]
        if not states:
            idle = [st.backoff_until for st in self.partitions.values() if st.applying is None]
            await self._sleep(min(idle) - now if idle else BACKOFF_S)  # an applied step wakes it
            return False
        req, version = self._request(client, states)
        if not req.topics:
            await self._sleep(BACKOFF_S)
            return False
        resp = await client.request(req, timeout_s=self.mgr.wait_max_ms / 1000 + 10)
        self.rounds += 1
        if resp.error_code != ErrorCode.none:
            raise ClientError(f"fetch: {resp.error_code.name}")
        by_key = {(st.topic_id if version >= 13 else st.tp.topic, st.tp.partition): st for st in states}
        got = False
        for topic in resp.responses:
            key_t = ids.from_wire(topic.topic_id) if version >= 13 else topic.topic
            for p in topic.partitions:
                st = by_key.get((key_t, p.partition_index))
                if st is None or self.partitions.get(st.tp) is not st:
                    continue  # removed or re-added while the fetch was in flight
                # each partition's storage step runs on its own dir's worker; a partition
                # stays out of the next rounds until its step is done (one at a time, in
                # order), so a slow dir holds up only its own partitions
                st.applying = asyncio.create_task(self._apply_done(st, p))
                got |= bool(p.records) or p.diverging_epoch is not None
        return got

    async def _apply_done(self, st: FollowState, p: Any) -> None:
        try:
            await self._apply_async(st, p)
        except Exception:  # a bug must not kill replication silently
            log.exception("follower %s", st.tp)
        finally:
            st.applying = None
            self.changed.set()

    def _apply(self, st: FollowState, p: Any) -> bool:
        """Apply one partition's answer synchronously (the storage step inline)."""
        plog = self.mgr.host.get_log(st.tp)
        if plog is None:
            return False
        try:
            outcome = _storage_step(plog, p)
        except (StorageError, OSError) as exc:
            outcome = exc
        return self._settle(st, p, outcome)

    async def _apply_async(self, st: FollowState, p: Any) -> bool:
        """Apply one partition's answer with the storage step on the log's dir worker, under
        the partition's lock (never on the event loop)."""
        host = self.mgr.host
        plog = host.get_log(st.tp)
        if plog is None:
            return False
        run_io = getattr(host, "run_io", None)
        lock_of = getattr(host, "partition_lock", None)
        try:
            if run_io is None:
                outcome: Any = _storage_step(plog, p)
            elif lock_of is None:
                outcome = await run_io(plog, _storage_step, plog, p)
            else:
                async with lock_of(st.tp):
                    if host.get_log(st.tp) is not plog:  # swapped or gone meanwhile: next round
                        return False
                    outcome = await run_io(plog, _storage_step, plog, p)
        except (StorageError, OSError) as exc:
            outcome = exc
        return self._settle(st, p, outcome)

    def _settle(self, st: FollowState, p: Any, outcome: Any) -> bool:
        """Bookkeeping on the loop after the storage step: ``outcome`` is its result or the
        storage exception it raised."""
        if isinstance(outcome, BaseException):
            exc = outcome
            if isinstance(exc, StorageError) and not isinstance(exc, KafkaStorageError):
                # bad bytes: retry after a pause, keep the partition
                log.warning("follower %s: %s", st.tp, exc)
                st.backoff_until = asyncio.get_running_loop().time() + BACKOFF_S
                self.mgr.errors[type(exc).__name__] = self.mgr.errors.get(type(exc).__name__, 0) + 1
                return False
            # our dir failed (already reported through the channel) or a raw OSError
            log.warning("follower %s: %s", st.tp, exc)
            self.partitions.pop(st.tp, None)
            return False
        kind, value = outcome
        if kind == "truncated":
            self.mgr.on_truncated(st.tp, value)
            return True
        if kind in ("diverged", "appended"):
            return bool(value)
        err = p.error_code
        st.backoff_until = asyncio.get_running_loop().time() + BACKOFF_S
        self.mgr.errors[err.name] = self.mgr.errors.get(err.name, 0) + 1
        return False


def _storage_step(plog: Any, p: Any) -> tuple[str, Any]:
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
        return "appended", bool(data)
    if err == ErrorCode.offset_out_of_range:
        leo = plog.log_end_offset
        if p.log_start_offset > leo:
            plog.truncate_fully_and_start_at(p.log_start_offset)
        else:
            plog.truncate_to(max(p.high_watermark, plog.log_start_offset))
        return "truncated", plog.log_end_offset
    return "error", None


class FetcherManager:
    def __init__(self, host: FetcherHost, *, wait_max_ms: int, max_bytes: int,
                 on_truncated: Callable[[TopicPartition, int], None] | None = None) -> None:
        self.host = host
        self.wait_max_ms = wait_max_ms
        self.max_bytes = max_bytes
        self.fetchers: dict[int, LeaderFetcher] = {}
        self.leader_of: dict[TopicPartition, int] = {}
        self.errors: dict[str, int] = {}
        self._on_truncated = on_truncated

    def on_truncated(self, tp: TopicPartition, offset: int) -> None:
        if self._on_truncated is not None:
            self._on_truncated(tp, offset)

    def add(self, tp: TopicPartition, topic_id: uuid.UUID, leader_id: int, leader_epoch: int) -> None:
        self.remove((tp,))
        f = self.fetchers.get(leader_id)
        if f is None:
            f = self.fetchers[leader_id] = LeaderFetcher(self, leader_id)
        f.partitions[tp] = FollowState(tp, topic_id, leader_epoch)
        self.leader_of[tp] = leader_id
        f.changed.set()

    def remove(self, tps) -> None:
        for tp in tps:
            leader = self.leader_of.pop(tp, None)
            if leader is not None and leader in self.fetchers:
                self.fetchers[leader].partitions.pop(tp, None)

    def following(self) -> dict[TopicPartition, int]:
        return dict(self.leader_of)

    async def close(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for f in fetchers:
            await f.close()
