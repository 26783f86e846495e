"""What the lab reads of the controllers' data: the committed metadata image, fetched from a
controller as a broker would (``__cluster_metadata`` through Fetch, replayed into a
``MetadataImage``), and after a run every controller's metadata log, read-only from its disk
on the host, for the ``quorum_logs`` check. Addresses and paths in, values out: which
controller is active, and where its disk is, is :class:`~harness.cluster.services.Services`'s."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["read_metadata", "read_quorum_logs"]


def read_metadata(host: str, port: int, *, timeout_s: float = 10.0):
    """Fetch ``__cluster_metadata`` from a controller and replay it into a MetadataImage."""
    from kafka_runtime.controller_client import MetadataReader
    from kafka_runtime.client import KafkaClient

    async def go():
        client = await asyncio.wait_for(KafkaClient.connect(host, port, client_id="jbodlab-harness"), timeout_s)
        try:
            reader = MetadataReader(client)
            await asyncio.wait_for(reader.catch_up(timeout_s), timeout_s + 1)
            return reader.image
        finally:
            await client.close()

    return asyncio.run(go())


def read_quorum_logs(meta_dirs: dict[int, Path], committed: Callable[[], int]) -> dict[str, Any]:
    """The attributes of the ``quorum_logs`` action: every controller's metadata log batches
    (``meta_dirs``: controller id -> its metadata dir on the host), its newest snapshot's end,
    and the active controller's high watermark (``committed()``, asked first: the logs only grow
    — idle NoOps — so everything below it is on the disks read next); what could not be read
    is in ``errors``."""
    from controller_impl.log.recovery import scan_batches
    from controller_impl.log.segments import DIR_NAME
    from controller_impl.log.snapshots import SnapshotStore
    logs, snapshot_ends, errors = {}, {}, {}
    hw = None
    try:
        hw = committed()
    except Exception as exc:  # noqa: BLE001
        errors["active"] = str(exc)
    for c, path in meta_dirs.items():
        try:
            logs[str(c)] = [list(b) for b in scan_batches(str(path))]
            latest = SnapshotStore(str(path / DIR_NAME)).latest()
            snapshot_ends[str(c)] = latest[0] if latest else 0
        except OSError as exc:   # a failed metadata disk: that controller's log is not readable
            errors[str(c)] = str(exc)
    return {"logs": logs, "snapshot_ends": snapshot_ends, "committed": hw, "errors": errors}
