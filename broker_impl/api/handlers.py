"""The broker listener's request handler, mounted on ``kafka_runtime.server``.

``BrokerApi(view)`` serves the one request table :data:`broker_impl.api.request_table.REQUESTS`
(``{ApiKey: Handler(versions, fn, request_classes)}``): ``supported_apis``, which the server
uses to answer ApiVersions, and ``request_classes``, which the listener consults before
``kafka_common.wire.request_class`` so that Produce v0–2 decode, are derived from it, and
``async handle(ctx, header, request)`` dispatches by it, returning the response entity of the
request's version, or ``None`` when no response must be sent (Produce with acks=0). The
server must handle one connection's requests strictly in order (await ``handle`` before
decoding the next), as Kafka does. What the handlers share — the view, the purgatory, the
fetch sessions, the producer ids, the group coordinator — lives here
(:class:`broker_impl.api.context.ApiContext`).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from broker_impl.api import request_table
from broker_impl.api.request_table import REQUESTS
from broker_impl.api.fetch_session import FetchSessionCache
from broker_impl.groups.coordinator import GroupCoordinator
from broker_impl.groups.coordinator_config import CoordinatorConfig
from broker_impl.api.purgatory import Purgatory
from broker_impl.api.view import BrokerView
from broker_impl.state.producers import ProducerIdAllocator

log = logging.getLogger(__name__)


class BrokerApi:
    def __init__(self, view: BrokerView, *, producer_id_base: int,
                 group_config: CoordinatorConfig | None = None, events: Any = None) -> None:
        self.view = view
        self.supported_apis = request_table.supported_apis()
        # Request schemas kio 0.6.5 lacks; the listener must look here before kio's index.
        self.request_classes: dict[tuple[int, int], type] = request_table.request_classes()
        self.purgatory = Purgatory()
        self.fetch_sessions = FetchSessionCache(self.purgatory)   # replica fetches (KIP-227)
        # sequence state lives with each partition log (PartitionLog.producer_state)
        self.producer_ids = ProducerIdAllocator(producer_id_base)
        # classic consumer groups: coordinator of the __consumer_offsets partitions led here
        self.groups = GroupCoordinator(view, self.purgatory, self.notify_partition,
                                       group_config or CoordinatorConfig(),
                                       emit=events.emit if events is not None else None)

    async def handle(self, ctx: Any, header: Any, request: Any) -> Any | None:
        key = int(request.__api_key__)
        row = REQUESTS.get(key)  # type: ignore[call-overload]  # an int key finds its ApiKey row
        if row is None:
            raise KeyError(f"API {key} is not served by the broker listener")
        return await row.fn(self, ctx, request)

    def notify_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        """Something changed on a partition (append, HW, ISR, leadership): re-check its
        delayed produces and long-polling fetches; the group coordinator follows its offsets
        partitions (leadership, local dir offline)."""
        self.purgatory.notify((topic_id, partition))
        self.groups.on_partition_changed(topic_id, partition)

    def notify_all(self) -> None:
        self.purgatory.notify_all()

    def on_image_changes(self, changes: Any) -> None:
        """After the runtime applied a metadata batch: wake waiters of every partition it
        changed (leadership/ISR moves complete or fail delayed produces and fetches).
        ``changes`` is the ``ImageChanges`` value the runtime drained from the image for its
        replica management (only ``.partitions`` keys are read)."""
        self.groups.start()  # on the loop: the coordinator follows the image from now on
        for topic_id, partition in changes.partitions:
            self.notify_partition(topic_id, partition)
        if changes.removed_topics:
            self.groups.reconcile_all()
