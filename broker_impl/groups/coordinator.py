"""The group coordinator's I/O edge: ``__consumer_offsets`` partitions, loads, writes, timers.

A broker coordinates the groups of every ``__consumer_offsets`` partition it leads whose
log dir is online (Kafka: the coordinator is the leader of the group's partition,
``partition_for(group_id)``). Ownership follows the metadata image and the local dir state:
:meth:`GroupCoordinator.on_partition_changed` (called for every changed partition and on
dir state changes) starts a load when this broker becomes the leader and unloads when it
stops being the leader or the partition's dir goes offline — parked JoinGroup/SyncGroup
requests then get NOT_COORDINATOR and requests for those groups too, until the new leader
has loaded them (COORDINATOR_LOAD_IN_PROGRESS meanwhile).

- **Load** (:mod:`.offsets_ownership`, the composed part that owns ``owned``): the
  partition's log from its start to its end, read on the dir's worker
  (``BrokerView.replica_io``), records applied last-writer-wins (tombstones delete), groups
  with members come back Stable with fresh session deadlines (Kafka's behaviour).
- **Write**: one batch per request (an OffsetCommit's offsets, a group record, a deletion's
  tombstones) appended as leader under the partition's lock, then the high watermark must
  pass it (acks=all, ``offsets.commit.timeout.ms``) with ``|ISR| ≥ min.insync.replicas``.
  Errors map as Kafka maps them for OffsetCommit: NOT_ENOUGH_REPLICAS / timeout →
  COORDINATOR_NOT_AVAILABLE, not the leader / storage error → NOT_COORDINATOR.
  The in-memory state changes only after the write is durable.
- **Create on first use**: FindCoordinator for a group when the topic does not exist asks
  the controller to create it (``offsets.topic.num.partitions``,
  ``offsets.topic.replication.factor``) and answers COORDINATOR_NOT_AVAILABLE until its
  partitions have leaders; clients retry.
- **Timers**: one task calls :meth:`Groups.tick` at the state's next deadline (≤ 100 ms).
- **Events** (node event log): ``group_coordinator_loaded`` (partition, leader_epoch,
  load_ms, groups with a stored record, offsets) and ``group_coordinator_unloaded``
  (partition, groups) — the lab's ``coordinator_failover_ms`` is read from them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import uuid
from typing import Any, Awaitable, Callable

from kio.schema.errors import ErrorCode

from broker_impl.groups.coordinator_config import CoordinatorConfig
from broker_impl.groups.offsets_ownership import OFFSETS_TOPIC, OffsetsOwnership, Ownership
from broker_impl.groups.state import codes as E
from broker_impl.groups.state import records as R
from broker_impl.groups.state.group import Groups, GroupState, JoinResult, Reply, StoreGroup, SyncResult
from kafka_common import wire

log = logging.getLogger(__name__)
TICK_MAX_S = 0.1
CREATE_TIMEOUT_S = 10.0


class GroupCoordinator:
    """The coordinator of the groups of the offsets partitions led here; composes its
    :class:`OffsetsOwnership` (``ownership``: which partitions, their loads), which sees it
    as an :class:`~broker_impl.groups.offsets_ownership.OwnershipHost`."""

    def __init__(self, view: Any, purgatory: Any, notify_partition: Callable[[uuid.UUID, int], None],
                 config: CoordinatorConfig, *, rng: random.Random | None = None,
                 now_ms: Callable[[], int] | None = None, emit: Callable[..., Any] | None = None) -> None:
        self.view = view
        self.purgatory = purgatory
        self.notify_partition = notify_partition
        self.config = config
        self.groups = Groups(config.groups, rng or random.SystemRandom())
        self._now_ms = now_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._tokens = itertools.count(1)
        self._timer: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._creating: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self.emit = emit or (lambda event, **fields: None)   # the node event log
        self.ownership = OffsetsOwnership(self)
        self.owned = self.ownership.owned   # the part's dict itself (it is never replaced)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """On the loop, once: the timer task and a scan of the offsets partitions."""
        if self._started:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop (a test feeding metadata synchronously): first request starts it
        self._started = True
        self._wake = asyncio.Event()
        self._timer = asyncio.get_running_loop().create_task(self._timer_loop())
        self.reconcile_all()

    @property
    def started(self) -> bool:
        return self._started

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def now_ms(self) -> int:
        return self._now_ms()

    @staticmethod
    def wall_ms() -> int:
        """Commit timestamps (stored in the offset records) are wall-clock time, as in Kafka."""
        return time.time_ns() // 1_000_000


    def status(self, group_id: str) -> int:
        """NONE when this broker coordinates ``group_id`` now, else the error to answer."""
        if not group_id:
            return E.INVALID_GROUP_ID
        if not self._started:
            self.start()
        entry = self.owned.get(self.partition_of(group_id))
        if entry is None:
            return E.NOT_COORDINATOR
        if entry.state is Ownership.LOADING:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return E.NONE

    # ------------------------------------------------------------------ the ownership part's calls
    @property
    def offsets_topic_id(self) -> uuid.UUID | None:
        return self.ownership.offsets_topic_id

    def partition_count(self) -> int:
        return self.ownership.partition_count()

    def partition_of(self, group_id: str) -> int:
        return self.ownership.partition_of(group_id)

    def on_partition_changed(self, topic_id: uuid.UUID, partition: int) -> None:
        """A partition's leadership, ISR or local dir state changed (or it was appended to)."""
        self.ownership.on_partition_changed(topic_id, partition)

    def reconcile_all(self) -> None:
        self.ownership.reconcile_all()

    # ------------------------------------------------------------------ FindCoordinator
    def find(self, key: str, listener_name: str) -> tuple[int, int, str, int, str | None]:
        """(error, node id, host, port, message) of the coordinator of group ``key``."""
        if not self._started:
            self.start()
        tid = self.offsets_topic_id
        if tid is None:
            self._ensure_topic()
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1, f"{OFFSETS_TOPIC} is being created"
        reg = self.view.image.partition(tid, self.partition_of(key))
        if reg is None or reg.leader < 0:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1, "the group's offsets partition has no leader"
        broker = self.view.image.brokers.get(reg.leader)
        endpoint = broker.endpoint(listener_name) if broker is not None and not broker.fenced else None
        if endpoint is None:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1, f"broker {reg.leader} is not reachable"
        return E.NONE, reg.leader, endpoint.host, endpoint.port, None

    def _ensure_topic(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = self.spawn(self._create_topic())

    async def _create_topic(self) -> None:
        req_cls = wire.request_class(19, 7)
        topic_cls = getattr(wire.request_module(19, 7), "CreatableTopic")
        request = wire.make(req_cls, topics=(wire.make(
            topic_cls, name=OFFSETS_TOPIC, num_partitions=self.config.offsets_partitions,
            replication_factor=self.config.offsets_replication_factor, assignments=(), configs=()),),
            validate_only=False)
        try:
            response = await asyncio.wait_for(self.view.controller.create_topics(request), CREATE_TIMEOUT_S)
        except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
            log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
            return
        for t in response.topics:
            if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                log.warning("creating %s: %s %s", t.name, t.error_code.name, t.error_message)
            else:
                log.info("created %s (%d partitions, RF %d)", OFFSETS_TOPIC, self.config.offsets_partitions,
                         self.config.offsets_replication_factor)

    # ------------------------------------------------------------------ parked requests
    def new_waiter(self) -> tuple[int, "asyncio.Future[Any]"]:
        token = next(self._tokens)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[token] = fut
        return token, fut

    def drop_waiter(self, token: int) -> None:
        self._waiters.pop(token, None)

    def _deliver(self, reply: Reply) -> None:
        fut = self._waiters.pop(reply.token, None)
        if fut is not None and not fut.done():
            fut.set_result(reply.result)

    def _execute(self, effects: list[Any]) -> None:
        for e in effects:
            if isinstance(e, Reply):
                self._deliver(e)
            elif isinstance(e, StoreGroup):
                self.spawn(self._store_group(e))
        self.wake_timer()

    def execute(self, effects: list[Any]) -> None:
        self._execute(effects)

    async def _store_group(self, e: StoreGroup) -> None:
        g = self.groups.get(e.group_id)
        if g is None:
            self._fail_replies(e, E.NOT_COORDINATOR)
            return
        error = await self.write(e.group_id, [(R.encode_key(R.GroupKey(e.group_id)),
                                               R.encode_group(R.group_value(g)))])
        if error == E.NONE:
            for reply in e.replies:
                self._deliver(reply)
            return
        self._fail_replies(e, error)
        self._execute(self.groups.store_failed(e.group_id, e.generation, self.now_ms()))

    def _fail_replies(self, e: StoreGroup, error: int) -> None:
        for reply in e.replies:
            result = reply.result
            failed = (JoinResult(error, member_id=result.member_id) if isinstance(result, JoinResult)
                      else SyncResult(error))
            self._deliver(Reply(reply.token, failed))

    # ------------------------------------------------------------------ writes (acks=all)
    async def write(self, group_id: str, recs: list[tuple[bytes, bytes | None]]) -> int:
        """Append ``recs`` to the group's partition and wait until the ISR has them."""
        view = self.view
        partition = self.partition_of(group_id)
        entry = self.owned.get(partition)
        tid = self.offsets_topic_id
        if entry is None or entry.state is not Ownership.LOADED or tid is None:
            return E.NOT_COORDINATOR
        reg = view.image.partition(tid, partition)
        replica = view.local_replica(tid, partition)
        if reg is None or reg.leader != view.node_id or replica is None or view.is_partition_offline(tid, partition):
            return E.NOT_COORDINATOR
        if len(reg.isr) < view.min_insync_replicas(tid):
            return E.COORDINATOR_NOT_AVAILABLE
        batch = R.encode_batch(recs, self.wall_ms())
        try:
            async with view.partition_lock(OFFSETS_TOPIC, partition):
                _base, last = await view.replica_io(replica, replica.append_as_leader, batch, reg.leader_epoch)
        except Exception as exc:
            if isinstance(exc, view.storage_exceptions) or isinstance(exc, OSError):
                view.on_storage_error(tid, partition, "group_write", exc)
                return E.NOT_COORDINATOR
            code = getattr(exc, "error_code", None)
            if isinstance(code, int):
                log.warning("%s-%d: write refused: %s", OFFSETS_TOPIC, partition, exc)
                return E.UNKNOWN_SERVER_ERROR
            raise
        view.on_leader_append(tid, partition)
        self.notify_partition(tid, partition)
        wait_offset = last + 1

        def settled() -> bool:
            r = view.image.partition(tid, partition)
            if r is None or r.leader != view.node_id or view.is_partition_offline(tid, partition):
                return True
            rep = view.local_replica(tid, partition)
            return rep is None or rep.high_watermark >= wait_offset

        await self.purgatory.wait_until([(tid, partition)], settled, self.config.commit_timeout_ms / 1000)
        r = view.image.partition(tid, partition)
        rep = view.local_replica(tid, partition)
        if r is None or r.leader != view.node_id or rep is None or view.is_partition_offline(tid, partition):
            return E.NOT_COORDINATOR
        if rep.high_watermark < wait_offset or len(r.isr) < view.min_insync_replicas(tid):
            return E.COORDINATOR_NOT_AVAILABLE
        if self.owned.get(partition) is not entry:
            return E.NOT_COORDINATOR
        return E.NONE

    # ------------------------------------------------------------------ timers
    def wake_timer(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _timer_loop(self) -> None:
        assert self._wake is not None
        while True:
            now = self.now_ms()
            try:
                self._execute(self.groups.tick(now))
            except Exception:   # a bug in the rules: logged, and the timers keep running
                log.exception("group timers failed")
            self._wake.clear()
            deadline = self.groups.next_deadline_ms()
            wait_s = TICK_MAX_S if deadline is None else min(TICK_MAX_S, max(0.005, (deadline - now) / 1000))
            try:
                await asyncio.wait_for(self._wake.wait(), wait_s)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ views for the handlers
    def coordinated_groups(self) -> list[Any]:
        loaded = {p for p, e in self.owned.items() if e.state is Ownership.LOADED}
        return [g for gid, g in self.groups.groups.items()
                if g.state is not GroupState.DEAD and self.partition_of(gid) in loaded]

    def loading(self) -> bool:
        return any(e.state is Ownership.LOADING for e in self.owned.values())
