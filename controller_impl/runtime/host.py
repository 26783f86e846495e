"""The controller process as its parts see it: the :class:`ControllerHost` protocol.

:class:`controller_impl.runtime.controller.ControllerRuntime` is the one implementation; the
parts (:class:`~.leader_writes.LeaderWrites`, :class:`~.image_upkeep.ImageUpkeep`,
:class:`~.change_events.CommitEvents`, :func:`~.leader_balance.balance_loop`,
:func:`~.metadata_fetch.serve_fetch`, the rows of :mod:`.request_table`) get a host and use
only what it declares here. None of them imports ``controller.py``.

Who owns which fact:

- the host: the image (``image``, replaced whole by a rebuild or an installed snapshot),
  ``image_ahead`` (the image holds records the log may not: rebuilt before use), the state
  machine (``state``, the active controller's only) and the one lock around both
  (``sm_lock``: a leader's request, a follower's apply, the catch-up, a rebuild, a snapshot);
- the Raft node (``raft``): roles, epochs, the high watermark; the metadata log (``log``)
  and snapshot files (``snapshots``) are written through it or under its I/O lock;
- :class:`~.leader_writes.LeaderWrites`: the answers waiting for the commit, the last
  offset written; :class:`~.change_events.CommitEvents` (``changes``): the node events of
  changes not yet committed and committed but not yet written;
  :class:`~.image_upkeep.ImageUpkeep`: the follower's apply and the snapshot schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Coroutine, Protocol

if TYPE_CHECKING:
    import asyncio

    from kafka_common.config import ServerConfig
    from kafka_common.metadata.image import MetadataImage
    from kafka_runtime.events import EventLog

    from controller_impl.log import MetadataLog
    from controller_impl.log.snapshots import SnapshotStore
    from controller_impl.runtime.change_events import CommitEvents
    from controller_impl.runtime.raft_node import RaftNode


class ControllerHost(Protocol):
    cfg: ServerConfig
    clock: Any
    events: EventLog
    cluster_id: str
    image: MetadataImage
    image_ahead: bool
    state: Any  # ControllerState on the active controller, else None
    sm_lock: asyncio.Lock
    log: MetadataLog
    snapshots: SnapshotStore
    raft: RaftNode
    changes: CommitEvents

    @property
    def active(self) -> bool:
        """The Raft leader with its state machine built."""
        ...

    @property
    def halted(self) -> bool:
        """A fatal error was reported (:meth:`halt`)."""
        ...

    def halt(self, reason: str) -> None:
        """The ``halt`` event, one log line, the process stops non-zero."""
        ...

    def log_line(self, msg: str) -> None:
        """One line on stderr."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """A task on the loop."""
        ...

    def on_commit(self, hw: int) -> None:
        """The high watermark moved to ``hw`` (the Raft node's owner callback)."""
        ...
