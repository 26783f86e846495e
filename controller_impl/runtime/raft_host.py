"""The Raft node's two small protocols: its :class:`RaftOwner` (what the node tells the
controller) and the :class:`FollowerHost` its follower's fetch loop
(:class:`~controller_impl.runtime.raft_follower.FollowerFetch`) works through.

:class:`~controller_impl.runtime.raft_node.RaftNode` is the one ``FollowerHost``;
:class:`~controller_impl.runtime.controller.ControllerRuntime` the one ``RaftOwner``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from kafka_common.config import ServerConfig
    from kafka_runtime.events import EventLog

    from controller_impl.log import MetadataLog
    from controller_impl.log.snapshots import SnapshotStore
    from controller_impl.raft import messages as m
    from controller_impl.raft.quorum import RaftState
    from controller_impl.runtime.raft_peers import PeerConnection


class RaftOwner(Protocol):
    """Told, in effect order, what the voter's state decided."""

    def on_role_change(self, change: m.RoleChange) -> None: ...
    def on_epoch_start(self, epoch: int) -> None: ...
    def on_commit(self, hw: int) -> None: ...
    def on_snapshot_installed(self, snapshot_id: tuple[int, int], blob: bytes) -> None: ...
    def on_fatal(self, reason: str) -> None: ...


class FollowerHost(Protocol):
    """The node as its follower's fetch loop sees it: the Raft state and the log it
    drives, the peer connections, the I/O lock (a flush never overlaps a truncation or a
    snapshot reset), and the effects' executor."""

    cfg: ServerConfig
    cluster_id: str
    node_id: int
    clock: Any
    events: EventLog
    log: MetadataLog
    snapshots: SnapshotStore
    owner: RaftOwner
    state: RaftState | None
    io_lock: asyncio.Lock
    stats: dict[str, int]

    @property
    def stopped(self) -> bool: ...

    def execute(self, fx: list[m.Effect]) -> None:
        """Carry out the state's effects, in order."""
        ...

    def peer(self, node_id: int, purpose: str) -> PeerConnection:
        """The connection to ``node_id`` for ``purpose`` ("rpc" or "fetch")."""
        ...

    def log_line(self, msg: str) -> None: ...

    async def role_changed(self) -> None:
        """Returns at the next role change."""
        ...
