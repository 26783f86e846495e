"""Node events for committed changes (``registered``, ``fenced``/``unfenced``,
``broker_log_dirs_changed``, ``unregistered``, ``partition_change``): written by the active
controller once the records that made them are committed.

A dir failure commits 100k partition changes at once: their ``partition_change`` lines are
formatted by hand (the same JSON object ``EventLog.emit`` writes, ~5x cheaper) and written
in slices (:func:`partition_change_lines`), so the writer can yield to the loop between
slices — Raft must keep answering while 100k lines are written. :class:`CommitEvents`
holds them from the write to the commit and writes them."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, Callable, Coroutine, Iterator

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


class CommitEvents:
    """The active controller's node events between a change and its commit: ``pending``
    (written, not yet committed: dropped if the leadership is lost), then committed and
    written in commit order by one task, a slice at a time with the loop free in between
    (a dir failure of 100k replicas writes 100k lines). Each entry: (last offset of the
    change, its records, the reason, its :class:`ImageChanges`). ``image`` gives the image
    of the moment (a rebuild replaces it), ``spawn`` starts a task on the loop."""

    def __init__(self, events: EventLog, image: Callable[[], MetadataImage],
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task]) -> None:
        self._events = events
        self._image = image
        self._spawn = spawn
        self._pending: deque[tuple[int, list, str, Any]] = deque()
        self._committed: deque[tuple[int, list, str, Any]] = deque()
        self._emit_task: asyncio.Task | None = None
        self.stats = {"commits": 0, "records": 0}

    def pending(self, last: int, records: list[Any], reason: str, changes: Any) -> None:
        """A change written up to ``last``: its events once that is committed."""
        self._pending.append((last, records, reason, changes))

    def queue(self, last: int, records: list[Any], reason: str, changes: Any, hw: int) -> None:
        """A change's events: written once ``last`` is below ``hw`` (now if it is)."""
        if last < hw:
            self._committed.append((last, records, reason, changes))
            self._start()
        else:
            self._pending.append((last, records, reason, changes))

    def clear_pending(self) -> None:
        self._pending.clear()

    def committed(self, hw: int) -> None:
        """The high watermark moved: the changes below it are written (after the answers)."""
        pending = self._pending
        moved = False
        while pending and pending[0][0] < hw:
            self._committed.append(pending.popleft())
            moved = True
        if moved:
            self._start()

    async def finish(self, timeout_s: float) -> None:
        """At stop: the committed changes' events written (at most ``timeout_s``)."""
        if self._emit_task is not None and not self._emit_task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._emit_task), timeout_s)
            except (asyncio.TimeoutError, Exception):
                pass

    def _start(self) -> None:
        if self._emit_task is None or self._emit_task.done():
            self._emit_task = self._spawn(self._emit())

    async def _emit(self) -> None:
        events = self._events
        while self._committed:
            _, records, reason, changes = self._committed.popleft()
            self.stats["commits"] += 1
            self.stats["records"] += len(records)
            emit_broker_changes(events, records, reason, changes)
            if not events.path and not events.echo:
                events.count += len(changes.partitions)  # nobody reads them: skip formatting
                continue
            for lines in partition_change_lines(events, self._image(), reason, changes):
                events.write_lines(lines)
                await asyncio.sleep(0)
