"""The controller's image off the loop: built from the newest snapshot + the log, caught up
with committed records, and a leader's request computed (pure handler, batch encoding,
optimistic replay) — CPU work that runs in worker threads while nothing else touches the
image (the runtime's state-machine lock), with the cyclic collector paused."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.batches import decode_batches, encode_batch
from kafka_common.metadata.image import MetadataImage

from controller_impl.log import MetadataLog
from controller_impl.log.snapshots import SnapshotStore

REPLAY_CHUNK_BYTES = 16 << 20
BIG_CHANGE_RECORDS = 10_000  # a change this big logs where its time went


class FatalError(Exception):
    """The controller cannot go on (metadata log unwritable, replay mismatch, bad storage)."""


class ReplayFailed(Exception):
    """The image refused a record the state machine produced: image and log would part."""


def load_image(log: MetadataLog, snapshots: SnapshotStore, upto: int | None = None) -> MetadataImage:
    """The newest snapshot + the log's records below ``upto`` (default: none of the log)."""
    gc_was = gc.isenabled()
    gc.disable()  # a big image is millions of objects: no collection while building it
    try:
        latest = snapshots.latest()
        image = snapshot_format.decode(snapshots.read(latest))[0] if latest else MetadataImage()
        if upto is not None:
            replay_log(log, image, upto)
    finally:
        if gc_was:
            gc.enable()
    gc.freeze()  # and none later through it: it lives as long as the process
    return image


def replay_log(log: MetadataLog, image: MetadataImage, upto: int) -> int:
    """Replay the log's records from ``image.last_offset + 1`` to below ``upto``."""
    applied = 0
    while image.last_offset + 1 < upto:
        applied += apply_batches(image, read_tail(log, image, upto), upto)
    return applied


def read_tail(log: MetadataLog, image: MetadataImage, upto: int) -> bytes:
    """The next chunk of whole batches the image lacks, below ``upto`` (on the loop: the
    log's index is the loop's)."""
    start = image.last_offset + 1
    if start < log.start_offset:
        raise FatalError(f"the log starts at {log.start_offset}, the image ends at {start - 1}: "
                         f"no snapshot covers the gap")
    data = log.read(start, REPLAY_CHUNK_BYTES, limit=upto)
    if not data:
        raise FatalError(f"the log has no records from {start} to {upto}")
    return data


def apply_batches(image: MetadataImage, data: bytes, upto: int) -> int:
    """Decode + replay (pure CPU: safe in a worker thread while nothing else touches the
    image), the cyclic collector paused as in :func:`compute_without_gc`."""
    start = image.last_offset + 1
    applied = 0
    was = gc.isenabled()
    gc.disable()
    try:
        for header, records in decode_batches(data):
            for i, record in enumerate(records):
                offset = header.base_offset + i
                if start <= offset < upto:
                    image.replay(record, offset)
                    applied += 1
    finally:
        if was:
            gc.enable()
    return applied


def compute(state: Any, image: MetadataImage, fn_name: str, request: Any, now_ms: int, base: int,
            epoch: int) -> tuple[Any, bytes, Any]:
    """A leader's request, off the loop: the pure handler, its records encoded as one batch
    at ``base``, and replayed into the image (optimistically: answered after commit)."""
    fn = getattr(state, fn_name)
    t0 = time.perf_counter()
    result = fn(request, now_ms) if request is not None else fn(now_ms)
    records = list(result.records)
    if not records:
        return result, b"", None
    t1 = time.perf_counter()
    data = encode_batch(base, records, leader_epoch=epoch, timestamp_ms=time.time_ns() // 1_000_000)
    t2 = time.perf_counter()
    try:
        for i, record in enumerate(records):
            image.replay(record, base + i)
    except Exception as exc:
        raise ReplayFailed(f"replay of a record just produced failed at offset {base}: {exc}") from exc
    if len(records) >= BIG_CHANGE_RECORDS:
        print(f"{fn_name}: {len(records)} records: handler {(t1 - t0) * 1000:.0f} ms, encode "
              f"{(t2 - t1) * 1000:.0f} ms, replay {(time.perf_counter() - t2) * 1000:.0f} ms", file=sys.stderr, flush=True)
    return result, data, image.drain_changes()


def compute_without_gc(*args: Any) -> tuple[Any, bytes, Any]:
    """:func:`compute` with the cyclic collector paused: a 100k-partition change allocates
    ~10⁶ objects, none of them cyclic garbage, and each collection they trigger would walk
    them all again (the image itself is frozen out of collections at load)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return compute(*args)
    finally:
        if was:
            gc.enable()


