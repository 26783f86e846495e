"""The controller's image off the loop: built from the newest snapshot + the log, caught up
with committed records, and a leader's request computed (pure handler, batch encoding,
optimistic replay) — CPU work that runs in worker threads while nothing else touches the
image (the runtime's state-machine lock), with the cyclic collector paused."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any, Callable

from controller_impl.errors import ControllerError
from kafka_common.metadata import snapshot as snapshot_format
from kafka_common.metadata.batches import decode_batches, encode_batch
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage

from controller_impl.log import MetadataLog
from controller_impl.log.snapshots import SnapshotStore

REPLAY_CHUNK_BYTES = 16 << 20
BIG_CHANGE_RECORDS = 10_000  # a change this big logs where its time went
# Kafka's controller writes a non-atomic result in batches of at most this many records
# (QuorumController's maxRecordsPerBatch): followers copy and sync the first batches while
# the leader still replays the next ones
MAX_RECORDS_PER_BATCH = 10_000
# a result this big whose records are all partition changes merged by the handler (or
# broker records) is answered once committed while the image installs the merges
DEFERRED_INSTALL_MIN_RECORDS = 1000
# records whose replay reads and writes only the broker side of the image (registrations,
# dir owners), never a partition: replayed ahead of the partition changes before them
BROKER_RECORDS = frozenset({r.BrokerRegistrationChangeRecord, r.FenceBrokerRecord, r.UnfenceBrokerRecord})


class FatalError(ControllerError):
    """The controller cannot go on (metadata log unwritable, replay mismatch, bad storage)."""


class ReplayFailed(ControllerError):
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


def read_tail(log: MetadataLog, image: MetadataImage, upto: int, max_bytes: int = REPLAY_CHUNK_BYTES) -> bytes:
    """The next chunk of whole batches the image lacks, below ``upto`` (on the loop: the
    log's index is the loop's)."""
    start = image.last_offset + 1
    if start < log.start_offset:
        raise FatalError(f"the log starts at {log.start_offset}, the image ends at {start - 1}: "
                         f"no snapshot covers the gap")
    data = log.read(start, max_bytes, limit=upto)
    if not data:
        raise FatalError(f"the log has no records from {start} to {upto}")
    return data


def apply_batches(image: MetadataImage, data: bytes, upto: int) -> int:
    """Decode + replay (pure CPU: safe in a worker thread while nothing else touches the
    image), the cyclic collector paused as in :func:`without_gc`."""
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


def run_handler(state: Any, fn: Callable[..., Any], request: Any, now_ms: int) -> Any:
    """``fn``, a ControllerState method, on ``state``: a request's, or a timer's (None)."""
    return fn(state, request, now_ms) if request is not None else fn(state, now_ms)


def split_records(records: list[Any], atomic: bool) -> list[list[Any]]:
    """The batches a result is written as: at most :data:`MAX_RECORDS_PER_BATCH` records
    each (Kafka's controller splits a non-atomic result the same way), or one batch for an
    atomic result (CreateTopics: a topic exists with all its partitions or not at all)."""
    n = MAX_RECORDS_PER_BATCH
    if atomic or len(records) <= n:
        return [records]
    return [records[i:i + n] for i in range(0, len(records), n)]


def compute(state: Any, fn: Callable[..., Any], request: Any, now_ms: int, base: int, epoch: int,
            atomic: bool = False) -> tuple[Any, list[tuple[list[Any], Any]], list[bytes], dict, list[int] | None]:
    """A leader's request, off the loop: the pure handler, then its records split into
    batches and encoded at ``base`` (an encoding error shows before anything is written).
    Returns (result, chunks, batch bytes, timings in ms, deferred plan); a chunk is
    (records, the handler's merges aligned with them or None: ``ControllerResult.merged``);
    the plan: see :func:`plan_deferred_install`."""
    t0 = time.perf_counter()
    result = run_handler(state, fn, request, now_ms)
    records = list(result.records)
    t1 = time.perf_counter()
    if not records:
        return result, [], [], {}, None
    split = split_records(records, atomic)
    merged = result.merged
    ts = time.time_ns() // 1_000_000
    chunks = []
    datas = []
    offset = base
    for chunk in split:
        datas.append(encode_batch(offset, chunk, leader_epoch=epoch, timestamp_ms=ts))
        start = offset - base
        chunks.append((chunk, None if merged is None else merged[start:start + len(chunk)]))
        offset += len(chunk)
    t2 = time.perf_counter()
    plan = None if atomic else plan_deferred_install(state.image, records, merged)
    t3 = time.perf_counter()
    return result, chunks, datas, {"handler": (t1 - t0) * 1000, "encode": (t2 - t1) * 1000,
                                   "plan": (t3 - t2) * 1000}, plan


def plan_deferred_install(image: MetadataImage, records: list[Any], merged: Any) -> list[int] | None:
    """Whether a big result may be written before the image installs it: every record is
    either a partition change whose merge the handler made from this very image (checked:
    :meth:`MetadataImage.merges_apply`; installing it cannot fail) or a broker record
    (:data:`BROKER_RECORDS`, independent of partitions). Returns the indexes of the broker
    records — replayed first, so that a record the image refuses is still never written —
    or None (replay every record before its batch is appended, as for any other result)."""
    if merged is None or len(records) < DEFERRED_INSTALL_MIN_RECORDS:
        return None
    first = []
    pairs = []
    for i, m in enumerate(merged):
        if m is not None:
            pairs.append(m)
        elif type(records[i]) in BROKER_RECORDS:
            first.append(i)
        else:
            return None
    return first if image.merges_apply(pairs) else None


def replay_records(image: MetadataImage, records: list[Any], base: int, merged: Any = None) -> None:
    """The optimistic replay of records just produced (before they are appended: a record
    the image refuses is never written). ``merged`` (aligned with ``records``, see
    ``ControllerResult.merged``): the registrations the handler computed already, installed
    without a second merge (:meth:`MetadataImage.replay_merged`)."""
    replay = image.replay
    try:
        if merged is None:
            for i, record in enumerate(records):
                replay(record, base + i)
        else:
            replay_merged = image.replay_merged
            for i, (record, m) in enumerate(zip(records, merged)):
                if m is None:
                    replay(record, base + i)
                else:
                    replay_merged(record, base + i, m[0], m[1])
    except Exception as exc:
        raise ReplayFailed(f"replay of a record just produced failed at offset {base}: {exc}") from exc


def without_gc(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with the cyclic collector paused: a 100k-partition change allocates
    ~10⁶ objects, none of them cyclic garbage, and each collection they trigger would walk
    them all again (the image itself is frozen out of collections at load)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return fn(*args)
    finally:
        if was:
            gc.enable()


def log_big_change(fn_name: str, records: int, batches: int, timings: dict) -> None:
    if records >= BIG_CHANGE_RECORDS:
        print(f"{fn_name}: {records} records in {batches} batches: "
              + ", ".join(f"{k} {v:.0f} ms" for k, v in timings.items()), file=sys.stderr, flush=True)
