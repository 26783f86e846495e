"""BrokerCore: the pure broker core, composed (the runtime's single entry point).

Every method takes ``now_ms`` and returns a list of effects (``broker_impl.state.effects``)
for the runtime to execute in order; :meth:`next_deadline_ms` says when to call
:meth:`tick` next. Internal effects (QueueAssignment, ReportDirFailure) are routed here to
the AssignmentsManager, the lifecycle and the failure timer and never returned.

Order on a storage error (Kafka's ``handleLogDirFailure``): stop fetchers, cancel moves in
the dir, mark its partitions offline, stop writing to the dir, then halt or report (an
immediate heartbeat, coalesced) and arm the ``log.dir.failure.timeout.ms`` timer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafka_common.ids import LOST, to_base64
from broker_impl.state.assignments import AssignmentsManager
from broker_impl.state.effects import (Halt, QueueAssignment, ReportDirFailure, StartDirMover, SwapFutureLog, TopicPartition,
                                       event)
from broker_impl.state.failure_timer import FailureTimer
from broker_impl.state.lifecycle import Lifecycle, LifecycleConfig
from kafka_common.wire import ErrorCode
from broker_impl.state.log_dirs import LogDirInfo, LogDirs
from broker_impl.state.moves import REASON_LOST, REASON_REVERT, DirMoves
from broker_impl.state.replica_manager import ExistingLog, Hosted, PartitionChange, ReplicaManager

# wire error codes used by alter_replica_log_dir
NONE = ErrorCode.none
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
REPLICA_NOT_AVAILABLE = ErrorCode.replica_not_available
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
LOG_DIR_NOT_FOUND = ErrorCode.log_dir_not_found


@dataclass(frozen=True, slots=True)
class CoreConfig:
    broker_id: int
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    log_dir_failure_timeout_ms: int = 30000
    initial_registration_timeout_ms: int = 60000
    controlled_shutdown_timeout_ms: int = 30000
    assignment_window_ms: int = 100
    max_assignments_per_request: int = 2250


class BrokerCore:
    def __init__(self, config: CoreConfig, dirs: Iterable[LogDirInfo], metadata_dir_id: uuid.UUID | None,
                 rng, existing_logs: Iterable[ExistingLog] = (), *, metadata_dir_path: str | None = None,
                 unidentified_offline_dirs: tuple[str, ...] = ()) -> None:
        self.config = config
        self.log_dirs = LogDirs(tuple(dirs), metadata_dir_id, metadata_dir_path, unidentified_offline_dirs)
        self.lifecycle = Lifecycle(self.log_dirs.registration_dirs, LifecycleConfig(
            heartbeat_interval_ms=config.heartbeat_interval_ms, session_timeout_ms=config.session_timeout_ms,
            initial_registration_timeout_ms=config.initial_registration_timeout_ms,
            controlled_shutdown_timeout_ms=config.controlled_shutdown_timeout_ms), rng)
        self.assignments = AssignmentsManager(rng, window_ms=config.assignment_window_ms,
                                              max_per_request=config.max_assignments_per_request)
        self.failure_timer = FailureTimer(config.log_dir_failure_timeout_ms)
        self.replicas = ReplicaManager(config.broker_id, self.log_dirs, existing_logs)
        self.moves = DirMoves()
        # swaps the runtime runs now (a move's, or KAFKA-16082's when the metadata already names
        # the future's dir): tp -> (source dir, target dir), until on_swap_done / on_swap_failed
        self.swaps: dict[TopicPartition, tuple[uuid.UUID, uuid.UUID]] = {}
        self.halted: Halt | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def queued_replica_to_dir_assignments(self) -> int:
        return self.assignments.queued

    def next_deadline_ms(self) -> int | None:
        if self.halted:
            return None
        assign = self.assignments.next_deadline_ms() if self.lifecycle.registered else None
        ds = [d for d in (self.lifecycle.next_deadline_ms(), assign, self.failure_timer.next_deadline_ms())
              if d is not None]
        return min(ds) if ds else None

    def _route(self, effects: list, now_ms: int) -> list:
        out: list = []
        queued = 0
        for e in effects:
            if self.halted:
                break
            if isinstance(e, QueueAssignment):
                self.assignments.queue(e.topic_id, e.partition, e.dir_id, e.reason, now_ms)
                queued += 1
            elif isinstance(e, SwapFutureLog):
                self.swaps[e.tp] = (e.source_dir, e.target_dir)
                self.moves.on_swap_started(e.tp)
                out.append(e)
            elif isinstance(e, ReportDirFailure):
                self.failure_timer.arm(e.dir_id, now_ms)
                out += self.lifecycle.on_dir_failure(e.dir_id, now_ms)
            else:
                if isinstance(e, Halt):
                    self.halted = e
                out.append(e)
        if queued:
            out.append(event("assignment_queued", count=queued, queued=self.assignments.queued))
        return out

    def _pump(self, out: list, now_ms: int) -> list:
        """Run what became due and keep the assignment queue count (unfencing waits for it) current."""
        if self.halted:
            return out
        if self.lifecycle.registered:  # no epoch before registration: the controller would refuse
            out += self.assignments.tick(now_ms, broker_epoch=self.lifecycle.broker_epoch,
                                     is_valid=self.replicas.is_replica)
        out += self.lifecycle.set_queued_assignments(self.assignments.queued, now_ms)
        return out

    # ------------------------------------------------------------------ time
    def start(self, now_ms: int) -> list:
        out = self._route(self.log_dirs.start_check(), now_ms)
        if self.halted:
            return out
        return self._pump(out + self.lifecycle.start(now_ms), now_ms)

    def tick(self, now_ms: int) -> list:
        if self.halted:
            return []
        out = self.lifecycle.tick(now_ms)
        out += self.failure_timer.tick(now_ms, is_acknowledged=self.lifecycle.is_acknowledged,
                                       leads_partition_in=self.replicas.leads_partition_in,
                                       path_of=self.log_dirs.path)
        return self._pump(out, now_ms)

    # ------------------------------------------------------------------ controller channel
    def on_registration_response(self, error_code: int, broker_epoch: int, now_ms: int) -> list:
        return self._pump(self.lifecycle.on_registration_response(error_code, broker_epoch, now_ms), now_ms)

    def on_heartbeat_response(self, error_code: int, now_ms: int, *, is_caught_up: bool = False,
                              is_fenced: bool = True, should_shut_down: bool = False) -> list:
        out, acked = self.lifecycle.on_heartbeat_response(error_code, now_ms, is_caught_up=is_caught_up,
                                                          is_fenced=is_fenced, should_shut_down=should_shut_down)
        self.failure_timer.on_acked(acked)
        return self._pump(out, now_ms)

    def on_controller_request_failed(self, now_ms: int) -> list:
        """Registration/heartbeat timed out or the connection dropped."""
        out, _ = self.lifecycle.on_request_failed(now_ms)
        return self._pump(out, now_ms)

    def on_assignments_response(self, error_code: int, results: Mapping, now_ms: int) -> list:
        out, acked = self.assignments.on_response(error_code, results, now_ms)
        for a in acked:
            out += self.moves.on_assignment_acked(a, self.replicas.tp_of(a.topic_id, a.partition))
        return self._pump(out, now_ms)

    # ------------------------------------------------------------------ storage
    def on_storage_error(self, dir_id: uuid.UUID, errno: int, op: str, now_ms: int) -> list:
        if self.halted:
            return []
        if self.log_dirs.is_known(dir_id) and not self.log_dirs.is_online(dir_id):
            return []  # reported once
        out: list = []
        if self.log_dirs.is_known(dir_id):
            swapping_out = frozenset(tp for tp, (src, dst) in self.swaps.items() if src == dir_id and dst != dir_id)
            out += self.replicas.on_dir_offline(dir_id, swapping_out)
            # StopFetcher / MarkPartitionsOffline first, then the moves touching the dir
            out += self.moves.on_dir_offline(dir_id)
        out += self.log_dirs.on_storage_error(dir_id, errno, op)
        return self._pump(self._route(out, now_ms), now_ms)

    # ------------------------------------------------------------------ metadata
    def apply_metadata(self, changes: Iterable[PartitionChange], now_ms: int, *, offset: int | None = None,
                       initial: bool = False) -> list:
        """One applied metadata batch: its partition changes (old → new registration) and
        the offset of its last record. ``initial``: the first publish after start-up, with
        every partition of the image up to the high watermark (strays are renamed first)."""
        if self.halted:
            return []
        changes = list(changes)
        out = self.replicas.strays(changes) if initial else []
        for e in self.replicas.apply(changes, promotions_in_flight=self.moves.promotions_in_flight()):
            if isinstance(e, StartDirMover):  # a future log found at start: resume its move
                lr = self.replicas.partitions[e.tp]
                out += self.moves.start(e.tp, lr.topic_id, e.source_dir, e.target_dir, create_future=False)
            else:
                out.append(e)
        for tp in list(self.moves.moves):
            lr = self.replicas.partitions.get(tp)
            if lr is None or lr.hosted is not Hosted.ONLINE:
                out += self._cancel_move(tp)
        if offset is not None:
            self.lifecycle.on_metadata_offset(offset)
        return self._pump(self._route(out, now_ms), now_ms)

    def on_metadata_offset(self, offset: int) -> None:
        self.lifecycle.on_metadata_offset(offset)

    def set_ready_to_unfence(self, now_ms: int) -> list:
        return self._pump(self.lifecycle.set_ready_to_unfence(now_ms), now_ms)

    def begin_controlled_shutdown(self, now_ms: int) -> list:
        return self._pump(self.lifecycle.begin_controlled_shutdown(now_ms), now_ms)

    # ------------------------------------------------------------------ dir moves
    def alter_replica_log_dir(self, tp: TopicPartition, target_dir: uuid.UUID | None, now_ms: int) -> tuple[int, list]:
        """AlterReplicaLogDirs for one partition → (error code, effects)."""
        if target_dir is None or not self.log_dirs.is_known(target_dir):
            return LOG_DIR_NOT_FOUND, []
        if not self.log_dirs.is_online(target_dir):
            return KAFKA_STORAGE_ERROR, []
        lr = self.replicas.partitions.get(tp)
        if lr is not None and lr.hosted is Hosted.OFFLINE:
            return KAFKA_STORAGE_ERROR, []
        if lr is None or lr.hosted is not Hosted.ONLINE or lr.dir_id is None:
            self.replicas.preferred_dirs[tp] = target_dir
            return (UNKNOWN_TOPIC_OR_PARTITION if lr is None else REPLICA_NOT_AVAILABLE), []
        if lr.dir_id == target_dir:
            return NONE, self._pump(self._route(self._cancel_move(tp), now_ms), now_ms)
        if self.log_dirs.any_offline:
            return KAFKA_STORAGE_ERROR, []  # future logs are not created while a dir is offline
        effects = self.moves.start(tp, lr.topic_id, lr.dir_id, target_dir)
        if tp in self.moves.moves:
            self.replicas.futures[tp] = (lr.topic_id, target_dir)
        return NONE, self._pump(self._route(effects, now_ms), now_ms)

    def _cancel_move(self, tp: TopicPartition) -> list:
        out = self.moves.cancel(tp)
        if out:
            self.replicas.futures.pop(tp, None)
        return out

    def on_future_caught_up(self, tp: TopicPartition, now_ms: int) -> list:
        return self._pump(self._route(self.moves.on_future_caught_up(tp), now_ms), now_ms)

    def on_swap_failed(self, tp: TopicPartition, now_ms: int) -> list:
        """The runtime's swap of ``tp`` raised a storage error (its dir's failure is reported on
        its own). The controller already names the target: point it back at the source if that
        still holds the log, else at LOST so it moves the ISR and leadership away."""
        sw = self.swaps.pop(tp, None)
        if sw is None or self.halted:
            return []
        source, _target = sw
        source_online = self.log_dirs.is_online(source)
        out = self.replicas.on_swap_failed(tp, source_online) + self.moves.on_swap_failed(tp, source_online)
        lr = self.replicas.partitions.get(tp)
        if lr is not None:  # with or without a move, the controller names the target now
            out.append(QueueAssignment(lr.topic_id, tp.partition, source if source_online else LOST,
                                       REASON_REVERT if source_online else REASON_LOST, tp))
        return self._pump(self._route(out, now_ms), now_ms)

    def on_swap_skipped(self, tp: TopicPartition) -> None:
        """The runtime found no future log to swap in (another swap of ``tp`` took it)."""
        self.swaps.pop(tp, None)

    def on_swap_done(self, tp: TopicPartition, now_ms: int) -> list:
        """The runtime swapped the future log in (a move, or a future log promoted at start)."""
        self.swaps.pop(tp, None)
        m = self.moves.on_swap_done(tp)
        fut = self.replicas.futures.get(tp)
        target = m.target_dir if m is not None else (fut[1] if fut is not None else None)
        if target is None:
            return []
        self.replicas.on_swap_done(tp, target)
        return [event("dir_move_done", topic=tp.topic, partition=tp.partition, dir_id=to_base64(target))]
