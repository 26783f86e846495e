"""Making a :class:`broker_impl.storage.partition_log.PartitionLog`: a new, empty one in its
partition dir (:func:`create`), or one loaded from an existing dir (:func:`load`: segments
recovered from the recovery point, the leader-epoch cache and the producer state rebuilt).
``PartitionLog.create`` / ``.load`` call these with the class; nothing here imports it.

Producer state (Kafka's ProducerStateManager): every append — leader, follower, future log —
records its batches' producer id / epoch / sequences / offsets in ``producer_state``, so a
follower that becomes leader knows every producer's last batches. A load (recovery) and a
truncation rebuild it from the log (:func:`rebuild_producer_state`): the batch headers of the
newest segments, at most ``LogConfig.producer_state_scan_bytes`` of log (whole batches from an
index entry; the older bytes are not read). A producer whose last batch lies only in older
bytes is then unknown, which the state treats leniently (accepted at any sequence), never as
an error. Kafka instead snapshots the state at each roll; a header scan of the tail is our
bounded equivalent.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Callable

from kafka_runtime import fsutil
from broker_impl.state.producers import ProducerState
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.epoch_cache import LeaderEpochCache
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig, parse_partition_dir_name, partition_dir_name
from broker_impl.storage.log_recovery import recover_segments, scan_epochs
from broker_impl.storage.segment import LogSegment

log = logging.getLogger(__name__)
NowMs = Callable[[], int]
# ``PartitionLog`` itself (its constructor's keywords: log_dir, path, topic, partition,
# topic_id, config, channel, now_ms); typed loosely so that this module needs no import of it
LogClass = Callable[..., Any]


def create(cls: LogClass, log_dir: str, topic: str, partition: int, topic_id: uuid.UUID | None,
           config: LogConfig, channel: DirFailureChannel, now_ms: NowMs, *, dir_name: str | None = None) -> Any:
    path = os.path.join(log_dir, dir_name or partition_dir_name(topic, partition))
    plog = cls(log_dir=log_dir, path=path, topic=topic, partition=partition, topic_id=topic_id,
               config=config, channel=channel, now_ms=now_ms)
    with channel.io(log_dir, "create_log"):
        os.makedirs(path)  # the manager loads an existing dir instead of creating it
        plog._add_segment(LogSegment.create(path, 0, index_interval_bytes=config.index_interval_bytes,
                                            created_ms=now_ms()))
        # one sync of the partition dir makes its entries (segment files, partition.metadata)
        # durable: write_partition_metadata's atomic write ends with it
        if topic_id is not None:
            ckpt.write_partition_metadata(os.path.join(path, ckpt.PARTITION_METADATA), topic_id)
        else:
            fsutil.fsync_dir(path)
    # The partition dir's own entry in the log dir is synced by the log's first flush or
    # roll, before anything is durable in it (``_parent_unsynced``): an empty log lost in
    # a crash is created again from the metadata. Creating a 300-partition topic costs
    # each broker one fsync less per replica (Kafka syncs no dir at creation).
    plog._parent_unsynced = True
    return plog


def load(cls: LogClass, log_dir: str, dir_name: str, config: LogConfig, channel: DirFailureChannel,
         now_ms: NowMs, *, recovery_point: int, high_watermark: int, clean_shutdown: bool,
         log_start_offset: int = 0) -> Any:
    """Open an existing partition dir; recover segments at or after ``recovery_point``
    (everything is trusted after a clean shutdown) truncating at the first bad batch."""
    parsed = parse_partition_dir_name(dir_name)
    if parsed is None:
        raise ValueError(f"{dir_name!r} is not a partition dir name")
    topic, partition, _kind = parsed
    path = os.path.join(log_dir, dir_name)
    with channel.io(log_dir, "load"):
        try:
            topic_id = ckpt.read_partition_metadata(os.path.join(path, ckpt.PARTITION_METADATA))
        except ckpt.CheckpointFormatError as exc:
            log.warning("%s: no usable topic id (treated as a stray by replica management)", exc)
            topic_id = None
        plog = cls(log_dir=log_dir, path=path, topic=topic, partition=partition, topic_id=topic_id,
                   config=config, channel=channel, now_ms=now_ms)
        segments, recovered_epochs, plog.recovery = recover_segments(
            path, config.index_interval_bytes, recovery_point, clean_shutdown, now_ms())
        for seg in segments:
            plog._add_segment(seg)
        plog._log_start = plog._segments[0].base_offset
        plog.recovery_point = plog.log_end_offset
        plog._log_start = min(max(plog._log_start, log_start_offset), plog.log_end_offset)
        try:
            epochs = ckpt.read_epochs(os.path.join(path, ckpt.EPOCH_CHECKPOINT))
        except ckpt.CheckpointFormatError as exc:
            log.warning("%s: rebuilding the leader-epoch cache from the batches", exc)
            epochs = []
            recovered_epochs = scan_epochs(plog._segments)
        plog.epoch_cache = LeaderEpochCache(epochs, plog._persist_epochs, plog._epochs_assigned)
        plog.epoch_cache.assign_many(recovered_epochs)
        plog.epoch_cache.truncate_from_end(plog.log_end_offset)
        plog.epoch_cache.truncate_from_start(plog._log_start)
        plog._persist_epochs_if_due()   # the recovery point is the log end now: so must the file be
        plog._rebuild_producer_state()
    plog._hw = min(max(high_watermark, plog._log_start), plog.log_end_offset)
    return plog


def rebuild_producer_state(segments: list[LogSegment], scan_bytes: int, state: ProducerState) -> None:
    """Replay the batch headers of the log tail (at most ``scan_bytes``, newest segments first
    back to that bound) into ``state``, cleared first. Raises OSError."""
    budget = scan_bytes
    start = len(segments) - 1
    while start > 0 and budget - segments[start].size > 0:
        budget -= segments[start].size
        start -= 1

    def headers():
        for i, seg in enumerate(segments[start:]):
            yield from seg.iter_headers(seg.tail_start(budget) if i == 0 else 0)
    state.rebuild(headers())
