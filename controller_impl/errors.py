"""The root of the errors controller_impl raises on purpose (pure: imports nothing, so the
pure ``state`` and ``raft`` packages may derive from it).

::

    ControllerError                     the controller refuses a request or cannot go on
    ├── state.topics.TopicError         a topic request refused (carries the ErrorCode)
    ├── state.configs.ResourceError     a config resource refused (carries the ErrorCode)
    ├── state.reassignment.ReassignmentError   a reassignment refused (carries the ErrorCode)
    ├── state.placement.PlacementError  a replication that cannot be placed (also ValueError)
    ├── raft.config.RaftInvariantError  a Raft rule would be broken: never expected
    ├── raft.log_shape.LogShapeError    an append / truncation breaking the log's shape
    ├── raft.quorum_file.QuorumFileError   the quorum-state file unreadable or inconsistent
    ├── log.segments.LogError           a misuse of the metadata log
    ├── runtime.image_io.FatalError     the controller cannot go on (it exits)
    ├── runtime.image_io.ReplayFailed   the image refused a record the state produced
    ├── runtime.leader_writes.NotActive this controller is not (or no longer) the active one
    └── runtime.raft_wire.RaftWireError a Raft request not for __cluster_metadata-0 (also ValueError)
"""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error controller_impl raises on purpose: a request the controller
    refuses, a misuse of its log, or a state it cannot go on from (the message says which).
    Catch it to tell those from a bug; to handle one kind, catch its class."""
