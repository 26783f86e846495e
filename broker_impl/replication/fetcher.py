"""Follower fetchers: replicate partitions from their leaders.

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

One pipeline per leader: a partition with new data never waits behind a
long-poll for idle ones. Each round

1. waits for the previous round's storage steps until they are ``step_wait_ms`` (50 ms)
   old (a step already older — a slow or hung dir — is not waited for again);
2. sends ONE Fetch with every partition followed from that leader except those whose step
   is still running (a slow or hung dir: they sit out, so that dir holds up only its own
   partitions) and those backing off;
3. long-polls for ``replica.fetch.wait.max.ms`` only when no partition sits out; while one
   does, ``max_wait`` is the age of its step (at least 10 ms, at most the configured
   wait), so it rejoins soon after its step ends, and a hung dir costs only a slowly
   growing poll; a partition backing off (an error from the leader) likewise limits
   ``max_wait`` to the end of its back-off; a partition that starts being followed while a long poll (> 100 ms) is
   in flight drops that fetch's connection (the leader answers a connection in order, so
   a second fetch would wait behind it) and the next round, reconnected, carries it;
4. applies the answer: a partition without records, divergence or error only takes the
   leader's HW (``min(leader HW, local LEO)``, lock-free, on the loop); the others' storage
   steps (:func:`broker_impl.replication.follow_round.storage_step`, applied by
   :mod:`broker_impl.replication.follow_apply`) run on their log dir's worker (``FetcherHost.run_io``), one
   job per dir per round for all that dir's partitions, under each partition's
   ``partition_lock`` (a partition whose lock is held — a move's swap — gets a job of its
   own, so it cannot hold up the rest of its dir).

The leader answers a Fetch as soon as any partition in it has data (min_bytes=1), so the
next fetch of a busy partition — the one that moves the leader's HW and completes acks=all
— is always in flight right after its append.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import math
import uuid
from typing import Any, Protocol

from broker_impl.replication.follow_apply import BACKOFF_S, StepsOwner, StorageSteps
from broker_impl.replication.follow_round import FollowState, is_ready, needs_storage, plan_wait
from broker_impl.state.effects import TopicPartition
from kafka_common import ids, wire
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient

log = logging.getLogger(__name__)
FETCH = 1
RESPONSE_MAX_BYTES = 10 * 1024 * 1024
INTERRUPT_POLL_MS = 100     # a joining partition drops a fetch in flight that may poll longer than this
JOIN_SETTLE_S = 1.0         # after a join, polls stay short this long: the joins that follow it do not interrupt
REFRESH_S = 1.0             # every partition's fetch state is looked at again at least this often


class FetcherHost(Protocol):
    """What the fetchers need from the runtime (kept narrow for the tests)."""
    node_id: int

    def broker_epoch(self) -> int: ...
    def leader_address(self, leader_id: int) -> tuple[str, int] | None: ...
    def get_log(self, tp: TopicPartition) -> Any: ...
    def sasl(self) -> tuple[str, str] | None: ...


class FetcherOwner(StepsOwner, Protocol):
    """The fetcher manager (:class:`broker_impl.replication.fetcher_manager.FetcherManager`)
    as each leader's fetcher sees it: the runtime, the settings, the counters."""
    host: FetcherHost
    wait_max_ms: int
    step_wait_ms: int
    max_bytes: int
    stats: collections.Counter


class LeaderFetcher:
    """A round costs what changed, not what is followed: the partitions whose fetch state may
    have moved since the last request — joined or left, a storage step started or ended, a
    back-off started or ended — are kept in ``dirty``, and an incremental request looks only
    at those (every partition again each ``REFRESH_S``: retention moves a follower's log start
    behind the fetcher's back). Steps and back-offs under way are kept aside (``running``,
    ``backing_off``) for the round's ``max_wait``. With 100 partitions per leader, walking them
    all was a third of a follower's loop. Its storage steps are a part, ``steps``
    (:class:`~broker_impl.replication.follow_apply.StorageSteps`), holding the fetcher as its
    ``StepsHost``."""

    def __init__(self, mgr: FetcherOwner, leader_id: int) -> None:
        self.mgr = mgr
        self.leader_id = leader_id
        self.partitions: dict[TopicPartition, FollowState] = {}
        self.running: dict[TopicPartition, FollowState] = {}       # a storage step under way
        self.backing_off: dict[TopicPartition, FollowState] = {}   # an error's back-off under way
        self.dirty: set[TopicPartition] = set()                    # look at before the next request
        self.names: dict[uuid.UUID, str] = {}                      # topic id -> name (answers)
        self.refreshed_at = -math.inf
        self.client: KafkaClient | None = None
        self.changed = asyncio.Event()
        self._interrupt = asyncio.Event()
        self.polling_ms = 0  # max_wait of the fetch in flight (0: none)
        self.joined_at = -math.inf  # loop time of the last join
        self.session_id, self.session_epoch = 0, 0
        self.sent: dict[TopicPartition, tuple] = {}  # what the leader's session holds per partition
        self.members: dict[TopicPartition, FollowState] = {}   # … and for which of our states
        self.steps = StorageSteps(self)
        self.task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")

    def join(self, st: FollowState) -> None:
        self.partitions[st.tp] = st
        self.names[st.topic_id] = st.tp.topic
        self.dirty.add(st.tp)

    def leave(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self.running.pop(tp, None)
        self.backing_off.pop(tp, None)
        self.dirty.add(tp)     # the next request forgets it

    def step_started(self, st: FollowState, task: "asyncio.Future", now: float) -> None:
        st.applying, st.applying_since = task, now
        self.running[st.tp] = st
        self.dirty.add(st.tp)  # sits out while the step runs

    def step_ended(self, st: FollowState) -> None:
        st.applying = None
        if self.running.get(st.tp) is st:
            del self.running[st.tp]
        self.dirty.add(st.tp)  # rejoins, at its new log end

    def back_off(self, st: FollowState, until: float) -> None:
        st.backoff_until = until
        if self.partitions.get(st.tp) is st:
            self.backing_off[st.tp] = st
        self.dirty.add(st.tp)

    def wake(self) -> None:
        """A partition joined: it must not wait for the long poll in flight to end. The leader
        answers a connection in order, so a second fetch would queue behind the first: the
        connection is dropped instead and the next round (reconnected) carries every partition.
        Partitions join in bursts (a new topic: one per log created, over seconds), so for
        ``JOIN_SETTLE_S`` after a join the rounds poll at most ``INTERRUPT_POLL_MS``: the rest
        of the burst waits for such a short poll instead of dropping one connection each."""
        self.joined_at = asyncio.get_running_loop().time()
        self.changed.set()
        if self.polling_ms > INTERRUPT_POLL_MS:
            self._interrupt.set()

    async def close(self, timeout_s: float = 1.0) -> None:
        """Cancel the fetch loop and close its connection, each bounded: Python 3.11's
        ``wait_for`` may swallow a cancel that races a completing request, so the task is
        never awaited without a limit."""
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=timeout_s)
        if not self.task.done():
            log.warning("fetcher for leader %s did not stop within %.1f s", self.leader_id, timeout_s)
        client, self.client = self.client, None
        if client is not None:
            closing = asyncio.ensure_future(client.close())
            await asyncio.wait({closing}, timeout=timeout_s)
            if not closing.done():
                closing.cancel()

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
                self.reset_session()
                log.info("fetch from leader %s failed: %s", self.leader_id, exc)
                if self.client is not None:
                    await self.client.close()
                    self.client = None
                await self._sleep(min(BACKOFF_S * failures, 2.0))
            except Exception:  # a bug must not kill replication silently
                self.reset_session()
                log.exception("fetcher for leader %s", self.leader_id)
                await self._sleep(1.0)

    async def _sleep(self, seconds: float) -> None:
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def reset_session(self) -> None:
        """Forget the fetch session (the next request is a full one asking for a new one)."""
        self.session_id, self.session_epoch, self.sent, self.members = 0, 0, {}, {}

    def _request(self, client: KafkaClient, wait_ms: int, now: float
                 ) -> tuple[Any, int, dict[TopicPartition, tuple], dict[TopicPartition, FollowState]] | None:
        """The Fetch: full (asking for a session) when there is none — every partition not
        sitting out — else incremental: of the partitions in ``dirty``, those whose fetch state
        differs from what the leader's session holds, and ``forgotten_topics_data`` for those
        that left or sit out. Returns (request, version, the session's partitions and their
        states once answered), or None when no partition would be in it (``dirty`` is then
        kept for the next round)."""
        host, cfg = self.mgr.host, self.mgr
        version = client.pick_version(FETCH, 12, 16)
        mod = wire.request_module(FETCH, version)
        use_session = version >= 13
        incremental = use_session and self.session_id != 0
        if now - self.refreshed_at >= REFRESH_S:
            self.refreshed_at = now
            self.dirty.update(self.partitions)
        look: Any = self.dirty if incremental else list(self.partitions)
        self.dirty = set()
        sent: dict[TopicPartition, tuple] = dict(self.sent) if incremental else {}
        members: dict[TopicPartition, FollowState] = dict(self.members) if incremental else {}
        topics: dict[uuid.UUID, list] = {}
        names: dict[uuid.UUID, str] = {}
        forgotten: dict[uuid.UUID, list[int]] = {}
        for tp in look:
            st = self.partitions.get(tp)
            plog = host.get_log(tp) if st is not None and is_ready(st, now) else None
            if plog is None:   # left, sits out, or no log: out of the session
                old = sent.pop(tp, None)
                members.pop(tp, None)
                if incremental and old is not None:
                    forgotten.setdefault(old[0], []).append(tp.partition)
                continue
            assert st is not None
            epoch = plog.latest_epoch
            state = (st.topic_id, st.leader_epoch, plog.log_end_offset, epoch if epoch is not None else -1,
                     plog.log_start_offset)
            members[tp] = st
            if incremental and sent.get(tp) == state:
                continue   # unchanged: the leader's session has it
            sent[tp] = state
            topics.setdefault(st.topic_id, []).append(wire.make(
                mod.FetchPartition, partition=tp.partition, current_leader_epoch=st.leader_epoch,
                fetch_offset=state[2], last_fetched_epoch=state[3], log_start_offset=state[4],
                partition_max_bytes=cfg.max_bytes))
            names[st.topic_id] = tp.topic
        if not sent:
            self.dirty.update(look)   # nothing to send: look again next round
            return None
        fetch_topics = tuple(wire.make(mod.FetchTopic, topic=names[t], topic_id=t, partitions=tuple(ps))
                             for t, ps in topics.items())
        forgotten_topics = tuple(wire.make(mod.ForgottenTopic, topic_id=t, partitions=tuple(ps))
                                 for t, ps in forgotten.items())
        fields: dict[str, Any] = dict(
            replica_id=host.node_id, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1,
            max_bytes=RESPONSE_MAX_BYTES, isolation_level=0,
            session_id=self.session_id if incremental else 0,
            session_epoch=self.session_epoch if incremental else (0 if use_session else -1),
            topics=fetch_topics, forgotten_topics_data=forgotten_topics, rack_id="", cluster_id=None)
        if version >= 15:
            fields["replica_state"] = mod.ReplicaState(replica_id=host.node_id, replica_epoch=host.broker_epoch())
        return wire.make(wire.request_class(FETCH, version), **fields), version, sent, members

    def _expire_backoffs(self, now: float) -> None:
        for tp, st in list(self.backing_off.items()):
            if st.backoff_until <= now:
                del self.backing_off[tp]
                self.dirty.add(tp)   # rejoins

    async def _round(self, client: KafkaClient) -> bool:
        loop = asyncio.get_running_loop()
        # the steps younger than step_wait_ms (the previous round's): wait for them, until the
        # oldest of them reaches that age; older ones (a slow or hung dir) are not waited for
        now = loop.time()
        bound = self.mgr.step_wait_ms / 1000
        young = [st for st in self.running.values() if st.applying is not None and now - st.applying_since < bound]
        if young:
            await asyncio.wait({st.applying for st in young if st.applying is not None},
                               timeout=min(st.applying_since for st in young) + bound - now)
        now = loop.time()
        self._expire_backoffs(now)
        sitting_out = self.running.keys() | self.backing_off.keys()
        if len(sitting_out) >= len(self.partitions):
            idle = [st.backoff_until for st in self.backing_off.values() if st.applying is None]
            await self._sleep(min(idle) - now if idle else BACKOFF_S)  # an applied step wakes it
            return False
        wait_ms = plan_wait(min((st.applying_since for st in self.running.values()), default=None),
                            min((st.backoff_until for st in self.backing_off.values()), default=None),
                            now, self.mgr.wait_max_ms)
        if now - self.joined_at < JOIN_SETTLE_S:
            wait_ms = min(wait_ms, INTERRUPT_POLL_MS)
        built = self._request(client, wait_ms, now)
        if built is None:
            await self._sleep(BACKOFF_S)
            return False
        req, version, sent, members = built
        self._interrupt.clear()
        self.polling_ms = wait_ms
        fetch = asyncio.ensure_future(client.request(req, timeout_s=wait_ms / 1000 + 10))
        interrupted = asyncio.ensure_future(self._interrupt.wait())
        try:
            await asyncio.wait({fetch, interrupted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.polling_ms = 0
            interrupted.cancel()
            if not fetch.done():
                fetch.cancel()
        if not fetch.done() or fetch.cancelled():  # a partition joined during a long poll
            self.mgr.stats["interrupts"] += 1
            self.client = None
            self.reset_session()
            await client.close()
            return False
        try:
            resp = fetch.result()
        except BaseException:
            self.reset_session()
            raise
        self.mgr.stats["rounds"] += 1
        if resp.error_code in (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch):
            self.mgr.stats["session_resets"] += 1
            self.reset_session()   # the leader lost or refused the session: a full fetch next
            return False
        if resp.error_code != ErrorCode.none:
            self.reset_session()
            raise ClientError(f"fetch: {resp.error_code.name}")
        if version >= 13:
            if req.session_id == 0:          # full request: the leader's new session, if it made one
                self.session_id, self.session_epoch = resp.session_id or 0, 1
            else:
                self.session_epoch = 1 if self.session_epoch >= 2**31 - 1 else self.session_epoch + 1
            self.sent = sent if self.session_id else {}
            self.members = members if self.session_id else {}
        got = False
        by_dir: dict[str, list[tuple[FollowState, Any, Any]]] = {}
        for topic in resp.responses:
            name = self.names.get(ids.from_wire(topic.topic_id)) if version >= 13 else topic.topic
            if name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                st = members.get(tp)
                if st is None or self.partitions.get(tp) is not st:
                    continue  # not in this fetch, or removed / re-added while it was in flight
                plog = self.mgr.host.get_log(st.tp)
                if plog is None:
                    continue
                if not needs_storage(p) and not p.log_start_offset > plog.log_start_offset:
                    if p.error_code == ErrorCode.none:  # only the HW: lock-free, on the loop
                        plog.high_watermark = min(p.high_watermark, plog.log_end_offset)
                    else:
                        self.steps.settle(st, p, ("error", None))
                    continue
                got = True
                by_dir.setdefault(getattr(plog, "log_dir", ""), []).append((st, plog, p))
        # the steps start now, not when the request was sent: after a long poll that stale
        # time made a step just begun look "old" (a slow dir), so the next round did not wait
        # for it and long-polled the idle partitions for as long as the poll had lasted — the
        # partition's HW, and its acks=all producers, waited for that poll or another append
        started = loop.time()
        for items in by_dir.values():
            self.steps.start(items, started)
        return got
