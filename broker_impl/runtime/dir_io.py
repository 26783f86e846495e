"""Per-log-dir I/O executors: one disk's trouble stays in that disk (KIP-858's point).

Every blocking storage operation of the data plane runs on the worker thread of the log dir
it touches, never on the broker's event loop: leader appends (Produce), reads (Fetch,
ListOffsets), follower appends/truncations (replica fetchers), the dir mover's copy and
swap, flushes, checkpoints and the health probe. The event loop awaits them
(``asyncio.wrap_future``). A SLOW dir therefore delays only the requests that touch it; a
HUNG dir parks its own worker (and the requests waiting on it) while heartbeats, the
metadata long-poll and the other dirs go on.

The health probe of a dir runs on a second worker of that dir (:meth:`DirIO.submit_probe`),
so it neither waits behind nor slows down the dir's appends.

Ordering:

- one worker thread per dir, FIFO: the operations submitted for a dir run in submission
  order, so one partition's appends (a partition lives in one dir) never reorder;
- :meth:`DirIO.partition_lock` — an ``asyncio.Lock`` per (topic, partition) that the
  Produce handler holds across sequence check → append → producer-state record, the
  follower fetcher across an apply, and the mover across the final catch-up + swap, so an
  append can never land in a log that is being swapped out.

Failures: the operations still raise through the storage layer's ``DirFailureChannel``
(once per dir, ``on_failure`` → ``call_soon_threadsafe`` into the core); the exception is
re-raised to the awaiting coroutine, on the loop, where the handlers map it as before.

Workers are daemon threads (a worker stuck in a hung disk must not keep the process from
exiting); :meth:`DirIO.close` stops the idle ones and leaves stuck ones behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import queue
import threading
from typing import Any, Callable

from broker_impl.storage import flush_deferral

log = logging.getLogger(__name__)


def _settle(fut: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if fut.cancelled():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class _LoopSide:
    """The job's result holder for :meth:`DirIO.run`: what ``DirExecutor._run`` needs of a
    ``concurrent.futures.Future``, settling an asyncio future on its loop."""
    __slots__ = ("loop", "fut")

    def __init__(self, loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[Any]") -> None:
        self.loop, self.fut = loop, fut

    def set_running_or_notify_cancel(self) -> bool:
        return not self.fut.cancelled()   # a cancelled waiter's queued job is skipped

    def set_result(self, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.fut, True, value)
        except RuntimeError:
            pass   # the loop is closed (shutdown): nobody awaits it any more

    def set_exception(self, exc: BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.fut, False, exc)
        except RuntimeError:
            pass


FLUSH_THREADS = 8   # a dir's flush threads: concurrent fsyncs share the fs's journal commits
AWAITED, BACKGROUND, STOP = 0, 1, 2   # flush queue priorities: an answer waits for the first kind


class DirExecutor:
    """One daemon worker thread running a dir's jobs in submission order, and (started at
    the first one) ``FLUSH_THREADS`` threads for the flushes by count those jobs leave
    (:mod:`broker_impl.storage.flush_deferral`): a job is settled once its flushes are done."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._flush_jobs: queue.PriorityQueue = queue.PriorityQueue()
        self._flush_seq = itertools.count()
        self._flushers: list[threading.Thread] = []
        self._closed = False
        self.submitted = 0
        self.busy_since: float | None = None  # time.monotonic() of the running job's start
        self._thread = threading.Thread(target=self._run, name=f"dir-io-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if self._closed:
            fut.set_exception(RuntimeError(f"dir executor {self.name} is closed"))
            return fut
        self.submitted += 1
        self._jobs.put((fut, fn, args))
        return fut

    @property
    def pending(self) -> int:
        return self._jobs.qsize()

    def _run(self) -> None:
        import time
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            self.busy_since = time.monotonic()
            ok, value = True, None
            with flush_deferral.collecting() as noted:
                try:
                    value = fn(*args)
                except BaseException as exc:  # handed to the awaiting coroutine
                    ok, value = False, exc
            self.busy_since = None
            for plog in noted.soon:
                self._put_flush(BACKGROUND, self._flush_in_background, plog)
            if noted.due:
                self._flush_then_settle(fut, ok, value, noted.due)
            elif ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    def _flush_then_settle(self, fut: Any, ok: bool, value: Any, due: list[Any]) -> None:
        """Flush ``due`` on the flush threads (each log its own job, so they run together),
        then settle ``fut``: with ``value``, or the first flush error (an append whose fsync
        failed is not acked) — also when the job itself failed after noting a flush."""
        state = {"left": len(due), "error": None}
        lock = threading.Lock()

        def flush_one(plog: Any) -> None:
            try:
                plog.flush()
            except BaseException as exc:  # the storage layer reported it (dir offline)
                with lock:
                    state["error"] = state["error"] or exc
            with lock:
                state["left"] -= 1
                if state["left"]:
                    return
            if ok and state["error"] is None:
                fut.set_result(value)
            else:
                fut.set_exception(value if not ok else state["error"])

        for plog in due:
            self._put_flush(AWAITED, flush_one, plog)

    @staticmethod
    def _flush_in_background(plog: Any) -> None:
        try:
            plog.flush()
        except BaseException:  # noqa: BLE001 - reported through the failure channel; nobody awaits it
            log.debug("background flush of %s failed", getattr(plog, "path", plog), exc_info=True)

    def _put_flush(self, priority: int, fn: Callable[[Any], None], plog: Any) -> None:
        """Queue a flush for the flush threads (started at the first one): awaited flushes
        before background ones, each kind in order."""
        if not self._flushers:
            self._flushers = [threading.Thread(target=self._flush_loop, name=f"dir-flush-{self.name}-{i}",
                                               daemon=True) for i in range(FLUSH_THREADS)]
            for t in self._flushers:
                t.start()
        self._flush_jobs.put((priority, next(self._flush_seq), fn, plog))

    def _flush_loop(self) -> None:
        while True:
            _prio, _seq, fn, plog = self._flush_jobs.get()
            if fn is None:
                return
            fn(plog)

    def close(self) -> None:
        """No new jobs; the worker exits after the queued ones (a stuck one never does)."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            for _ in self._flushers:
                self._flush_jobs.put((STOP, next(self._flush_seq), None, None))   # after the queued flushes

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def dir_label(path: str) -> str:
    """A dir's name for its threads: the last two parts of its path (the lab's dirs are all
    ``/jbodlab/disks/<disk>/data``: ``d1-data``, not ``data`` for every dir)."""
    parts = [p for p in os.path.abspath(path).split(os.sep) if p]
    return "-".join(parts[-2:]) or path


class DirIO:
    """The executors of a broker's log dirs (keyed by absolute path) + per-partition locks."""

    def __init__(self, dir_paths: list[str]) -> None:
        self.executors: dict[str, DirExecutor] = {}
        self.probers: dict[str, DirExecutor] = {}
        self.upkeepers: dict[str, DirExecutor] = {}
        for path in dir_paths:
            self._executor(path)
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    def _executor(self, path: str, table: dict[str, DirExecutor] | None = None, kind: str = "") -> DirExecutor:
        table = self.executors if table is None else table
        key = os.path.abspath(path)
        ex = table.get(key)
        if ex is None:
            ex = table[key] = DirExecutor(dir_label(key) + kind)
        return ex

    def submit_probe(self, dir_path: str, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """The health probe runs on a second worker of the dir: it measures the device on
        its own instead of queueing behind (and slowing) the dir's appends."""
        return self._executor(dir_path, self.probers, "-probe").submit(fn, *args)

    def submit_upkeep(self, dir_path: str, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """The dir's checkpoints and time-based flushes run on a third worker of the dir: on a
        slow disk their fsyncs would hold up every append queued behind them (they need no
        order with the appends: a checkpoint writes the values it reads)."""
        return self._executor(dir_path, self.upkeepers, "-upkeep").submit(fn, *args)

    def submit(self, dir_path: str, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on ``dir_path``'s worker; any thread may call this."""
        return self._executor(dir_path).submit(fn, *args)

    async def run(self, dir_path: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Await ``fn(*args)`` on ``dir_path``'s worker (exceptions re-raised here).
        Cancelling the awaiting coroutine does not stop a job already running (a queued
        one is skipped). The worker settles an asyncio future straight through
        ``call_soon_threadsafe`` — no ``concurrent.futures.Future`` (its condition variable
        and callback chain) per append and per read."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        ex = self._executor(dir_path)
        if ex._closed:
            raise RuntimeError(f"dir executor {ex.name} is closed")
        ex.submitted += 1
        ex._jobs.put((_LoopSide(loop, fut), fn, args))
        return await fut

    def partition_lock(self, topic: str, partition: int) -> asyncio.Lock:
        key = (topic, partition)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def close(self) -> None:
        for ex in (*self.executors.values(), *self.probers.values(), *self.upkeepers.values()):
            ex.close()

    def join(self, timeout_s: float) -> list[str]:
        """Wait (bounded, in total) for the workers to finish; return the names still busy."""
        import time
        deadline = time.monotonic() + timeout_s
        stuck = []
        for path, ex in self.executors.items():
            if not ex.join(max(0.0, deadline - time.monotonic())):
                stuck.append(path)
        return stuck


def daemon_call(fn: Callable[[], Any]) -> concurrent.futures.Future:
    """``fn()`` on a fresh daemon thread (never joined at exit, unlike ``asyncio.to_thread``'s
    pool): for bounded waits on work that a hung dir may never finish."""
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)
    threading.Thread(target=run, name="daemon-call", daemon=True).start()
    return fut
