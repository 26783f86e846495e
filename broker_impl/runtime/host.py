"""The broker process as its parts see it: the :class:`Host` protocol.

:class:`broker_impl.runtime.broker.BrokerRuntime` is the one implementation; the parts
(:mod:`.core_loop`, :mod:`.controller_requests`, :mod:`.metadata_follower`,
:mod:`.maintenance`, :mod:`.dataplane`, :mod:`.runtime_view`) get a ``Host`` and use only
what it declares here. None of them imports ``broker.py``.

Who owns which fact (everyone else reads it through the owner's read-only queries):

- the broker core (:class:`broker_impl.state.core.BrokerCore`, reached through
  ``Host.core``): dir status (``core.log_dirs``), partition status and roles, leadership
  (``core.replicas``), registration and broker epoch (``core.lifecycle``). Inputs go
  through ``Host.feed(core.<input>(…, now_ms))``: the core is changed nowhere else;
- the storage layer's ``DirFailureChannel``: the latch that stops I/O on a failed dir at
  once, in the thread that hit the error (storage-internal; nothing above storage asks it);
- the metadata image (``Host.image``): replayed by :mod:`.metadata_follower` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Coroutine, Protocol

if TYPE_CHECKING:
    import asyncio

    from broker_impl.runtime.dir_io import DirIO
    from broker_impl.state.core import BrokerCore
    from broker_impl.storage import DirFailure, LogManager
    from kafka_common.config import ServerConfig
    from kafka_common.metadata.image import MetadataImage
    from kafka_runtime.events import EventLog


class Host(Protocol):
    cfg: ServerConfig
    events: EventLog
    image: MetadataImage
    core: BrokerCore
    lm: LogManager
    dir_io: DirIO

    def now_ms(self) -> int:
        """The monotonic clock every input to the core is stamped with."""
        ...

    def feed(self, effects: list) -> None:
        """Execute the core's effects, in order (never re-entrantly)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        """A background task, cancelled and awaited (bounded) at stop."""
        ...

    def call_from_thread(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, from any thread (dropped once the loop is closed)."""
        ...

    def report_storage_error(self, failure: DirFailure) -> None:
        """The one inlet for storage errors (the failure channel's callback), any thread."""
        ...

    def halt(self, reason: str) -> None:
        """Write the halt event, one line on stderr, exit 1 at once (Kafka's ``Exit.halt``)."""
        ...

    @property
    def stopping(self) -> bool: ...
