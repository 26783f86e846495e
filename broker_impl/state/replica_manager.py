"""Replica management on metadata changes (Kafka's ReplicaManager, KIP-858).

Input: the partition changes of one applied metadata batch (:class:`PartitionChange`, old
and new :class:`PartitionRegistration` of a partition, either may be None). Output: effects
(CreateLog, QueueAssignment, BecomeLeader/Follower, Start/StopFetcher, DeleteLog,
SwapFutureLog, StartDirMover). The KIP's case list, for a partition whose replica set
contains this broker and whose metadata dir for this broker is ``md``:

=================================  ============================================================
``md``                             action
=================================  ============================================================
UNASSIGNED                         log exists → send its actual dir; else create in the least
                                   loaded online dir (or the AlterReplicaLogDirs preferred dir)
                                   and send that dir
an online dir of this broker       no log → create there (a preferred dir wins, then sent);
                                   log there → no-op (resume a move if a future log exists);
                                   log elsewhere + future log in ``md`` → finish the move
                                   (SwapFutureLog); log in another online dir → send the
                                   actual dir (correction) unless a promotion is in flight
unknown / LOST / MIGRATING /       any dir offline → nothing (never re-stream offline replicas
an offline dir                     onto survivors, never attach); else as UNASSIGNED
=================================  ============================================================

A partition marked offline (its dir failed) is never re-created while offline
(KAFKA-16234); a re-created topic (new topic id) is (KAFKA-16157).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from broker_impl.state.effects import (BecomeFollower, BecomeLeader, CreateLog, DeleteLog, MarkPartitionsOffline,
                                       QueueAssignment, StartDirMover, StartFetcher, StopFetcher, SwapFutureLog,
                                       TopicPartition, UpdateLeaderState, event)
from broker_impl.state.log_dirs import LogDirs
from kafka_common.ids import UNASSIGNED, TopicId, to_base64
from kafka_common.metadata.model import PartitionRegistration

REASON_DELTA = "Applying metadata delta"


@dataclass(frozen=True, slots=True)
class PartitionChange:
    topic: str
    old: PartitionRegistration | None
    new: PartitionRegistration | None

    @property
    def partition(self) -> int:
        reg = self.new if self.new is not None else self.old
        assert reg is not None, "a change needs old or new"
        return reg.partition_id


@dataclass(frozen=True, slots=True)
class ExistingLog:
    """A log found on disk at start (storage's scan of the online dirs)."""
    tp: TopicPartition
    topic_id: TopicId | None     # None: no partition.metadata (a stray, KAFKA-16814)
    dir_id: uuid.UUID
    future: bool = False


class Hosted(enum.Enum):
    ONLINE = "online"
    OFFLINE = "offline"     # its dir failed: never re-created while offline
    PENDING = "pending"     # a replica in metadata but no local log (skipped while dirs are offline)


@dataclass(slots=True)
class LocalReplica:
    tp: TopicPartition
    topic_id: TopicId
    hosted: Hosted
    dir_id: uuid.UUID | None = None
    registration: PartitionRegistration | None = None
    role: str | None = None            # "leader" | "follower" | None
    leader_id: int = -1
    leader_epoch: int = -1
    fetching: bool = False


class ReplicaManager:
    def __init__(self, broker_id: int, log_dirs: LogDirs, existing_logs: Iterable[ExistingLog] = ()) -> None:
        self.broker_id = broker_id
        self.log_dirs = log_dirs
        self.logs: dict[TopicPartition, tuple[TopicId, uuid.UUID]] = {}
        self.futures: dict[TopicPartition, tuple[TopicId, uuid.UUID]] = {}
        # current logs found at start-up beside the one in ``logs`` for the same partition with
        # another topic id (a topic deleted and re-created while a dir was away): at most one of
        # them is the metadata's; ``strays`` sorts them out
        self.doubles: list[tuple[TopicPartition, TopicId | None, uuid.UUID]] = []
        for log in existing_logs:
            target = self.futures if log.future else self.logs
            if log.tp in target:
                if not log.future and target[log.tp][0] != log.topic_id:
                    self.doubles.append((log.tp, log.topic_id, log.dir_id))
                    continue
                raise ValueError(f"duplicate {'future ' if log.future else ''}log for {log.tp} in "
                                 f"{target[log.tp][1]} and {log.dir_id}")
            target[log.tp] = (log.topic_id, log.dir_id)
        self.partitions: dict[TopicPartition, LocalReplica] = {}
        self._by_id: dict[tuple[TopicId, int], TopicPartition] = {}
        self.preferred_dirs: dict[TopicPartition, uuid.UUID] = {}

    # ------------------------------------------------------------------ queries
    def is_replica(self, topic_id: TopicId, partition: int) -> bool:
        """Validity of a queued assignment: topic and partition exist and this broker is
        in the replica set (per the metadata applied so far)."""
        tp = self._by_id.get((topic_id, partition))
        if tp is None:
            return False
        lr = self.partitions.get(tp)
        return lr is not None and lr.registration is not None and self.broker_id in lr.registration.replicas

    def tp_of(self, topic_id: TopicId, partition: int) -> TopicPartition | None:
        return self._by_id.get((topic_id, partition))

    def leads_partition_in(self, dir_id: uuid.UUID) -> bool:
        return any(lr.dir_id == dir_id and lr.registration is not None and lr.registration.leader == self.broker_id
                   for lr in self.partitions.values())

    def is_offline(self, topic_id: TopicId, partition: int) -> bool:
        """Partition status, as the client handlers ask it: its log was in a dir that failed,
        or the dir it lives in (or is assigned to) is offline."""
        tp = self._by_id.get((topic_id, partition))
        lr = self.partitions.get(tp) if tp is not None else None
        if lr is None:
            return False
        if lr.hosted is Hosted.OFFLINE:
            return True
        dir_id = lr.dir_id
        if dir_id is None and lr.registration is not None and self.broker_id in lr.registration.replicas:
            dir_id = lr.registration.directory(self.broker_id)
        if dir_id is None:
            return False
        if self.log_dirs.is_known(dir_id):
            return not self.log_dirs.is_online(dir_id)
        # a dir id this broker does not know (LOST, MIGRATING, a dir unreadable at start-up)
        # while a dir is offline: the replica is not placed (``_place``) and is offline here
        return lr.hosted is Hosted.PENDING and dir_id != UNASSIGNED and self.log_dirs.any_offline

    def leader_epoch(self, topic_id: TopicId, partition: int) -> int | None:
        """The leader epoch of a partition this broker leads (per the metadata applied to
        the core), else None: the one answer to "do I lead it?"."""
        tp = self._by_id.get((topic_id, partition))
        lr = self.partitions.get(tp) if tp is not None else None
        if lr is None or lr.role != "leader" or lr.hosted is Hosted.OFFLINE:
            return None
        return lr.leader_epoch

    def offline_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, lr in self.partitions.items() if lr.hosted is Hosted.OFFLINE)

    def log_counts(self) -> dict[uuid.UUID, int]:
        counts = {d: 0 for d in self.log_dirs.configured}
        for _, d in list(self.logs.values()) + list(self.futures.values()):
            if d in counts:
                counts[d] += 1
        return counts

    def least_loaded_dir(self) -> uuid.UUID:
        """Online dirs by ascending log count (current + future); ties: configured order.
        Cordoned dirs (KIP-1066) only when every online dir is cordoned."""
        counts = self.log_counts()
        online = self.log_dirs.online
        if not online:
            raise RuntimeError("no online log dir to place a replica in")
        open_dirs = tuple(d for d in online if d not in self.log_dirs.cordoned)
        online = open_dirs or online
        return min(online, key=lambda d: (counts[d], self.log_dirs.configured.index(d)))

    # ------------------------------------------------------------------ metadata
    def strays(self, changes: Iterable[PartitionChange]) -> list:
        """First publish after start-up: every log on disk that no registration of this
        (complete) batch gives to this broker with the same topic id is a stray — its topic
        is gone (deleted while its dir was offline or the broker down), it has another id
        than the image's topic of that name (re-created: KAFKA-16157), it has no topic id
        (no ``partition.metadata``: KAFKA-16814), or this broker is no longer a replica. It
        is deleted, never attached (KAFKA-14616: before the partitions are created); of two
        logs of one partition with different ids, the image's is kept."""
        claimed = {(ch.topic, ch.new.partition_id): ch.new.topic_id for ch in changes
                   if ch.new is not None and self.broker_id in ch.new.replicas}
        out: list = []
        doubles, self.doubles = self.doubles, []
        for tp, topic_id, dir_id in sorted(doubles, key=lambda d: (d[0], str(d[2]))):
            if topic_id is not None and claimed.get((tp.topic, tp.partition)) == topic_id:
                stray = self.logs[tp]
                self.logs[tp] = (topic_id, dir_id)
                out.append(DeleteLog(tp, stray[0], stray[1], stray=True))
            else:
                out.append(DeleteLog(tp, topic_id, dir_id, stray=True))
        for table in (self.logs, self.futures):
            for tp, (topic_id, dir_id) in sorted(table.items()):
                if topic_id is None or claimed.get((tp.topic, tp.partition)) != topic_id:
                    del table[tp]
                    if table is self.logs:
                        out.append(DeleteLog(tp, topic_id, dir_id, stray=True))
        return out

    def apply(self, changes: Iterable[PartitionChange], *, promotions_in_flight: frozenset = frozenset()) -> list:
        """One batch's changes in Kafka's order (``ReplicaManager.applyDelta``): the replicas
        this broker loses, then the partitions it leads, then those it follows, each group in
        the batch's order. New logs go to the least-loaded dir in that order, so a broker's
        leaders spread over its dirs (leaders and followers interleaved would put every
        ``brokers``-th replica, all of its leaders of a topic, in one dir)."""
        out: list = []
        for ch in sorted(changes, key=self._apply_rank):
            out += self._apply_one(ch, promotions_in_flight)
        return out

    def _apply_rank(self, ch: PartitionChange) -> int:
        new = ch.new
        if new is None or self.broker_id not in new.replicas:
            return 0
        return 1 if new.leader == self.broker_id else 2

    def _apply_one(self, ch: PartitionChange, promotions_in_flight) -> list:
        tp = TopicPartition(ch.topic, ch.partition)
        new, me = ch.new, self.broker_id
        lr = self.partitions.get(tp)
        if new is None or me not in new.replicas:
            old_id = ch.old.topic_id if ch.old is not None else (lr.topic_id if lr else None)
            if lr is not None and lr.topic_id == old_id:
                return self._remove(lr)
            return []
        out: list = []
        if lr is not None and lr.topic_id != new.topic_id:
            # the topic was re-created under a new id (KAFKA-16157); an online leftover of
            # the old incarnation is removed first
            out += self._remove(lr) if lr.hosted is not Hosted.OFFLINE else self._forget(lr)
            lr = None
        if lr is None:
            lr = LocalReplica(tp, new.topic_id, Hosted.PENDING)
            self.partitions[tp] = lr
            self._by_id[(new.topic_id, new.partition_id)] = tp
        prev, lr.registration = lr.registration, new
        if lr.hosted is Hosted.OFFLINE:
            return out  # KAFKA-16234: never re-created while its dir is offline
        # Kafka's ``directoryIds`` rule, compared by value: an online partition whose metadata
        # dir for this broker did not change is not re-placed (else every leader/ISR change
        # of another replica would re-send an UNASSIGNED replica's assignment)
        if not (lr.hosted is Hosted.ONLINE and prev is not None
                and prev.directory(self.broker_id) == new.directory(self.broker_id)):
            out += self._place(lr, new, promotions_in_flight,
                               prev.directory(self.broker_id) if prev is not None and self.broker_id in prev.replicas
                               else None)
        if lr.hosted is Hosted.ONLINE:
            out += self._transition(lr, prev, new)
        return out

    def _place(self, lr: LocalReplica, new: PartitionRegistration, promotions_in_flight,
               prev_dir: uuid.UUID | None = None) -> list:
        tp, md = lr.tp, new.directory(self.broker_id)
        log = self.logs.get(tp)
        if log is not None and log[0] != new.topic_id:
            log = None  # a log of another incarnation (stray): not ours to attach
        dirs = self.log_dirs
        if md == UNASSIGNED:
            return self._attach_or_create(lr, log)
        if dirs.is_online(md):
            if log is None:
                pref = self.preferred_dirs.pop(tp, None)
                if pref is not None and pref != md and dirs.is_online(pref):
                    return self._create(lr, pref) + [self._assign(lr, pref)]
                return self._create(lr, md)
            cur = log[1]
            lr.hosted, lr.dir_id = Hosted.ONLINE, cur
            fut = self.futures.get(tp)
            if cur == md:
                if fut is not None and fut[0] == new.topic_id and dirs.is_online(fut[1]) and tp not in promotions_in_flight:
                    return [StartDirMover(tp, cur, fut[1])]
                return []
            if fut is not None and fut[1] == md and fut[0] == new.topic_id:
                return [SwapFutureLog(tp, cur, md)]  # KAFKA-16082: the controller already names the future's dir
            if tp in promotions_in_flight:
                return []  # §5.5: do not flip the assignment back while a promotion is in flight
            return [self._assign(lr, cur)]
        # unknown, LOST, MIGRATING or an offline dir of ours. With any dir offline the replica
        # may live in it (a dir unreadable at start-up has no id to compare): never created
        # elsewhere, never re-assigned (KAFKA-16234); it stays PENDING, offline to clients
        if dirs.any_offline:
            if prev_dir == md:
                return []
            return [event("replica_offline", topic=tp.topic, partition=tp.partition, dir_id=to_base64(md),
                          reason="assigned to a dir that is not online here while a dir of this broker is offline")]
        return self._attach_or_create(lr, log)

    def _attach_or_create(self, lr: LocalReplica, log) -> list:
        if log is not None:
            lr.hosted, lr.dir_id = Hosted.ONLINE, log[1]
            return [self._assign(lr, log[1])]
        pref = self.preferred_dirs.pop(lr.tp, None)
        d = pref if pref is not None and self.log_dirs.is_online(pref) else self.least_loaded_dir()
        return self._create(lr, d) + [self._assign(lr, d)]

    def _create(self, lr: LocalReplica, dir_id: uuid.UUID) -> list:
        self.logs[lr.tp] = (lr.topic_id, dir_id)
        lr.hosted, lr.dir_id = Hosted.ONLINE, dir_id
        return [CreateLog(lr.tp, lr.topic_id, dir_id)]

    def _assign(self, lr: LocalReplica, dir_id: uuid.UUID) -> QueueAssignment:
        return QueueAssignment(lr.topic_id, lr.tp.partition, dir_id, REASON_DELTA, lr.tp)

    def _transition(self, lr: LocalReplica, prev: PartitionRegistration | None, new: PartitionRegistration) -> list:
        me, tp = self.broker_id, lr.tp
        out: list = []
        if new.leader == me:
            if lr.role != "leader" or lr.leader_epoch != new.leader_epoch:
                if lr.fetching:
                    out.append(StopFetcher((tp,)))
                    lr.fetching = False
                out.append(BecomeLeader(tp, lr.topic_id, new.leader_epoch, new.partition_epoch, new.isr, new.replicas))
                out.append(event("leader_change", topic=tp.topic, partition=tp.partition, leader=me,
                                 leader_epoch=new.leader_epoch))
            elif prev is None or (prev.isr, prev.replicas, prev.partition_epoch) != \
                    (new.isr, new.replicas, new.partition_epoch):
                out.append(UpdateLeaderState(tp, new.partition_epoch, new.isr, new.replicas))
                if prev is None or prev.isr != new.isr:
                    out.append(event("isr_change", topic=tp.topic, partition=tp.partition, isr=list(new.isr),
                                     partition_epoch=new.partition_epoch))
            lr.role, lr.leader_id, lr.leader_epoch = "leader", me, new.leader_epoch
            return out
        if lr.role != "follower" or lr.leader_id != new.leader or lr.leader_epoch != new.leader_epoch:
            if lr.fetching:
                out.append(StopFetcher((tp,)))
                lr.fetching = False
            out.append(BecomeFollower(tp, lr.topic_id, new.leader, new.leader_epoch))
            if new.leader >= 0:
                out.append(StartFetcher(tp, lr.topic_id, new.leader, new.leader_epoch))
                lr.fetching = True
            if lr.role == "leader" or lr.leader_id != new.leader:
                out.append(event("leader_change", topic=tp.topic, partition=tp.partition, leader=new.leader,
                                 leader_epoch=new.leader_epoch))
        lr.role, lr.leader_id, lr.leader_epoch = "follower", new.leader, new.leader_epoch
        return out

    def _forget(self, lr: LocalReplica) -> list:
        self.partitions.pop(lr.tp, None)
        self._by_id.pop((lr.topic_id, lr.tp.partition), None)
        return []

    def _remove(self, lr: LocalReplica) -> list:
        """No longer a replica (reassigned away or topic deleted)."""
        out: list = []
        if lr.hosted is Hosted.OFFLINE:
            # its log sits in an offline dir: nothing to delete now; keep remembering it
            # as offline (same topic id never re-created while offline)
            lr.registration = None
            return out
        if lr.fetching:
            out.append(StopFetcher((lr.tp,)))
        log = self.logs.get(lr.tp)
        if log is not None and log[0] == lr.topic_id and self.log_dirs.is_online(log[1]):
            out.append(DeleteLog(lr.tp, lr.topic_id, log[1]))
            del self.logs[lr.tp]
        self.preferred_dirs.pop(lr.tp, None)
        return out + self._forget(lr)

    # ------------------------------------------------------------------ dir failure
    def on_dir_offline(self, dir_id: uuid.UUID, swapping_out: frozenset = frozenset()) -> list:
        """Stop fetchers for, and mark offline, every online partition whose log is in
        ``dir_id``, but those being swapped into another dir (``swapping_out``: the swap
        decides, ``on_swap_done`` / ``on_swap_failed``); forget logs and future logs there."""
        hit = sorted(lr.tp for lr in self.partitions.values()
                     if lr.hosted is Hosted.ONLINE and lr.dir_id == dir_id and lr.tp not in swapping_out)
        for table in (self.logs, self.futures):
            for tp in [tp for tp, (_, d) in table.items() if d == dir_id]:
                del table[tp]
        return self._take_offline(dir_id, hit)

    def _take_offline(self, dir_id: uuid.UUID, tps: list) -> list:
        """Mark ``tps`` (online, their log in ``dir_id``) offline: stop their fetchers."""
        fetching = [tp for tp in tps if self.partitions[tp].fetching]
        for tp in tps:
            lr = self.partitions[tp]
            lr.hosted, lr.fetching, lr.role = Hosted.OFFLINE, False, None
        return ([StopFetcher(tuple(fetching))] if fetching else []) + [MarkPartitionsOffline(dir_id, tuple(tps))]

    # ------------------------------------------------------------------ moves
    def on_swap_failed(self, tp: TopicPartition, source_online: bool) -> list:
        """A swap failed: the future log is not this replica's; with the source offline, neither
        is the old log (its dir's failure spared the partition while the swap ran)."""
        self.futures.pop(tp, None)
        lr = self.partitions.get(tp)
        if source_online or lr is None or lr.hosted is not Hosted.ONLINE:
            return []
        self.logs.pop(tp, None)
        return self._take_offline(lr.dir_id, [tp])

    def on_swap_done(self, tp: TopicPartition, target_dir: uuid.UUID) -> None:
        fut = self.futures.pop(tp, None)
        topic_id = fut[0] if fut else self.logs[tp][0]
        self.logs[tp] = (topic_id, target_dir)
        lr = self.partitions.get(tp)
        if lr is not None and lr.hosted is Hosted.ONLINE:
            lr.dir_id = target_dir
