"""The broker's data plane inside ``kraft-broker``: G's :class:`BrokerApi` on the client
listener, over a :class:`RuntimeView` (the BrokerView protocol of ``broker_impl.api.view``).

``RuntimeView`` extends G's ``LogManagerView`` (image + LogManager lookups, log dirs) with
what the runtime owns:

- leader ISR/HW bookkeeping per led partition (``broker_impl.state.isr.LeaderIsr``), fed by
  every leader append and follower fetch; its ``SendAlterPartition`` effects go to the
  controller (API 56) and the answer comes back to it; HW = min LEO of the (maximal) ISR,
  written to the log so Fetch/Produce see it; a moved HW wakes G's purgatory;
- CreateTopics forwarded to the controller over the broker's controller connection;
- AlterReplicaLogDirs handed to the pure core (``BrokerCore.alter_replica_log_dir``);
- ``replica_io`` / ``partition_lock``: blocking replica operations of the handlers run on
  the replica's log-dir worker (``broker_impl.runtime.dir_io``), never on the loop; what the
  view itself does on the loop (HW publish, divergence check, ISR bookkeeping) takes no
  log lock and does no I/O (the epoch-start write of a new leader goes to the dir worker).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any

from broker_impl.api.handlers import BrokerApi
from broker_impl.api.storage_view import LogManagerView
from broker_impl.state.effects import TopicPartition
from broker_impl.state.isr import LeaderIsr, SendAlterPartition
from kafka_common import ids, wire
from kafka_common import topic_config as tc
from kafka_common.config import default_text

if TYPE_CHECKING:
    from broker_impl.runtime.broker import BrokerRuntime

log = logging.getLogger(__name__)
ALTER_PARTITION = 56
CREATE_TOPICS = 19


class ControllerForwarder:
    """``ControllerChannel`` for the CreateTopics and AlterConfigs handlers: the request is
    sent as it is."""

    def __init__(self, runtime: "BrokerRuntime") -> None:
        self.runtime = runtime

    async def create_topics(self, request: Any) -> Any:
        from kafka_runtime.client import ClientError
        try:
            return await self.runtime.data_channel.request(lambda c: request, 30.0)
        except ClientError as exc:
            raise ConnectionError(f"controller: {exc}") from None

    alter_configs = create_topics  # AlterConfigs / IncrementalAlterConfigs: sent as they are


class CoreMover:
    """``ReplicaMover``: AlterReplicaLogDirs → the pure core (behaviour §4)."""

    def __init__(self, runtime: "BrokerRuntime") -> None:
        self.runtime = runtime

    async def alter_replica_log_dir(self, topic_id: uuid.UUID, partition: int, target_dir: uuid.UUID) -> int:
        rt = self.runtime
        assert rt.core is not None
        reg = rt.image.topics.get(topic_id)
        tp = rt.core.replicas.tp_of(topic_id, partition)
        if tp is None:
            tp = TopicPartition(reg.name if reg is not None else str(topic_id), partition)
        code, effects = rt.core.alter_replica_log_dir(tp, target_dir, rt._now())
        rt._feed(effects)
        return code


def diverged(plog: Any, fetch_offset: int, last_fetched_epoch: int) -> bool:
    """A follower fetch whose position is not a prefix of the leader's log: beyond its end,
    or (KIP-320) its last fetched epoch ends earlier here / is unknown here."""
    if fetch_offset > plog.log_end_offset:
        return True
    if last_fetched_epoch < 0:
        return False
    epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
    return epoch < 0 or end < fetch_offset or epoch < last_fetched_epoch


def _assign_epoch_start(plog: Any, epoch: int) -> None:
    plog.assign_epoch_start_offset(epoch, plog.log_end_offset)


class ReplicaAwareApi(BrokerApi):
    """G's ``BrokerApi`` with one adaptation: before a replica Fetch is handled, each
    partition's ``last_fetched_epoch`` is noted for ``RuntimeView.on_follower_fetch`` (the
    handler reports progress before its diverging-epoch check and without the epoch)."""

    async def handle(self, ctx: Any, header: Any, request: Any) -> Any:
        if int(request.__api_key__) == 1:
            version = request.__version__
            replica = request.replica_state.replica_id if version >= 15 else request.replica_id
            if replica >= 0:
                view = self.view
                for topic in request.topics:
                    tid = topic.topic_id if version >= 13 else view.image.topic_ids.get(topic.topic)
                    if tid is None:
                        continue
                    for p in topic.partitions:
                        view.last_fetched_epoch[(tid, p.partition, replica)] = getattr(p, "last_fetched_epoch", -1)
        return await super().handle(ctx, header, request)


class RuntimeView(LogManagerView):
    def __init__(self, runtime: "BrokerRuntime", listener_name: str) -> None:
        cfg = runtime.cfg
        super().__init__(node_id=cfg.node_id, cluster_id=runtime.cluster_id, listener_name=listener_name,
                         image=runtime.image, log_manager=runtime.lm, controller=ControllerForwarder(runtime),
                         mover=CoreMover(runtime), now_ms=runtime._now,
                         auto_create_topics=cfg.auto_create_topics_enable, num_partitions=cfg.num_partitions,
                         default_replication_factor=cfg.default_replication_factor,
                         min_insync_replicas=cfg.min_insync_replicas,
                         static_config=tc.static_from_server_config(cfg.raw, default_text))
        self.runtime = runtime
        self.lag_time_max_ms = cfg.replica_lag_time_max_ms
        self.leaders: dict[tuple[uuid.UUID, int], LeaderIsr] = {}
        self.api: Any = None
        self.isr_requests = 0
        # (topic id, partition, replica) → last_fetched_epoch of the replica fetch being
        # handled (set by ReplicaAwareApi before G's handler runs)
        self.last_fetched_epoch: dict[tuple[uuid.UUID, int, int], int] = {}

    # ------------------------------------------------------------------ blocking I/O
    async def replica_io(self, replica: Any, fn: Any, *args: Any) -> Any:
        """On the replica's log-dir worker (``broker_impl.runtime.dir_io``), never the loop."""
        return await self.runtime.dir_io.run(replica.log_dir, fn, *args)

    def partition_lock(self, topic: str, partition: int) -> Any:
        return self.runtime.dir_io.partition_lock(topic, partition)

    # ------------------------------------------------------------------ roles
    def become_leader(self, topic_id: uuid.UUID, partition: int) -> None:
        reg = self.image.partition(topic_id, partition)
        name = self._name(topic_id)
        plog = self.lm.get_log(name, partition) if name is not None else None
        if reg is None or plog is None or reg.leader != self.node_id:
            self.leaders.pop((topic_id, partition), None)
            return
        leo = plog.log_end_offset
        if plog.is_offline:
            return
        # where this leader's epoch starts: written (epoch checkpoint, fsync) on the dir's
        # worker, ahead of any append of this term (the worker is FIFO)
        # (at the LEO the worker sees: after a follower step still in flight)
        fut = self.runtime.dir_io.submit(plog.log_dir, _assign_epoch_start, plog, reg.leader_epoch)
        fut.add_done_callback(lambda f, n=name, p=partition: f.exception() is not None and log.warning(
            "become leader %s-%s: %s", n, p, f.exception()))  # a dir failure: the channel reported it
        st = LeaderIsr.become_leader(self.node_id, reg, leo=leo, high_watermark=plog.high_watermark,
                                     lag_time_max_ms=self.lag_time_max_ms, now_ms=self.now_ms())
        self.leaders[(topic_id, partition)] = st
        self._publish_hw(topic_id, partition, st)

    def update_leader(self, topic_id: uuid.UUID, partition: int) -> None:
        st = self.leaders.get((topic_id, partition))
        reg = self.image.partition(topic_id, partition)
        if st is None or reg is None:
            return
        if reg.leader != self.node_id or reg.leader_epoch != st.leader_epoch:
            return
        st.on_metadata(reg)
        self._publish_hw(topic_id, partition, st)

    def drop_leader(self, topic_id: uuid.UUID, partition: int) -> None:
        self.leaders.pop((topic_id, partition), None)

    # ------------------------------------------------------------------ progress (BrokerView)
    def _publish_hw(self, topic_id: uuid.UUID, partition: int, st: LeaderIsr) -> None:
        name = self._name(topic_id)
        plog = self.lm.get_log(name, partition) if name is not None else None
        if plog is not None and st.high_watermark > plog.high_watermark:
            plog.high_watermark = st.high_watermark
            if self.api is not None:
                self.api.notify_partition(topic_id, partition)

    def refresh_high_watermark(self, topic_id: uuid.UUID, partition: int) -> bool:
        st = self.leaders.get((topic_id, partition))
        if st is None:
            return super().refresh_high_watermark(topic_id, partition)
        self._publish_hw(topic_id, partition, st)
        return True

    def on_leader_append(self, topic_id: uuid.UUID, partition: int) -> None:
        st = self.leaders.get((topic_id, partition))
        if st is None:
            super().on_leader_append(topic_id, partition)
            return
        plog = self.lm.get_log(self._name(topic_id) or "", partition)
        if plog is not None and st.on_leader_append(plog.log_end_offset, self.now_ms()):
            self._publish_hw(topic_id, partition, st)

    def on_follower_fetch(self, topic_id: uuid.UUID, partition: int, replica_id: int, fetch_offset: int) -> None:
        st = self.leaders.get((topic_id, partition))
        if st is None:  # no leader state (yet): G's plain bookkeeping
            super().on_follower_fetch(topic_id, partition, replica_id, fetch_offset)
            return
        epoch = self.last_fetched_epoch.pop((topic_id, partition, replica_id), -1)
        plog = self.lm.get_log(self._name(topic_id) or "", partition)
        if plog is None or diverged(plog, fetch_offset, epoch):
            return  # a divergent follower's offset is no progress (Kafka: no fetch-state update)
        self.follower_leo[(topic_id, partition, replica_id)] = fetch_offset
        st.leader_leo = plog.log_end_offset
        effects, moved = st.on_follower_fetch(replica_id, fetch_offset, self.now_ms(),
                                              self._isr_eligible(topic_id, partition, replica_id))
        if moved:
            self._publish_hw(topic_id, partition, st)
        self._send(effects)

    def _isr_eligible(self, topic_id: uuid.UUID, partition: int, replica_id: int) -> bool:
        """Kafka's ``isReplicaIsrEligible``: registered, unfenced, not shutting down, the
        replica's dir online (KIP-858) — else the controller answers INELIGIBLE_REPLICA."""
        b = self.image.brokers.get(replica_id)
        if b is None or b.fenced or b.in_controlled_shutdown:
            return False
        reg = self.image.partition(topic_id, partition)
        if reg is None or replica_id not in reg.replicas:
            return False
        return b.has_online_dir(reg.directories[reg.replicas.index(replica_id)])

    def on_storage_error(self, topic_id: uuid.UUID, partition: int, op: str, exc: BaseException) -> None:
        super().on_storage_error(topic_id, partition, op, exc)
        if not isinstance(exc, self.storage_exceptions) and isinstance(exc, OSError):
            name = self._name(topic_id)
            plog = self.lm.get_log(name, partition) if name is not None else None
            if plog is not None:  # a raw OSError the storage layer did not see: report the dir
                self.runtime._storage_error(plog.log_dir, exc.errno or 5, op)

    # ------------------------------------------------------------------ ISR (AlterPartition)
    def tick(self) -> None:
        now = self.now_ms()
        for key, st in list(self.leaders.items()):
            reg = self.image.partition(*key)
            if reg is None or reg.leader != self.node_id or reg.leader_epoch != st.leader_epoch:
                del self.leaders[key]  # deleted or led elsewhere now (the role effect may still be queued)
                continue
            self._send(st.tick(now))

    def _send(self, effects: list) -> None:
        for e in effects:
            if isinstance(e, SendAlterPartition):
                self.isr_requests += 1
                self.runtime._spawn(self._alter_partition(e))

    async def _alter_partition(self, e: SendAlterPartition) -> None:
        from kafka_runtime.client import ClientError
        rt = self.runtime
        key = (e.topic_id, e.partition)
        assert rt.core is not None
        epoch = rt.core.lifecycle.broker_epoch

        def build(c: Any) -> Any:
            v = c.pick_version(ALTER_PARTITION, 2, 3)
            mod = wire.request_module(ALTER_PARTITION, v)
            part: dict[str, Any] = dict(partition_index=e.partition, leader_epoch=e.leader_epoch,
                                        leader_recovery_state=0, partition_epoch=e.partition_epoch)
            if v >= 3:
                part["new_isr_with_epochs"] = tuple(
                    mod.BrokerState(broker_id=b, broker_epoch=self.image.brokers[b].epoch if b in self.image.brokers else -1)
                    for b in e.new_isr)
            else:
                part["new_isr"] = tuple(e.new_isr)
            return wire.make(wire.request_class(ALTER_PARTITION, v), broker_id=self.node_id, broker_epoch=epoch,
                             topics=(wire.make(mod.TopicData, topic_id=e.topic_id,
                                               partitions=(wire.make(mod.PartitionData, **part),)),))
        code, committed = -1, None
        try:
            resp = await rt.data_channel.request(build, 10.0)
            code = int(resp.error_code.value)
            if code == 0:
                for t in resp.topics:
                    for p in t.partitions:
                        if ids.from_wire(t.topic_id) == e.topic_id and p.partition_index == e.partition:
                            code = int(p.error_code.value)
                            reg = self.image.partition(e.topic_id, e.partition)
                            if code == 0 and reg is not None:
                                committed = dataclasses.replace(reg, isr=tuple(p.isr), leader_epoch=p.leader_epoch,
                                                                partition_epoch=p.partition_epoch)
        except (ClientError, OSError, KeyError) as exc:
            log.warning("AlterPartition %s-%s failed: %s", e.topic_id, e.partition, exc)
        rt.events.emit("alter_partition", topic_id=ids.to_base64(e.topic_id), partition=e.partition,
                       new_isr=list(e.new_isr), partition_epoch=e.partition_epoch, error_code=code)
        st = self.leaders.get(key)
        if st is None or st.leader_epoch != e.leader_epoch:
            return
        if committed is not None and committed.leader_epoch != st.leader_epoch:
            committed = None
        st.on_alter_partition_response(code if code >= 0 else 1, self.now_ms(), committed)
        self._publish_hw(e.topic_id, e.partition, st)
        if self.api is not None:
            self.api.notify_partition(e.topic_id, e.partition)


class FetchHost:
    """The runtime as the follower fetchers see it (``broker_impl.replication.fetcher.FetcherHost``)."""

    def __init__(self, runtime: "BrokerRuntime", listener_name: str) -> None:
        self.runtime = runtime
        self.node_id = runtime.cfg.node_id
        self.listener_name = listener_name

    def broker_epoch(self) -> int:
        core = self.runtime.core
        return core.lifecycle.broker_epoch if core is not None and core.lifecycle.broker_epoch is not None else -1

    def leader_address(self, leader_id: int) -> tuple[str, int] | None:
        reg = self.runtime.image.brokers.get(leader_id)
        if reg is None:
            return None
        for ep in reg.endpoints:
            if ep.name.upper() == self.listener_name.upper():
                return ep.host or "127.0.0.1", ep.port
        return None

    def get_log(self, tp: TopicPartition) -> Any:
        lm = self.runtime.lm
        return lm.get_log(tp.topic, tp.partition) if lm is not None else None

    async def run_io(self, plog: Any, fn: Any, *args: Any) -> Any:
        """A follower's storage step on the log's dir worker."""
        return await self.runtime.dir_io.run(plog.log_dir, fn, *args)

    def partition_lock(self, tp: TopicPartition) -> Any:
        return self.runtime.dir_io.partition_lock(tp.topic, tp.partition)

    def sasl(self) -> tuple[str, str] | None:
        cfg = self.runtime.cfg
        if cfg.security_protocol(self.listener_name) == "SASL_PLAINTEXT" and cfg.sasl_plain_username:
            return cfg.sasl_plain_username, cfg.sasl_plain_password
        return None


def client_listener(cfg: Any) -> Any:
    """The broker's client listener: the first of ``listeners`` that is not a controller listener."""
    ctrl = {n.upper() for n in cfg.controller_listener_names}
    for listener in cfg.listeners:
        if listener.name.upper() not in ctrl:
            return listener
    return None
