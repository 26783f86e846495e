"""Node events for committed changes (``registered``, ``fenced``/``unfenced``,
``broker_log_dirs_changed``, ``unregistered``, ``partition_change``): written by the active
controller once the records that made them are committed."""

from __future__ import annotations

from typing import Any

from kafka_common import ids
from kafka_common.metadata.image import ImageChanges, MetadataImage
from kafka_common.metadata.records import RegisterBrokerRecord
from kafka_runtime.events import EventLog


def emit_changes(events: EventLog, image: MetadataImage, records: list[Any], reason: str,
                 changes: ImageChanges) -> None:
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
    if not events.path and not events.echo:
        events.count += len(changes.partitions)  # nobody reads them: skip formatting
        return
    for (topic_id, pid), (old, new) in changes.partitions.items():
        if new is None:
            continue
        topic = image.topics.get(topic_id)
        emit("partition_change", topic=topic.name if topic else ids.to_base64(topic_id),
             topic_id=topic_id, partition=pid, leader=new.leader, isr=list(new.isr),
             replicas=list(new.replicas), directories=list(new.directories),
             leader_epoch=new.leader_epoch, partition_epoch=new.partition_epoch,
             reason=reason if old is not None else "create_topics")
