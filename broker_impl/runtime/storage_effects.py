"""The core's storage effects (:class:`StorageEffects`): create/delete/rename logs, future
logs, and closing a failed dir — on one worker thread, in effect order, so a hung disk
stalls these but never the heartbeats or the failure report.

The effects name dirs by id; the log manager maps ids to paths (the storage edge).
OSErrors inside reach the core through the failure channel like any other storage error.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

from broker_impl.runtime.dir_io import DirExecutor
from broker_impl.state import effects as fx
from broker_impl.storage import KafkaStorageError, LogManager, StorageError
from kafka_runtime.events import EventLog

log = logging.getLogger(__name__)


class StorageEffects:
    def __init__(self, lm: LogManager, events: EventLog) -> None:
        self.lm = lm
        self.events = events
        self._worker = DirExecutor("storage-effects")  # a daemon thread: a hung dir cannot block exit

    def submit(self, e: Any) -> concurrent.futures.Future:
        return self._worker.submit(self._run, e)

    def close(self) -> None:
        self._worker.close()

    def _run(self, e: Any) -> None:
        lm = self.lm
        tp = getattr(e, "tp", None)
        try:
            if isinstance(e, fx.CreateLog):
                lm.get_or_create_log(e.topic_id, e.tp.topic, e.tp.partition, dir_id=e.dir_id)
            elif isinstance(e, fx.DeleteLog):
                lm.delete_log(e.tp.topic, e.tp.partition)
            elif isinstance(e, fx.MarkDirOffline):
                lm.mark_dir_offline(e.dir_id)
            elif isinstance(e, fx.RenameStray):
                new = lm.rename_stray(e.tp.topic, e.tp.partition)
                self.events.emit("stray_renamed", topic=e.tp.topic, partition=e.tp.partition, path=new)
            elif isinstance(e, fx.CreateFutureLog):
                lm.create_future_log(e.topic_id, e.tp.topic, e.tp.partition, dir_id=e.dir_id)
            elif isinstance(e, fx.DeleteFutureLog):
                lm.delete_future_log(e.tp.topic, e.tp.partition)
        except StorageError as exc:
            log.error("%s of %s failed: %s", type(e).__name__, tp, exc)
            if not isinstance(exc, KafkaStorageError):
                self.events.emit("storage_effect_failed", effect=type(e).__name__, topic=tp.topic if tp else None,
                                 partition=tp.partition if tp else None, error=str(exc))
        except Exception:  # a bug must not kill the worker silently
            log.exception("%s failed", type(e).__name__)
