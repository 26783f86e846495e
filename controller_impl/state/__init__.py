"""The pure controller state machine (docs/design.md "Controller state machine").

Modules: ``controller`` (ControllerState: handlers + tick), ``cluster_control``
(registration), ``heartbeats`` (sessions, fencing decision), ``replication_control``
(ISR/leader moves, failed dirs, AlterPartition), ``partition_change`` (one partition's
change + election), ``dir_assignment`` (AssignReplicasToDirs), ``topics`` + ``placement``
(CreateTopics), ``view`` (a handler's overlay of emitted records), ``authz``.
"""

from controller_impl.state.authz import is_authorized
from controller_impl.state.controller import ControllerState
from controller_impl.state.result import ControllerResult

__all__ = ["ControllerState", "ControllerResult", "is_authorized"]
