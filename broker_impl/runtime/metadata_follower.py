"""Following the controller's metadata log (:class:`MetadataFollower`).

A long-poll Fetch of ``__cluster_metadata`` (below the controller's high watermark only),
replayed into the one in-memory :class:`MetadataImage` (the broker keeps no copy on
disk); behind the controller's log start, its snapshot is fetched (FetchSnapshot) and taken
as the image. After each applied batch the partition changes go to the core
(``apply_metadata``) and the drained image changes to the data plane (``on_changes``:
purgatory wake-ups). The first publish waits for the whole image (strays need all of it).

Ready to unfence once registered and caught up with the metadata that holds our
registration (Kafka: initial catch-up + first publish): ``on_ready`` starts the client
listener, then the core is told (``set_ready_to_unfence``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from broker_impl.runtime.controller_channel import ControllerConnection, fetch_metadata_snapshot, metadata_fetch_request
from broker_impl.runtime.host import Host
from broker_impl.state.metadata_changes import partition_changes
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.batches import decode_batches
from kafka_common.metadata.image_changes import ImageError
from kafka_runtime.client import ClientError

log = logging.getLogger(__name__)


class MetadataFollower:
    def __init__(self, host: Host, connection: ControllerConnection, on_changes: Callable[[Any], None],
                 on_ready: Callable[[], None]) -> None:
        self.host = host
        self.connection = connection
        self.on_changes = on_changes
        self.on_ready = on_ready
        self.next_offset = 0
        self.high_watermark = 0
        self.published = False
        self.ready = False

    async def run(self) -> None:
        cfg = self.host.cfg
        failures = 0
        while True:
            try:
                resp = await self.connection.request(
                    lambda c: metadata_fetch_request(c, self.next_offset, cfg.metadata_fetch_max_wait_ms),
                    # a controller that stops answering (cut off, stopped) is left after the
                    # quorum's fetch timeout, as a Raft observer does, not only when it says so
                    cfg.metadata_fetch_max_wait_ms / 1000 + cfg.controller_quorum_fetch_timeout_ms / 1000)
                part = resp.responses[0].partitions[0]
                if resp.error_code.value or part.error_code.value:
                    raise ClientError(f"metadata fetch: {resp.error_code.name}/{part.error_code.name}")
            except (ClientError, OSError, IndexError) as exc:
                failures += 1
                log.warning("metadata fetch failed: %s", exc)
                await asyncio.sleep(min(0.1 * 2 ** min(failures, 6), 5.0))
                continue
            failures = 0
            self.high_watermark = part.high_watermark
            snap = getattr(part, "snapshot_id", None)
            try:
                if snap is not None and snap.end_offset > self.next_offset:
                    await self._load_snapshot((snap.end_offset, snap.epoch))
                elif part.records:
                    self._replay(bytes(part.records))
            except Exception as exc:  # noqa: BLE001 - a bug applying metadata: stop, never freeze silently
                # (a KeyError in the leader's ISR state once ended this task, and the broker
                # lived on with metadata that never moved again)
                self.host.halt(f"cannot apply the metadata at offset {self.next_offset}: "
                               f"{type(exc).__name__}: {exc}")
                return
            self._maybe_ready()

    async def _load_snapshot(self, snapshot_id: tuple[int, int]) -> None:
        """Behind the controller's log start: take its snapshot (FetchSnapshot) as the image;
        what differs from ours is published like replayed records."""
        try:
            image, end, _ = snapshot_format.decode(await fetch_metadata_snapshot(self.connection, snapshot_id))
        except (ClientError, OSError, snapshot_format.SnapshotError) as exc:
            log.warning("metadata snapshot %s failed: %s", snapshot_id, exc)
            await asyncio.sleep(0.2)
            return
        self.host.image.replace_with(image)
        self.next_offset = end
        self.host.events.emit("metadata_snapshot_loaded", end_offset=end, epoch=snapshot_id[1])
        self._publish()

    def _replay(self, data: bytes) -> None:
        image = self.host.image
        applied = 0
        try:
            for header, recs in decode_batches(data):
                for i, rec in enumerate(recs):
                    offset = header.base_offset + i
                    if offset < self.next_offset or offset >= self.high_watermark:
                        continue
                    image.replay(rec, offset)
                    self.next_offset = offset + 1
                    applied += 1
        except (ImageError, ValueError) as exc:
            self.host.halt(f"cannot replay the metadata log at offset {self.next_offset}: {exc}")
            return
        if applied:
            self._publish()

    def _publish(self) -> None:
        host, image = self.host, self.host.image
        initial = not self.published
        if initial and self.next_offset < self.high_watermark:
            return  # the first publish waits for the whole image (strays need all of it)
        self.published = True
        changes = image.drain_changes()
        pcs = partition_changes(changes, host.cfg.node_id,
                                lambda t: image.topics[t].name if t in image.topics else None)
        if pcs or initial:
            host.events.emit("metadata_published", offset=image.last_offset, partitions=len(pcs), initial=initial)
        host.feed(host.core.apply_metadata(pcs, host.now_ms(), offset=image.last_offset, initial=initial))
        self.on_changes(changes)

    def _maybe_ready(self) -> None:
        host = self.host
        lifecycle = host.core.lifecycle
        if self.ready or not self.published or not lifecycle.registered:
            return
        me = host.image.brokers.get(host.cfg.node_id)
        if me is None or me.epoch != lifecycle.broker_epoch or self.next_offset < self.high_watermark:
            return
        self.ready = True
        self.on_ready()
        host.events.emit("ready_to_unfence", metadata_offset=host.image.last_offset,
                         queued_assignments=host.core.queued_replica_to_dir_assignments)
        host.feed(host.core.set_ready_to_unfence(host.now_ms()))
