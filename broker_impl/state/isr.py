"""Leader-side ISR and high-watermark bookkeeping of one partition
(Kafka's ``Partition.maybeShrinkIsr`` / ``maybeExpandIsr`` / ``updateFollowerFetchState``).

For the runtime that mounts the data plane: the leader calls :meth:`LeaderIsr.on_leader_append`
after each append, :meth:`on_follower_fetch` for each follower Fetch, :meth:`tick` on a
timer, and :meth:`on_metadata` / :meth:`on_alter_partition_response` with what the
controller answered. Effects: :class:`SendAlterPartition` (at most one in flight).

- A follower is caught up at a fetch when its fetch offset reaches the leader's LEO at
  that moment; if it reaches the LEO of its previous fetch, it was caught up then
  (``last_caught_up_ms`` = previous fetch time) — Kafka's rule.
- Shrink: ISR followers not caught up for longer than ``replica.lag.time.max.ms``.
- Expand: a follower outside the ISR whose LEO ≥ HW and ≥ the start offset of the current
  leader epoch, and which is eligible (Kafka's ``isReplicaIsrEligible``: in the metadata
  image the broker is registered, not fenced, not in controlled shutdown, and the dir of
  this replica is online — the caller says so with ``eligible``). A refused expansion
  (INELIGIBLE_REPLICA, a stale epoch, no answer…) is not proposed again for that follower
  before :data:`EXPAND_RETRY_BACKOFF_MS`: the image that would explain the refusal may
  still be on its way, and every follower fetch must not become an AlterPartition.
- HW = min LEO over the *maximal* ISR (committed ISR ∪ a pending expansion; a pending
  shrink still counts its members) — it never goes backwards.
- ``acks=all``: accepted only if |ISR| ≥ ``min.insync.replicas`` (else NOT_ENOUGH_REPLICAS);
  done once HW passes the batch's last offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_common.ids import TopicId
from kafka_common.metadata.model import PartitionRegistration

NONE = 0
NOT_ENOUGH_REPLICAS = 19
INVALID_UPDATE_VERSION = 96
FENCED_LEADER_EPOCH = 74
INELIGIBLE_REPLICA = 107
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
EXPAND_RETRY_BACKOFF_MS = 500  # after a refused expansion, per follower


@dataclass(frozen=True, slots=True)
class SendAlterPartition:
    topic_id: TopicId
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(slots=True)
class _Follower:
    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = 0


@dataclass(slots=True)
class LeaderIsr:
    broker_id: int
    topic_id: TopicId
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    leader_epoch_start_offset: int
    leader_leo: int
    high_watermark: int
    lag_time_max_ms: int
    now_ms: int
    pending: tuple[int, ...] | None = None        # proposed ISR in flight
    pending_since_ms: int = 0
    _followers: dict[int, _Follower] = field(default_factory=dict)
    _expand_not_before_ms: dict[int, int] = field(default_factory=dict)  # follower → after a refusal

    @classmethod
    def become_leader(cls, broker_id: int, reg: PartitionRegistration, *, leo: int, high_watermark: int,
                      lag_time_max_ms: int, now_ms: int) -> "LeaderIsr":
        """New leadership: followers start as caught up now (Kafka resets their state with
        ``lastCaughtUpTime = now`` for ISR members)."""
        self = cls(broker_id, reg.topic_id, reg.partition_id, reg.replicas, reg.isr, reg.leader_epoch,
                   reg.partition_epoch, leo, leo, min(high_watermark, leo), lag_time_max_ms, now_ms)
        for r in reg.replicas:
            if r != broker_id:
                self._followers[r] = _Follower(last_caught_up_ms=now_ms if r in reg.isr else 0,
                                               last_fetch_ms=now_ms, last_fetch_leader_leo=leo)
        return self

    # ------------------------------------------------------------------ queries
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending)))

    def follower_leo(self, replica: int) -> int:
        return self._followers[replica].leo

    def check_acks_all(self, min_insync_replicas: int) -> int:
        """Before appending an acks=all batch: NONE or NOT_ENOUGH_REPLICAS."""
        return NONE if len(self.isr) >= min_insync_replicas else NOT_ENOUGH_REPLICAS

    def is_replicated(self, last_offset: int) -> bool:
        return self.high_watermark > last_offset

    # ------------------------------------------------------------------ inputs
    def _advance_hw(self) -> bool:
        # a member that is no replica any more (reassigned away, its removal replayed) is not waited for
        leos = [self.leader_leo] + [self._followers[r].leo for r in self.maximal_isr
                                    if r != self.broker_id and r in self._followers]
        new = min(leos)
        if new > self.high_watermark:
            self.high_watermark = new
            return True
        return False

    def on_leader_append(self, leo: int, now_ms: int) -> bool:
        """Returns whether the HW moved (a single-member ISR commits at once)."""
        self.leader_leo = leo
        self.now_ms = now_ms
        return self._advance_hw()

    def on_follower_fetch(self, replica: int, fetch_offset: int, now_ms: int,
                          eligible: bool = True) -> tuple[list, bool]:
        """Returns (effects, HW moved). ``eligible``: the image lets ``replica`` join the ISR."""
        f = self._followers.get(replica)
        if f is None:
            return [], False  # not a replica (the handler answers NOT_LEADER_OR_FOLLOWER)
        if fetch_offset >= self.leader_leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.leo = fetch_offset
        f.last_fetch_ms, f.last_fetch_leader_leo = now_ms, self.leader_leo
        self.now_ms = now_ms
        out: list = []
        if (replica not in self.isr and self.pending is None and fetch_offset >= self.high_watermark
                and fetch_offset >= self.leader_epoch_start_offset and eligible
                and now_ms >= self._expand_not_before_ms.get(replica, 0)):
            out += self._propose(tuple(sorted(set(self.isr) | {replica})), now_ms)
        return out, self._advance_hw()

    def out_of_sync(self, now_ms: int) -> tuple[int, ...]:
        return tuple(r for r in self.isr if r != self.broker_id and r in self._followers
                     and now_ms - self._followers[r].last_caught_up_ms > self.lag_time_max_ms)

    def tick(self, now_ms: int) -> list:
        self.now_ms = now_ms
        if self.pending is not None:
            return []
        lagging = self.out_of_sync(now_ms)
        if not lagging:
            return []
        return self._propose(tuple(r for r in self.isr if r not in lagging), now_ms)

    def _propose(self, new_isr: tuple[int, ...], now_ms: int) -> list:
        self.pending, self.pending_since_ms = new_isr, now_ms
        return [SendAlterPartition(self.topic_id, self.partition, self.leader_epoch, self.partition_epoch, new_isr)]

    def on_alter_partition_response(self, error_code: int, now_ms: int,
                                    committed: PartitionRegistration | None = None) -> list:
        """``committed``: the partition state the controller returned on success."""
        if self.pending is None:
            return []
        proposed, self.pending = self.pending, None
        if error_code == NONE:
            if committed is not None:
                self.on_metadata(committed)
            else:
                self.isr = proposed
            self._advance_hw()
            return []
        # on an error nothing is retried from here: the next tick (shrink) or follower fetch
        # (expand) proposes again, at their own pace — an expansion not before the backoff
        # (the metadata will tell what happened: newer epoch, another leader, a fenced broker)
        for r in set(proposed) - set(self.isr):
            self._expand_not_before_ms[r] = now_ms + EXPAND_RETRY_BACKOFF_MS
        return []

    def on_metadata(self, reg: PartitionRegistration) -> None:
        """A newer registration with the same leader epoch (ISR / replicas changed)."""
        if reg.partition_epoch < self.partition_epoch:
            return
        self.isr, self.partition_epoch = reg.isr, reg.partition_epoch
        if reg.replicas != self.replicas:
            for r in reg.replicas:
                if r != self.broker_id and r not in self._followers:
                    self._followers[r] = _Follower(last_fetch_ms=self.now_ms, last_fetch_leader_leo=self.leader_leo)
            for r in [r for r in self._followers if r not in reg.replicas]:
                del self._followers[r]
            self.replicas = reg.replicas
            if self.pending is not None and not set(self.pending) <= set(reg.replicas):
                self.pending = None   # a proposal naming a removed replica: the controller refuses it anyway
        if self.pending is not None and set(self.pending) == set(reg.isr):
            self.pending = None
        self._advance_hw()
