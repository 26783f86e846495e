"""The operator's calls on the controller and the controller's own leader moves:
:class:`OperatorOps`, a part of :class:`~controller_impl.state.controller.ControllerState`
behind the small :class:`OperatorHost` protocol (the state's image, config and problem
log). Same contract as the state's: each handler reads the image and returns a
:class:`ControllerResult`; the state answers these APIs through it:

- ``handle_elect_leaders`` (43), ``handle_alter_partition_reassignments`` (45),
  ``handle_list_partition_reassignments`` (46): :mod:`.elections`, :mod:`.reassignment`;
- ``handle_leader_balance(now_ms)``: the runtime's timer, every
  ``leader.imbalance.check.interval.seconds`` when ``auto.leader.rebalance.enable``
  (PREFERRED elections above ``leader.imbalance.per.broker.percentage``);
- ``handle_unclean_elections(now_ms)``: the runtime's timer (every second): leaderless
  partitions of topics with ``unclean.leader.election.enable`` true;
- cordoned dirs (KIP-1066): each BrokerHeartbeat v2 carries the broker's full list
  (null before it has recovered: the previous list stays). Kept as soft state like the
  sessions — a new active controller learns every list with the next heartbeat round
  (``broker.heartbeat.interval.ms``), Kafka keeps it in the registration records. A broker
  whose every online dir is cordoned takes no new replica (CreateTopics placement); a
  cordoned dir that is not one of the broker's dirs fails the heartbeat with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any, Protocol

from kafka_common import topic_config
from kafka_common.ids import from_wire

from controller_impl.state import elections, reassignment
from controller_impl.state.result import ControllerResult
from controller_impl.state.view import WorkingView

DEFAULT_IMBALANCE_PERCENTAGE = 10


def _bool(text: Any, default: bool) -> bool:
    if text is None:
        return default
    return str(text).strip().lower() == "true"


class OperatorHost(Protocol):
    """The state machine as :class:`OperatorOps` sees it."""

    image: Any
    config: Any

    def problem(self, text: str) -> None:
        """A refusal or a decision worth a log line (bounded, see ``ControllerState``)."""
        ...


class OperatorOps:
    """The operator's calls, the leader moves and the cordoned dirs (module docstring);
    owns the cordoned dirs of each broker (soft state, from its heartbeats)."""

    def __init__(self, host: OperatorHost) -> None:
        self.host = host
        self.cordoned: dict[int, frozenset] = {}

    @property
    def image(self) -> Any:
        return self.host.image

    @property
    def config(self) -> Any:
        return self.host.config

    def handle_elect_leaders(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = elections.elect_leaders(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_alter_partition_reassignments(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        response = reassignment.alter_partition_reassignments(view, request)
        return ControllerResult(tuple(view.records), response)

    def handle_list_partition_reassignments(self, request: Any, now_ms: int) -> ControllerResult:
        view = WorkingView(self.image)
        return ControllerResult((), reassignment.list_partition_reassignments(view, request))

    # --- timers -----------------------------------------------------------------------

    def auto_rebalance_enabled(self) -> bool:
        raw = getattr(self.config, "raw", None) or {}
        return _bool(raw.get("auto.leader.rebalance.enable",
                             getattr(self.config, "auto_leader_rebalance_enable", True)), True)

    def handle_leader_balance(self, now_ms: int) -> ControllerResult:
        """PREFERRED elections for the brokers over the imbalance threshold (response: the
        per-broker ``[(broker, should lead, moved back)]``)."""
        view = WorkingView(self.image)
        pct = int(getattr(self.config, "leader_imbalance_per_broker_percentage", DEFAULT_IMBALANCE_PERCENTAGE))
        moved = elections.rebalance(view, pct)
        return ControllerResult(tuple(view.records), moved)

    def handle_unclean_elections(self, now_ms: int) -> ControllerResult:
        if not self._unclean_anywhere():
            return ControllerResult(())
        view = WorkingView(self.image)
        lines = elections.unclean_for_leaderless(view, topic_config.static_from_server_config(
            getattr(self.config, "raw", None) or {}, lambda key: None))
        for line in lines:
            self.host.problem(line)
        return ControllerResult(tuple(view.records), lines)

    def _unclean_anywhere(self) -> bool:
        """Cheap test before a scan: is unclean election enabled by any config at all?"""
        raw = getattr(self.config, "raw", None) or {}
        if _bool(raw.get(elections.UNCLEAN_KEY), False):
            return True
        return any(_bool(values.get(elections.UNCLEAN_KEY), False) for values in self.image.configs.values())

    # --- cordoned dirs (KIP-1066) -----------------------------------------------------

    def note_cordoned(self, broker_id: int, request: Any) -> str | None:
        """A heartbeat's list of cordoned dirs kept (None: kept as it was); returns why
        the list is refused, or None."""
        listed = getattr(request, "cordoned_log_dirs", None)
        if listed is None:
            return None
        dirs = frozenset(from_wire(d) for d in listed)
        known = set(self.image.known_dirs(broker_id)) | set(getattr(self.image.brokers.get(broker_id), "log_dirs", ()))
        unknown = sorted((d for d in dirs if d not in known), key=lambda d: d.int)
        if unknown:
            return f"cordoned directory {unknown[0]} is not a directory of broker {broker_id}"
        self.cordoned[broker_id] = dirs
        return None

    def fully_cordoned(self) -> frozenset[int]:
        """Brokers whose every online dir is cordoned: no new replica goes there."""
        out = set()
        for broker_id, dirs in self.cordoned.items():
            reg = self.image.brokers.get(broker_id)
            if reg is not None and dirs and all(d in dirs for d in reg.log_dirs):
                out.add(broker_id)
        return frozenset(out)
