"""The client handlers' :class:`BrokerView` inside ``kraft-broker`` (:class:`RuntimeView`).

It extends :class:`broker_impl.api.storage_view.LogManagerView` (image + log manager
lookups) with what the runtime owns:

- status from its owner, the broker core: a partition is offline when the core says so
  (``ReplicaManager.is_offline``) or it sits in a dir that was already offline at start-up
  (never given to the core); DescribeLogDirs' online flag is the core's ``LogDirs``;
- leader ISR/HW bookkeeping per led partition (:class:`broker_impl.state.isr.LeaderIsr`),
  created and dropped by the role effects (:mod:`.dataplane`), fed by every leader append
  and valid follower fetch; its ``SendAlterPartition`` effects go to the controller (API 56)
  and the answer comes back to it; HW = min LEO of the (maximal) ISR, written to the log so
  Fetch/Produce see it; a moved HW wakes the purgatory. The periodic :meth:`tick` drops the
  state of a partition the core no longer has this broker lead (its role effect may still
  wait behind a storage effect of that partition);
- CreateTopics forwarded to the controller; AlterReplicaLogDirs handed to the core;
- ``replica_io`` / ``partition_lock``: the replica's log-dir worker (:mod:`.dir_io`), never
  the loop; what the view does on the loop (HW publish, position check, ISR bookkeeping)
  takes no log lock and does no I/O (a new leader's epoch-start write goes to the dir worker).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from broker_impl.api.context import ApiContext
from broker_impl.api.storage_view import LogManagerView
from broker_impl.runtime.controller_requests import ControllerRequests
from broker_impl.runtime.host import Host
from broker_impl.state.effects import TopicPartition
from broker_impl.state.fetch_position import follower_position
from broker_impl.state.isr import LeaderIsr, SendAlterPartition
from kafka_common import ids
from kafka_common import topic_config as tc
from kafka_common.config import default_text

log = logging.getLogger(__name__)


class CoreMover:
    """``ReplicaMover``: AlterReplicaLogDirs → the pure core."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def alter_replica_log_dir(self, topic_id: uuid.UUID, partition: int, target_dir: uuid.UUID) -> int:
        host = self.host
        tp = host.core.replicas.tp_of(topic_id, partition)
        if tp is None:
            reg = host.image.topics.get(topic_id)
            tp = TopicPartition(reg.name if reg is not None else str(topic_id), partition)
        code, effects = host.core.alter_replica_log_dir(tp, target_dir, host.now_ms())
        host.feed(effects)
        return code


def _assign_epoch_start(plog: Any, epoch: int) -> None:
    plog.assign_epoch_start_offset(epoch, plog.log_end_offset)


class RuntimeView(LogManagerView):
    def __init__(self, host: Host, requests: ControllerRequests, cluster_id: str, listener_name: str) -> None:
        cfg = host.cfg
        super().__init__(node_id=cfg.node_id, cluster_id=cluster_id, listener_name=listener_name,
                         image=host.image, log_manager=host.lm, controller=requests, mover=CoreMover(host),
                         now_ms=host.now_ms, auto_create_topics=cfg.auto_create_topics_enable,
                         num_partitions=cfg.num_partitions, default_replication_factor=cfg.default_replication_factor,
                         min_insync_replicas=cfg.min_insync_replicas,
                         static_config=tc.static_from_server_config(cfg.raw, default_text))
        self.host = host
        self.requests = requests
        self.lag_time_max_ms = cfg.replica_lag_time_max_ms
        self.leaders: dict[tuple[uuid.UUID, int], LeaderIsr] = {}
        self.api: ApiContext | None = None

    # ------------------------------------------------------------------ status (the core's)
    def is_partition_offline(self, topic_id: uuid.UUID, partition: int) -> bool:
        return self.host.core.replicas.is_offline(topic_id, partition)

    def dir_cordoned(self, dir_id: uuid.UUID | None) -> bool:
        return dir_id is not None and dir_id in self.host.core.log_dirs.cordoned

    def dir_online(self, dir_id: uuid.UUID | None, path: str) -> bool:
        dirs = self.host.core.log_dirs
        return dir_id is not None and dirs.is_known(dir_id) and dirs.is_online(dir_id)

    # ------------------------------------------------------------------ blocking I/O
    async def replica_io(self, replica: Any, fn: Any, *args: Any) -> Any:
        """On the replica's log-dir worker (``broker_impl.runtime.dir_io``), never the loop."""
        return await self.host.dir_io.run(replica.log_dir, fn, *args)

    def partition_lock(self, topic: str, partition: int) -> Any:
        return self.host.dir_io.partition_lock(topic, partition)

    # ------------------------------------------------------------------ roles (from the data plane)
    def become_leader(self, topic_id: uuid.UUID, partition: int) -> None:
        reg = self.image.partition(topic_id, partition)
        name = self.topic_name(topic_id)
        plog = self.lm.get_log(name, partition) if name is not None else None
        if reg is None or plog is None or reg.leader != self.node_id:
            self.leaders.pop((topic_id, partition), None)
            return
        leo = plog.log_end_offset
        if plog.is_offline:
            return
        # where this leader's epoch starts: written (epoch checkpoint, fsync) on the dir's
        # worker, ahead of any append of this term (the worker is FIFO; at the LEO the
        # worker sees, i.e. after a follower step still in flight)
        fut = self.host.dir_io.submit(plog.log_dir, _assign_epoch_start, plog, reg.leader_epoch)
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
        name = self.topic_name(topic_id)
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
        plog = self.lm.get_log(self.topic_name(topic_id) or "", partition)
        if plog is not None and st.on_leader_append(plog.log_end_offset, self.now_ms()):
            self._publish_hw(topic_id, partition, st)

    def on_follower_fetch(self, topic_id: uuid.UUID, partition: int, replica_id: int, fetch_offset: int,
                          last_fetched_epoch: int) -> None:
        st = self.leaders.get((topic_id, partition))
        if st is None:  # no leader state (yet): the plain bookkeeping
            super().on_follower_fetch(topic_id, partition, replica_id, fetch_offset, last_fetched_epoch)
            return
        plog = self.lm.get_log(self.topic_name(topic_id) or "", partition)
        if plog is None or not follower_position(plog, fetch_offset, last_fetched_epoch).valid:
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

    # ------------------------------------------------------------------ ISR (AlterPartition)
    def tick(self) -> None:
        now = self.now_ms()
        replicas = self.host.core.replicas
        for key, st in list(self.leaders.items()):
            if replicas.leader_epoch(*key) != st.leader_epoch:
                del self.leaders[key]  # the core no longer has us lead it (the role effect may still wait)
                continue
            self._send(st.tick(now))

    def _send(self, effects: list) -> None:
        for e in effects:
            if isinstance(e, SendAlterPartition):
                self.host.spawn(self._alter_partition(e))

    async def _alter_partition(self, e: SendAlterPartition) -> None:
        code, committed = await self.requests.alter_partition(e.topic_id, e.partition, e.leader_epoch,
                                                              e.partition_epoch, tuple(e.new_isr))
        self.host.events.emit("alter_partition", topic_id=ids.to_base64(e.topic_id), partition=e.partition,
                              new_isr=list(e.new_isr), partition_epoch=e.partition_epoch, error_code=code)
        st = self.leaders.get((e.topic_id, e.partition))
        if st is None or st.leader_epoch != e.leader_epoch:
            return
        if committed is not None and committed.leader_epoch != st.leader_epoch:
            committed = None
        st.on_alter_partition_response(code if code >= 0 else 1, self.now_ms(), committed)
        self._publish_hw(e.topic_id, e.partition, st)
        if self.api is not None:
            self.api.notify_partition(e.topic_id, e.partition)
