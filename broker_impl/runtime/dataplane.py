"""The broker's data plane (:class:`DataPlane`): the client listener, the follower
fetchers and the dir mover, and the core's partition-role effects that drive them:
BecomeLeader / BecomeFollower / UpdateLeaderState, Start/StopFetcher, Start/StopDirMover,
SwapFutureLog, MarkPartitionsOffline.

The client listener serves :class:`broker_impl.api.handlers.BrokerApi` over a
:class:`broker_impl.runtime.runtime_view.RuntimeView`; the leaders' ISR/HW state lives in
that view and is created and dropped here, by the role effects.

Ordering: a role effect of a partition runs on the loop after the storage effects of
*that* partition queued before it (its log must exist before it is led, followed or
moved), in order; other partitions are not held up, so a hung dir stalls only its own
partitions. SwapFutureLog runs as a task (the mover's swap, off the loop on the dirs'
workers under the partition's lock); later role effects of that partition wait for it the
same way. Fetchers and mover reach storage through the per-dir workers (:mod:`.dir_io`).

Partition status and roles are the core's (``Host.core.replicas``); this module keeps no
copy of them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import uuid
from typing import Any

from broker_impl.api.handlers import BrokerApi
from broker_impl.groups.coordinator_config import CoordinatorConfig, GroupConfigError
from broker_impl.replication.fetcher_manager import FetcherManager
from broker_impl.replication.mover import DirMover
from broker_impl.runtime.controller_requests import ControllerRequests
from broker_impl.runtime.host import Host
from broker_impl.runtime.runtime_view import RuntimeView
from broker_impl.state import effects as fx
from broker_impl.storage import StorageError
from kafka_common.config import ServerConfig
from kafka_runtime.limits import ListenerLimits
from kafka_runtime.request_context import SecurityConfig
from kafka_runtime.server import KafkaServer

log = logging.getLogger(__name__)


def client_listener(cfg: ServerConfig) -> Any:
    """The broker's client listener: the first of ``listeners`` that is not a controller listener."""
    ctrl = {n.upper() for n in cfg.controller_listener_names}
    for listener in cfg.listeners:
        if listener.name.upper() not in ctrl:
            return listener
    return None


class FetchHost:
    """The runtime as the follower fetchers see it (``broker_impl.replication.fetcher.FetcherHost``)."""

    def __init__(self, host: Host, listener_name: str) -> None:
        self.host = host
        self.node_id = host.cfg.node_id
        self.listener_name = listener_name

    def broker_epoch(self) -> int:
        epoch = self.host.core.lifecycle.broker_epoch
        return epoch if epoch is not None else -1

    def leader_address(self, leader_id: int) -> tuple[str, int] | None:
        reg = self.host.image.brokers.get(leader_id)
        if reg is None:
            return None
        for ep in reg.endpoints:
            if ep.name.upper() == self.listener_name.upper():
                return ep.host or "127.0.0.1", ep.port
        return None

    def get_log(self, tp: fx.TopicPartition) -> Any:
        return self.host.lm.get_log(tp.topic, tp.partition)

    async def run_io(self, plog: Any, fn: Any, *args: Any) -> Any:
        """A follower's storage step on the log's dir worker."""
        return await self.host.dir_io.run(plog.log_dir, fn, *args)

    def partition_lock(self, tp: fx.TopicPartition) -> Any:
        return self.host.dir_io.partition_lock(tp.topic, tp.partition)

    def sasl(self) -> tuple[str, str] | None:
        cfg = self.host.cfg
        if cfg.security_protocol(self.listener_name) == "SASL_PLAINTEXT" and cfg.sasl_plain_username:
            return cfg.sasl_plain_username, cfg.sasl_plain_password
        return None


class DataPlane:
    def __init__(self, host: Host, requests: ControllerRequests, cluster_id: str) -> None:
        self.host = host
        cfg = host.cfg
        self.listener = client_listener(cfg)
        listener_name = self.listener.name if self.listener is not None else "PLAINTEXT"
        self.view = RuntimeView(host, requests, cluster_id, listener_name)
        self.fetchers = FetcherManager(FetchHost(host, listener_name), wait_max_ms=cfg.replica_fetch_wait_max_ms,
                                       max_bytes=cfg.replica_fetch_max_bytes,
                                       on_truncated=lambda tp, offset: host.events.emit(
                                           "follower_truncated", topic=tp.topic, partition=tp.partition,
                                           offset=offset))
        self.mover = DirMover(host.lm, self._future_caught_up,
                              run_io=lambda plog, fn, *a: host.dir_io.run(plog.log_dir, fn, *a),
                              partition_lock=lambda tp: host.dir_io.partition_lock(tp.topic, tp.partition))
        self.api: BrokerApi | None = None
        self.server: KafkaServer | None = None
        self.storage_tail: dict[fx.TopicPartition, concurrent.futures.Future] = {}
        self.role_queue: dict[fx.TopicPartition, collections.deque] = {}

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.fetchers.close()
        await self.mover.close()

    # ------------------------------------------------------------------ ordering
    def after_storage(self, tp: fx.TopicPartition, fut: concurrent.futures.Future) -> None:
        """A storage effect of ``tp`` was queued: its later role effects wait for ``fut``."""
        self.storage_tail[tp] = fut

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
        fut.add_done_callback(lambda _f: self.host.call_from_thread(self._drain_roles, tp))

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

    # ------------------------------------------------------------------ role effects
    def _topic_id(self, tp: fx.TopicPartition) -> uuid.UUID | None:
        return self.host.image.topic_ids.get(tp.topic)

    def _notify(self, topic_id: uuid.UUID | None, partition: int) -> None:
        if self.api is not None and topic_id is not None:
            self.api.notify_partition(topic_id, partition)

    def apply_role(self, e: Any) -> None:
        """A partition-role effect, on the loop, after the storage effects before it."""
        view, fetchers, mover = self.view, self.fetchers, self.mover
        if self.host.stopping:
            return
        if isinstance(e, fx.MarkPartitionsOffline):
            fetchers.remove(e.partitions)
            for tp in e.partitions:
                mover.stop(tp)
                tid = self._topic_id(tp)
                if tid is not None:
                    view.drop_leader(tid, tp.partition)
                self._notify(tid, tp.partition)
        elif isinstance(e, fx.StopFetcher):
            fetchers.remove(e.partitions)
        elif isinstance(e, fx.StartFetcher):
            if self.host.lm.get_log(e.tp.topic, e.tp.partition) is not None or \
                    not self.host.core.replicas.is_offline(e.topic_id, e.tp.partition):
                fetchers.add(e.tp, e.topic_id, e.leader_id, e.leader_epoch)
        elif isinstance(e, fx.StartDirMover):
            mover.start(e.tp)
        elif isinstance(e, fx.StopDirMover):
            mover.stop(e.tp)
        elif isinstance(e, fx.SwapFutureLog):
            self._swap(e)
        elif isinstance(e, fx.BecomeLeader):
            fetchers.remove((e.tp,))
            view.become_leader(e.topic_id, e.tp.partition)
            self._notify(e.topic_id, e.tp.partition)
        elif isinstance(e, fx.UpdateLeaderState):
            tid = self._topic_id(e.tp)
            if tid is not None:
                view.update_leader(tid, e.tp.partition)
            self._notify(tid, e.tp.partition)
        elif isinstance(e, fx.BecomeFollower):
            view.drop_leader(e.topic_id, e.tp.partition)
            if e.leader_id < 0:
                fetchers.remove((e.tp,))
            self._notify(e.topic_id, e.tp.partition)
        else:
            raise TypeError(f"not a role effect: {e!r}")

    def _swap(self, e: fx.SwapFutureLog) -> None:
        """Swap in the future log off the loop (the mover holds the partition's lock); later
        role effects of the partition wait for it like for a storage effect."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self.storage_tail[e.tp] = done
        task = self.host.spawn(self._swap_async(e))
        task.add_done_callback(lambda _t: done.set_result(None))

    async def _swap_async(self, e: fx.SwapFutureLog) -> None:
        host = self.host
        try:
            swapped = await self.mover.swap(e.tp)
        except StorageError as exc:
            log.error("swap of %s failed: %s", e.tp, exc)
            host.events.emit("storage_effect_failed", effect="SwapFutureLog", topic=e.tp.topic,
                             partition=e.tp.partition, error=str(exc))
            if not host.stopping:
                host.feed(host.core.on_swap_failed(e.tp, host.now_ms()))
            return
        if not swapped:
            host.core.on_swap_skipped(e.tp)
        elif not host.stopping:
            host.feed(host.core.on_swap_done(e.tp, host.now_ms()))
            tid = self._topic_id(e.tp)
            if tid is not None:
                self.view.refresh_high_watermark(tid, e.tp.partition)

    def _future_caught_up(self, tp: fx.TopicPartition) -> None:
        self.host.feed(self.host.core.on_future_caught_up(tp, self.host.now_ms()))

    # ------------------------------------------------------------------ listener + ISR timer
    async def start_listener(self) -> None:
        host = self.host
        if self.server is not None or self.listener is None:
            return
        epoch = host.core.lifecycle.broker_epoch
        try:
            group_config = CoordinatorConfig.from_properties(host.cfg.raw)
        except GroupConfigError as exc:
            host.halt(str(exc))
            return
        self.api = BrokerApi(self.view, producer_id_base=(host.cfg.node_id << 48) | ((epoch & 0xFFFFFF) << 24),
                             group_config=group_config, events=host.events)
        self.view.api = self.api
        name = self.listener.name
        self.server = KafkaServer(self.api, host=self.listener.host or "0.0.0.0", port=self.listener.port,
                                  listener_name=name, security=SecurityConfig.for_listener(host.cfg, name),
                                  limits=ListenerLimits.from_config(host.cfg), events=host.events,
                                  log=lambda msg: log.warning("%s", msg))
        try:
            await self.server.start()
        except OSError as exc:
            host.halt(f"cannot listen on {self.listener.host}:{self.listener.port} ({name}): {exc}")
            return
        host.events.emit("listener_started", listener=name, port=self.server.port)

    def on_image_changes(self, changes: Any) -> None:
        if self.api is not None:
            self.api.on_image_changes(changes)

    async def isr_loop(self) -> None:
        step = max(0.05, min(self.host.cfg.replica_lag_time_max_ms / 4000, 0.5))
        while True:
            await asyncio.sleep(step)
            self.view.tick()
