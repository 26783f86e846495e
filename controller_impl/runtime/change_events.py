"""Node events for committed changes (``registered``, ``fenced``/``unfenced``,
``broker_log_dirs_changed``, ``unregistered``, ``partition_change``): written by the active
controller once the records that made them are committed.

A dir failure commits 100k partition changes at once: their ``partition_change`` lines are
formatted by hand (the same JSON object ``EventLog.emit`` writes, ~5x cheaper) and written
in slices (:func:`partition_change_lines`), so the writer can yield to the loop between
slices — Raft must keep answering while 100k lines are written."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

from kafka_common import ids
from kafka_common.metadata.image import MetadataImage
from kafka_common.metadata.image_changes import ImageChanges
from kafka_common.metadata.records import RegisterBrokerRecord
from kafka_runtime.events import EventLog

SLICE = 2000  # partition_change lines written at once


def emit_broker_changes(events: EventLog, records: list[Any], reason: str, changes: ImageChanges) -> None:
    emit = events.emit
    registered = set()
    for rec in records:
        if isinstance(rec, RegisterBrokerRecord):
            registered.add(rec.broker_id)
            emit("registered", broker_id=rec.broker_id, broker_epoch=rec.broker_epoch,
                 incarnation_id=rec.incarnation_id, log_dirs=list(rec.log_dirs), fenced=rec.fenced)
    for broker_id, (old, new) in changes.brokers.items():
        if new is None:
            emit("unregistered", broker_id=broker_id)
            continue
        if broker_id in registered and (old is None or old.epoch != new.epoch):
            continue  # a new incarnation: "registered" says it all
        if old is not None and old.fenced != new.fenced:
            emit("fenced" if new.fenced else "unfenced", broker_id=broker_id,
                 broker_epoch=new.epoch, reason=reason)
        if old is not None and old.log_dirs != new.log_dirs and old.epoch == new.epoch:
            emit("broker_log_dirs_changed", broker_id=broker_id, log_dirs=list(new.log_dirs),
                 removed=[d for d in old.log_dirs if d not in new.log_dirs], reason=reason)


def partition_change_lines(events: EventLog, image: MetadataImage, reason: str,
                           changes: ImageChanges, slice_size: int = SLICE) -> Iterator[list[str]]:
    """The ``partition_change`` lines of ``changes`` (JSON, no newline), ``slice_size`` at a
    time; a deleted partition has none."""
    head = f',"node_id":{json.dumps(events.node_id)},"role":{json.dumps(events.role)},' \
           f'"event":"partition_change","topic":'
    uuid_text: dict[Any, str] = {}
    topic_text: dict[Any, tuple[str, str]] = {}

    def text(u: Any) -> str:
        t = uuid_text.get(u)
        if t is None:
            t = uuid_text[u] = json.dumps(ids.to_base64(u))
        return t

    def ints(values: tuple[int, ...]) -> str:
        return "[" + ",".join(map(str, values)) + "]"

    reasons = (json.dumps(reason), json.dumps("create_topics"))
    out: list[str] = []
    for (topic_id, pid), (old, new) in changes.partitions.items():
        if new is None:
            continue
        names = topic_text.get(topic_id)
        if names is None:
            topic = image.topics.get(topic_id)
            names = topic_text[topic_id] = (json.dumps(topic.name if topic else ids.to_base64(topic_id)),
                                            text(topic_id))
        dirs = new.directories
        out.append(
            '{"ts_ns":' + str(time.time_ns()) + head + names[0] + ',"topic_id":' + names[1]
            + ',"partition":' + str(pid) + ',"leader":' + str(new.leader) + ',"isr":' + ints(new.isr)
            + ',"replicas":' + ints(new.replicas)
            + ',"directories":[' + ",".join([text(d) for d in dirs]) + "]"
            + ',"leader_epoch":' + str(new.leader_epoch) + ',"partition_epoch":' + str(new.partition_epoch)
            + ',"reason":' + reasons[old is None] + "}")
        if len(out) >= slice_size:
            yield out
            out = []
    if out:
        yield out


def emit_changes(events: EventLog, image: MetadataImage, records: list[Any], reason: str,
                 changes: ImageChanges) -> None:
    """Every event of one committed change, at once."""
    emit_broker_changes(events, records, reason, changes)
    if not events.path and not events.echo:
        events.count += len(changes.partitions)  # nobody reads them: skip formatting
        return
    for lines in partition_change_lines(events, image, reason, changes):
        events.write_lines(lines)
