"""The data plane's side of the broker runtime: what partition-role effects do.

:class:`DataPlane` owns the client listener (G's ``BrokerApi`` over a ``RuntimeView``), the
leaders' ISR/HW state (in the view), the follower fetchers and the dir mover, and executes
the core's partition-role effects: BecomeLeader / BecomeFollower / UpdateLeaderState,
Start/StopFetcher, Start/StopDirMover, SwapFutureLog, MarkPartitionsOffline.

Ordering: a role effect of a partition runs on the loop after the storage effects of *that*
partition queued before it (its log must exist before it is led, followed or moved), in
order; other partitions are not held up, so a hung dir stalls only its own partitions.
SwapFutureLog runs as a task (the mover's swap, off the loop on the dirs' workers under the
partition's lock); later role effects of that partition wait for it the same way.
Fetchers and mover reach storage through the runtime's per-dir workers
(``broker_impl.runtime.dir_io``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import uuid
from typing import TYPE_CHECKING, Any

from broker_impl.api.handlers import BrokerApi
from broker_impl.groups.coordinator import ConfigError as GroupConfigError, CoordinatorConfig
from broker_impl.replication.fetcher import FetcherManager
from broker_impl.replication.mover import DirMover
from broker_impl.runtime.dataplane import FetchHost, ReplicaAwareApi, RuntimeView, client_listener
from broker_impl.state import effects as fx
from broker_impl.storage import StorageError
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.server import KafkaServer, SecurityConfig

if TYPE_CHECKING:
    from broker_impl.runtime.broker import BrokerRuntime

log = logging.getLogger(__name__)

ROLE_EFFECTS = (fx.BecomeLeader, fx.BecomeFollower, fx.UpdateLeaderState, fx.StartFetcher, fx.StopFetcher,
                fx.StartDirMover, fx.StopDirMover, fx.SwapFutureLog, fx.MarkPartitionsOffline)


class DataPlane:
    def __init__(self, rt: "BrokerRuntime") -> None:
        self.rt = rt
        cfg = rt.cfg
        self.listener = client_listener(cfg)
        listener_name = self.listener.name if self.listener is not None else "PLAINTEXT"
        self.view = RuntimeView(rt, listener_name)
        self.fetchers = FetcherManager(FetchHost(rt, listener_name), wait_max_ms=cfg.replica_fetch_wait_max_ms,
                                       max_bytes=cfg.replica_fetch_max_bytes,
                                       on_truncated=lambda tp, offset: rt.events.emit(
                                           "follower_truncated", topic=tp.topic, partition=tp.partition,
                                           offset=offset))
        self.mover = DirMover(rt.lm, self._future_caught_up,
                              run_io=lambda plog, fn, *a: rt.dir_io.run(plog.log_dir, fn, *a),
                              partition_lock=lambda tp: rt.dir_io.partition_lock(tp.topic, tp.partition))
        self.api: BrokerApi | None = None
        self.server: KafkaServer | None = None
        self.partition_roles: dict[fx.TopicPartition, Any] = {}
        self.offline_partitions: set[fx.TopicPartition] = set()
        self.storage_tail: dict[fx.TopicPartition, concurrent.futures.Future] = {}
        self.role_queue: dict[fx.TopicPartition, collections.deque] = {}

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.fetchers.close()
        await self.mover.close()

    def order_role(self, e: Any) -> None:
        """Role effects of a partition run after the storage effects of that partition queued
        before them (its log must exist before it is led, followed or moved), in order; other
        partitions are not held up (a hung dir stalls only its own partitions)."""
        if isinstance(e, (fx.StopFetcher, fx.MarkPartitionsOffline)):
            free = tuple(tp for tp in e.partitions if not self.role_queue.get(tp))
            held = [tp for tp in e.partitions if self.role_queue.get(tp)]
            if free:
                self.apply_role(fx.StopFetcher(free) if isinstance(e, fx.StopFetcher)
                                else fx.MarkPartitionsOffline(e.dir_id, free))
            for tp in held:
                self.role_queue[tp].append(fx.StopFetcher((tp,)) if isinstance(e, fx.StopFetcher)
                                           else fx.MarkPartitionsOffline(e.dir_id, (tp,)))
            return
        tp = e.tp
        if isinstance(e, fx.StopDirMover):
            self.mover.stop(tp)  # stop copying at once; the effect still runs in order
        queue = self.role_queue.get(tp)
        if queue:
            queue.append(e)
            return
        tail = self.storage_tail.get(tp)
        if tail is None or tail.done():
            self.storage_tail.pop(tp, None)
            self.apply_role(e)
            return
        self.role_queue[tp] = collections.deque([e])
        self._wait_storage(tp, tail)

    def _wait_storage(self, tp: fx.TopicPartition, fut: concurrent.futures.Future) -> None:
        def done(_f: concurrent.futures.Future) -> None:
            try:
                self.rt._loop.call_soon_threadsafe(self._drain_roles, tp)
            except RuntimeError:  # the loop is closed: the broker is stopping
                pass
        fut.add_done_callback(done)

    def _drain_roles(self, tp: fx.TopicPartition) -> None:
        queue = self.role_queue.get(tp)
        while queue:
            tail = self.storage_tail.get(tp)
            if tail is not None and not tail.done():
                self._wait_storage(tp, tail)  # a later storage effect of this partition
                return
            self.storage_tail.pop(tp, None)
            self.apply_role(queue.popleft())
        self.role_queue.pop(tp, None)

    def _topic_id(self, tp: fx.TopicPartition) -> uuid.UUID | None:
        return self.rt.image.topic_ids.get(tp.topic)

    def apply_role(self, e: Any) -> None:
        """A partition-role effect, on the loop, after the storage effects before it."""
        view, fetchers, mover = self.view, self.fetchers, self.mover
        if self.rt._stopping:
            return
        if isinstance(e, fx.MarkPartitionsOffline):
            self.offline_partitions.update(e.partitions)
            fetchers.remove(e.partitions)
            for tp in e.partitions:
                self.partition_roles.pop(tp, None)
                mover.stop(tp)
                tid = self._topic_id(tp)
                if tid is not None:
                    view.drop_leader(tid, tp.partition)
                    if self.api is not None:
                        self.api.notify_partition(tid, tp.partition)
            return
        if isinstance(e, fx.StopFetcher):
            fetchers.remove(e.partitions)
            return
        if isinstance(e, fx.StartFetcher):
            if e.tp not in self.offline_partitions or self.rt.lm.get_log(e.tp.topic, e.tp.partition) is not None:
                fetchers.add(e.tp, e.topic_id, e.leader_id, e.leader_epoch)
            return
        if isinstance(e, fx.StartDirMover):
            mover.start(e.tp)
            return
        if isinstance(e, fx.StopDirMover):
            mover.stop(e.tp)
            return
        if isinstance(e, fx.SwapFutureLog):
            self._swap(e)
            return
        self.partition_roles[e.tp] = e
        if isinstance(e, fx.BecomeLeader):
            self.offline_partitions.discard(e.tp)
            fetchers.remove((e.tp,))
            view.become_leader(e.topic_id, e.tp.partition)
        elif isinstance(e, fx.UpdateLeaderState):
            tid = self._topic_id(e.tp)
            if tid is not None:
                view.update_leader(tid, e.tp.partition)
        elif isinstance(e, fx.BecomeFollower):
            self.offline_partitions.discard(e.tp)
            view.drop_leader(e.topic_id, e.tp.partition)
            if e.leader_id < 0:
                fetchers.remove((e.tp,))
        tid = getattr(e, "topic_id", None) or self._topic_id(e.tp)
        if self.api is not None and tid is not None:
            self.api.notify_partition(tid, e.tp.partition)

    def _swap(self, e: fx.SwapFutureLog) -> None:
        """Swap in the future log off the loop (the mover holds the partition's lock); later
        role effects of the partition wait for it like for a storage effect."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self.storage_tail[e.tp] = done
        task = asyncio.ensure_future(self._swap_async(e))
        task.add_done_callback(lambda _t: done.set_result(None))
        self.rt._bg.add(task)
        task.add_done_callback(self.rt._bg.discard)

    async def _swap_async(self, e: fx.SwapFutureLog) -> None:
        assert self.rt.core is not None
        try:
            swapped = await self.mover.swap(e.tp)
        except StorageError as exc:
            log.error("swap of %s failed: %s", e.tp, exc)
            self.rt.events.emit("storage_effect_failed", effect="SwapFutureLog", topic=e.tp.topic,
                                partition=e.tp.partition, error=str(exc))
            return
        if swapped and not self.rt._stopping:
            self.rt._feed(self.rt.core.on_swap_done(e.tp, self.rt._now()))
            tid = self._topic_id(e.tp)
            if tid is not None:
                self.view.refresh_high_watermark(tid, e.tp.partition)

    def _future_caught_up(self, tp: fx.TopicPartition) -> None:
        assert self.rt.core is not None
        self.rt._feed(self.rt.core.on_future_caught_up(tp, self.rt._now()))

    async def start_listener(self) -> None:
        assert self.rt.core is not None
        if self.server is not None or self.listener is None:
            return
        epoch = self.rt.core.lifecycle.broker_epoch
        try:
            group_config = CoordinatorConfig.from_properties(self.rt.cfg.raw)
        except GroupConfigError as exc:
            self.rt._halt(str(exc))
            return
        self.api = ReplicaAwareApi(self.view, producer_id_base=(self.rt.cfg.node_id << 48) | ((epoch & 0xFFFFFF) << 24),
                                   group_config=group_config, events=self.rt.events)
        self.view.api = self.api
        name = self.listener.name
        self.server = KafkaServer(self.api, host=self.listener.host or "0.0.0.0", port=self.listener.port,
                                  listener_name=name, security=SecurityConfig.for_listener(self.rt.cfg, name),
                                  limits=ListenerLimits.from_config(self.rt.cfg), events=self.rt.events,
                                  log=lambda msg: log.warning("%s", msg))
        try:
            await self.server.start()
        except OSError as exc:
            self.rt._halt(f"cannot listen on {self.listener.host}:{self.listener.port} ({name}): {exc}")
            return
        self.rt.events.emit("listener_started", listener=name, port=self.server.port)

    async def isr_loop(self) -> None:
        step = max(0.05, min(self.rt.cfg.replica_lag_time_max_ms / 4000, 0.5))
        while True:
            await asyncio.sleep(step)
            self.view.tick()
