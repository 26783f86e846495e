"""Flush by count (``log.flush.interval.messages``) without holding up the dir's other appends.

An append that brings its log's unflushed messages to the count fsyncs the log before it is
acked. Run inline on the dir's one FIFO worker (:mod:`broker_impl.runtime.dir_io`), those
fsyncs are serial: on a slow device each one waits for a whole journal commit of its own, and
every append of every other partition of the dir queues behind it. Measured on a lab FUSE
disk with 50 ms per I/O (ext4): an fsync alone takes ~250 ms, 16 in a row 4.0 s, 16 at once
0.25–0.45 s, since ext4's journal commits concurrent fsyncs together.

So a worker runs each job inside :func:`collecting`; an append that reaches the count calls
:func:`flush_due`, which there only notes the log. After the job the worker hands the noted
logs to the dir's flush threads, which fsync them concurrently, and settles the job once they
are done: the caller still gets its answer after its fsync (or the fsync's error), and the
worker has gone on with the next job meanwhile. A segment roll calls :func:`flush_soon`: its
flush runs on the same threads, after the awaited ones, and nothing waits for it. Outside a
worker (tests, tools, start-up) both flush inline, as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

_tls = threading.local()


@dataclass
class Noted:
    """What one job left to flush: ``due`` before its answer, ``soon`` in the background."""
    due: list[Any] = field(default_factory=list)
    soon: list[Any] = field(default_factory=list)


@contextmanager
def collecting() -> Iterator[Noted]:
    """Within the block, :func:`flush_due` and :func:`flush_soon` note logs instead of flushing."""
    noted = Noted()
    outer = getattr(_tls, "noted", None)
    _tls.noted = noted
    try:
        yield noted
    finally:
        _tls.noted = outer


def flush_due(plog: Any) -> None:
    """``plog`` reached its flush count (its lock held by the caller): flush it now, or note it
    for the worker running this job, which answers the job after the flush."""
    noted = getattr(_tls, "noted", None)
    if noted is None:
        plog.flush()
        return
    noted.soon[:] = [p for p in noted.soon if p is not plog]
    if not any(p is plog for p in noted.due):
        noted.due.append(plog)


def flush_soon(plog: Any) -> None:
    """``plog`` rolled: its old segment and the new file's dir entry want an fsync that no
    answer waits for (Kafka flushes a rolled segment asynchronously too; the appends it holds
    were answered under their own flush policy). Now, or in the background of the job."""
    noted = getattr(_tls, "noted", None)
    if noted is None:
        plog.flush()
    elif not any(p is plog for p in noted.due) and not any(p is plog for p in noted.soon):
        noted.soon.append(plog)
