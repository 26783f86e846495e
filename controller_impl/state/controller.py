"""The pure controller: reads the image, returns records + a response, never mutates it.

Usage by the runtime (docs/design.md "Controller state machine")::

    state = ControllerState(image, config, now_ms)
    result = state.handle_broker_heartbeat(request, now_ms)   # any handle_<api>
    log.append(result.records); for each: image.replay(record, offset); send result.response
    state.tick(now_ms)                                         # session expiry, ~every 100 ms

Call handlers one at a time, each on an image that already holds every record returned
before (append + replay before the next call). Soft state kept here, outside the log:
heartbeat sessions. ``config`` is a ``ServerConfig`` (or anything with its attribute
names: ``cluster_id``, ``broker_session_timeout_ms``, ``num_partitions``,
``default_replication_factor``, ``authorizer_enabled``, ``super_users``).
"""

from __future__ import annotations

import random
from typing import Any, Callable

from kafka_common import wire
from kafka_common.ids import UNASSIGNED, from_wire
from kafka_common.metadata.image import MetadataImage
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state import (cluster_control, configs, dir_assignment, operator_ops, replication_control,
                                   topic_admin, topics)
from controller_impl.state.authz import is_authorized
from controller_impl.state.heartbeats import BrokerSessions, HeartbeatFacts, Transition, next_transition
from controller_impl.state.result import ZERO_THROTTLE, ControllerResult
from controller_impl.state.view import WorkingView


class ControllerState:
    """The pure controller (module docstring); the operator's calls, the leader moves and
    the cordoned dirs are its part ``operator`` (:class:`operator_ops.OperatorOps`). Which
    API each handler serves, in which versions, is the runtime's request table
    (``controller_impl.runtime.request_table``)."""

    def __init__(self, image: MetadataImage, config: Any, clock_ms: int | Callable[[], int] = 0, *,
                 rng: random.Random | None = None,
                 on_problem: Callable[[str], None] | None = None) -> None:
        self.image = image
        self.config = config
        self.cluster_id: str = getattr(config, "cluster_id", "") or ""
        self.sessions = BrokerSessions(int(getattr(config, "broker_session_timeout_ms", 9000)))
        self.rng = rng if rng is not None else random.Random()
        self.on_problem = on_problem
        self.problems: list[str] = []  # last refusals, for logs and tests (bounded)
        self._committed_next_offset = 0
        self.operator = operator_ops.OperatorOps(self)  # KIP-1066 cordoned dirs: soft state there
        start_ms = clock_ms() if callable(clock_ms) else int(clock_ms)
        for broker_id, reg in image.brokers.items():  # sessions start fresh after a restart
            if not reg.fenced:
                self.sessions.touch(broker_id, start_ms)

    # --- helpers ---------------------------------------------------------------------

    def problem(self, text: str) -> None:
        self.problems.append(text)
        del self.problems[:-50]
        if self.on_problem is not None:
            self.on_problem(text)

    def _next_offset(self) -> int:
        return max(self.image.last_offset + 1, self._committed_next_offset)

    def on_committed(self, last_offset: int) -> None:
        """Runtime hook: the log's last committed offset (keeps new broker epochs unique
        even if the log holds records the image does not replay)."""
        self._committed_next_offset = max(self._committed_next_offset, last_offset + 1)

    def is_authorized(self, principal: str | None, api_key: int) -> bool:
        return is_authorized(principal, api_key,
                             authorizer_enabled=bool(getattr(self.config, "authorizer_enabled", False)),
                             super_users=frozenset(getattr(self.config, "super_users", frozenset())))

    # --- handlers --------------------------------------------------------------------

    # the operator's calls and the leader moves on timers (controller_impl.state.operator_ops)
    def handle_elect_leaders(self, request: Any, now_ms: int) -> ControllerResult:
        return self.operator.handle_elect_leaders(request, now_ms)

    def handle_alter_partition_reassignments(self, request: Any, now_ms: int) -> ControllerResult:
        return self.operator.handle_alter_partition_reassignments(request, now_ms)

    def handle_list_partition_reassignments(self, request: Any, now_ms: int) -> ControllerResult:
        return self.operator.handle_list_partition_reassignments(request, now_ms)

    def handle_leader_balance(self, now_ms: int) -> ControllerResult:
        return self.operator.handle_leader_balance(now_ms)

    def handle_unclean_elections(self, now_ms: int) -> ControllerResult:
        return self.operator.handle_unclean_elections(now_ms)

    def fully_cordoned(self) -> frozenset[int]:
        """Brokers whose every online dir is cordoned: no new replica goes there."""
        return self.operator.fully_cordoned()

    def handle_broker_registration(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = cluster_control.register(view, request, now_ms, cluster_id=self.cluster_id,
                                            sessions=self.sessions, next_offset=self._next_offset(),
                                            on_problem=self.problem)
        return ControllerResult(tuple(view.records), response)

    def handle_broker_heartbeat(self, request: Any, now_ms: int) -> ControllerResult:
        cls = wire.response_class(ApiKey.BROKER_HEARTBEAT, request.__version__)
        broker_id = request.broker_id
        reg = self.image.brokers.get(broker_id)

        def fail(code: ErrorCode, why: str) -> ControllerResult:
            self.problem(f"broker {broker_id} heartbeat refused ({code.name}): {why}")
            return ControllerResult((), wire.make(cls, throttle_time=ZERO_THROTTLE, error_code=code,
                                                  is_caught_up=False, is_fenced=True,
                                                  should_shut_down=False))

        if reg is None:
            return fail(ErrorCode.broker_id_not_registered, "not registered")
        if request.broker_epoch != reg.epoch:
            return fail(ErrorCode.stale_broker_epoch,
                        f"epoch {request.broker_epoch} is not the registered epoch {reg.epoch}")
        reported = {from_wire(d) for d in request.offline_log_dirs}
        online = set(reg.log_dirs)
        newly = {d for d in reported if d in online}
        unknown = [d for d in reported - newly if not self._known_offline(broker_id, d)]
        if unknown:  # D3: the whole heartbeat fails and changes nothing
            return fail(ErrorCode.log_dir_not_found, f"unknown directory {sorted(unknown, key=lambda d: d.int)[0]}")
        cordon_problem = self.operator.note_cordoned(broker_id, request)
        if cordon_problem:
            return fail(ErrorCode.invalid_request, cordon_problem)
        self.sessions.touch(broker_id, now_ms)
        view = WorkingView(self.image)
        if newly:
            replication_control.dirs_offline(view, broker_id, newly)
        caught_up = request.current_metadata_offset >= self.image.register_offsets.get(broker_id, 1 << 62)
        current = view.broker(broker_id)
        assert current is not None
        facts = HeartbeatFacts(
            fenced=current.fenced, want_fence=request.want_fence, want_shut_down=request.want_shut_down,
            caught_up=caught_up,
            assignments_known=current.fenced is False or self._assignments_known(view, broker_id),
            has_online_dir=not online <= reported)
        transition = next_transition(facts)
        if transition is Transition.UNFENCE:
            replication_control.unfence(view, broker_id)
        elif transition in (Transition.FENCE, Transition.SHUTDOWN):
            replication_control.fence(view, broker_id)
        final = view.broker(broker_id)
        assert final is not None
        return ControllerResult(tuple(view.records), wire.make(
            cls, throttle_time=ZERO_THROTTLE, error_code=ErrorCode.none, is_caught_up=caught_up,
            is_fenced=final.fenced, should_shut_down=transition is Transition.SHUTDOWN), view.merged())

    def handle_assign_replicas_to_dirs(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = dir_assignment.assign(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_alter_partition(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = replication_control.alter_partition(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_create_topics(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = topics.create_topics(
            view, request, rng=self.rng,
            default_partitions=int(getattr(self.config, "num_partitions", 1)),
            default_replication_factor=int(getattr(self.config, "default_replication_factor", 1)),
            static=topics.static_config_of(self.config), unplaceable=self.operator.fully_cordoned())
        return ControllerResult(tuple(view.records), response)

    def handle_delete_topics(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = topic_admin.delete_topics(view, request,
                                             deletion_enabled=bool(getattr(self.config, "delete_topic_enable", True)))
        return ControllerResult(tuple(view.records), response)

    def handle_create_partitions(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = topic_admin.create_partitions(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_incremental_alter_configs(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = configs.incremental_alter_configs(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_alter_configs(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = configs.alter_configs(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_unregister_broker(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = cluster_control.unregister(view, request, sessions=self.sessions)
        return ControllerResult(tuple(view.records), response)

    def tick(self, now_ms: int) -> ControllerResult:
        """Fence every unfenced broker silent for longer than the session timeout: it
        leaves every ISR (leaders move), then a fencing registration change."""
        expired = self.sessions.expired(self.image, now_ms)
        if not expired:
            return ControllerResult(())
        view = WorkingView(self.image)
        for broker_id in expired:
            self.problem(f"broker {broker_id} session expired: fencing")
            replication_control.fence(view, broker_id)
        return ControllerResult(tuple(view.records), None, view.merged())

    def next_deadline_ms(self) -> int | None:
        return self.sessions.next_deadline_ms(self.image)

    # --- rules -----------------------------------------------------------------------

    def _known_offline(self, broker_id: int, dir_id: Any) -> bool:
        """D3: a reported dir that is not online is fine if it is already known offline
        for this broker (registered before, or holding its replicas in the metadata)."""
        if dir_id in self.image.offline_dirs(broker_id):
            return True
        owner = self.image.dir_owner(dir_id)
        if owner is not None and owner != broker_id:
            return False
        for key in self.image.partitions_in_dir(dir_id):
            part = self.image.partition(*key)
            if part is not None and broker_id in part.replicas and part.directory(broker_id) == dir_id:
                return True
        return False

    def _assignments_known(self, view: WorkingView, broker_id: int) -> bool:
        """D4: a multi-dir broker is unfenced only when none of its replicas is UNASSIGNED."""
        if len(self.image.known_dirs(broker_id)) <= 1:
            return True
        for key in self.image.partitions_of_broker(broker_id):
            part = view.partition(*key)
            if part is not None and part.directory(broker_id) == UNASSIGNED:
                return False
        return True
