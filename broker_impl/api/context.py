"""What a request handler gets: the :class:`ApiContext` protocol.

Each handler module (``produce``, ``fetch``, ``metadata``, ``admin``, ``log_dirs``,
``configs``, ``delete_records``, ``topic_admin``, ``group_handlers``, ``offset_handlers``,
``operator_calls``) is a set of ``async handle_<api>(api: ApiContext, ctx, request)`` functions. They are typed against
this protocol, not against :class:`broker_impl.api.handlers.BrokerApi` (which serves the
request table, :mod:`broker_impl.api.request_table`, and so imports every handler module
through it): the handler modules depend on this module only, and the table depends on them,
so the package has no import cycle.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from broker_impl.api.fetch_session import FetchSessionCache
from broker_impl.api.purgatory import Purgatory
from broker_impl.api.view import BrokerView
from broker_impl.groups.coordinator import GroupCoordinator
from broker_impl.state.producers import ProducerIdAllocator


class ApiContext(Protocol):
    view: BrokerView
    purgatory: Purgatory
    fetch_sessions: FetchSessionCache
    producer_ids: ProducerIdAllocator
    supported_apis: dict[int, tuple[int, int]]
    groups: GroupCoordinator

    def notify_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        """Re-check the delayed produces and long-polling fetches of one partition."""
        ...

    def notify_all(self) -> None: ...

    def on_image_changes(self, changes: Any) -> None: ...
