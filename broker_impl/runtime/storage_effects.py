"""The core's storage effects (:class:`StorageEffects`): create/delete logs, future
logs, and closing a failed dir — off the event loop, so a hung disk stalls these but never
the heartbeats or the failure report.

Each dir has its own worker thread (``storage-<dir>``), so a slow or hung dir holds up only
the effects in that dir: the logs of a new topic are created in the healthy dirs while one
create hangs in a stuck one. The effects of one partition still run in the order the core
emitted them (a partition's next effect is handed to its dir's worker when the previous one
has finished, whichever dir that was). ``MarkDirOffline`` runs on a worker of its own and
only takes the dir's logs out of the log manager; closing them (which waits for a log's
lock, held by an append stuck in that dir) is left to the dir's worker.

The effects name dirs by id; the log manager maps ids to paths (the storage edge).
OSErrors inside reach the core through the failure channel like any other storage error.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from typing import Any

from broker_impl.runtime.dir_io import DirExecutor, dir_label
from broker_impl.state import effects as fx
from broker_impl.storage import KafkaStorageError, LogManager, StorageError
from kafka_common import ids
from kafka_runtime.events import EventLog

log = logging.getLogger(__name__)
CONTROL = ""   # the worker of MarkDirOffline and of effects naming no known dir


class StorageEffects:
    def __init__(self, lm: LogManager, events: EventLog) -> None:
        self.lm = lm
        self.events = events
        self._workers: dict[str, DirExecutor] = {}   # daemon threads: a hung dir cannot block exit
        self._tails: dict[fx.TopicPartition, concurrent.futures.Future] = {}
        self._lock = threading.Lock()                # _workers and _tails (the loop and the workers)
        self._closed = False

    def submit(self, e: Any) -> concurrent.futures.Future:
        """Queue ``e``; the future is done when it has run (its errors are logged and
        reported as events, never raised)."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        tp = getattr(e, "tp", None)
        with self._lock:
            prev = self._tails.get(tp) if tp is not None else None
            if tp is not None:
                self._tails[tp] = done
        if tp is not None:
            done.add_done_callback(lambda f, tp=tp: self._untail(tp, f))
        if prev is None or prev.done():
            self._start(e, done)
        else:
            prev.add_done_callback(lambda _f: self._start(e, done))
        return done

    def _untail(self, tp: fx.TopicPartition, fut: concurrent.futures.Future) -> None:
        with self._lock:
            if self._tails.get(tp) is fut:
                del self._tails[tp]

    def _start(self, e: Any, done: concurrent.futures.Future) -> None:
        """Hand ``e`` to its dir's worker (any thread: the loop, or the worker that finished
        the partition's previous effect)."""
        worker = self._worker(self._dir_of(e))
        inner = worker.submit(self._run, e)
        inner.add_done_callback(lambda f: done.set_result(None) if not done.done() else None)

    def _dir_of(self, e: Any) -> str:
        if isinstance(e, fx.MarkDirOffline):
            return CONTROL
        dir_id = getattr(e, "dir_id", None)
        path = self.lm.path_of(dir_id) if dir_id is not None else None
        return os.path.abspath(path) if path is not None else CONTROL

    def _worker(self, path: str) -> DirExecutor:
        with self._lock:
            worker = self._workers.get(path)
            if worker is None:
                name = "storage-" + (dir_label(path) if path != CONTROL else "control")
                worker = self._workers[path] = DirExecutor(name)
                if self._closed:
                    worker.close()
            return worker

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._workers.values())
        for worker in workers:
            worker.close()

    def _run(self, e: Any) -> None:
        lm = self.lm
        tp = getattr(e, "tp", None)
        try:
            if isinstance(e, fx.CreateLog):
                lm.get_or_create_log(e.topic_id, e.tp.topic, e.tp.partition, dir_id=e.dir_id)
            elif isinstance(e, fx.DeleteLog):
                self._delete(e)
            elif isinstance(e, fx.MarkDirOffline):
                self._mark_offline(e)
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

    def _delete(self, e: fx.DeleteLog) -> None:
        """Kafka's asyncDelete: renamed ``-delete`` now (the partition's next effect, e.g. the
        log of a re-created topic, may follow at once), removed by a later job of the dir's
        worker that no effect of the partition waits for."""
        new = self.lm.delete_log(e.tp.topic, e.tp.partition, dir_id=e.dir_id)
        fields = dict(topic=e.tp.topic, partition=e.tp.partition, dir_id=ids.to_base64(e.dir_id),
                      topic_id=ids.to_base64(e.topic_id) if e.topic_id is not None else None, stray=e.stray)
        self.events.emit("log_deleted", path=new, **fields)
        self._worker(self._dir_of(e)).submit(self._remove, new, fields)

    def _remove(self, path: str, fields: dict) -> None:
        try:
            self.lm.remove_deleted(path)
        except StorageError as exc:
            log.error("removing %s failed: %s", path, exc)
            return
        except Exception:  # a bug must not kill the worker silently
            log.exception("removing %s failed", path)
            return
        self.events.emit("log_removed", path=path, **fields)

    def _mark_offline(self, e: fx.MarkDirOffline) -> None:
        path = self.lm.path_of(e.dir_id)
        if path is None:
            return
        _gone, dropped = self.lm.forget_offline(path)
        if dropped:
            self._worker(os.path.abspath(path)).submit(_close_all, dropped)


def _close_all(logs: list) -> None:
    for plog in logs:
        try:
            plog.close()
        except Exception:  # closing only releases handles; a failure there changes nothing
            log.exception("closing %s", plog)
