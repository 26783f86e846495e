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
worker has gone on with the next job meanwhile. Outside a worker (tests, tools, start-up)
:func:`flush_due` flushes inline, as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

_tls = threading.local()


@contextmanager
def collecting() -> Iterator[list[Any]]:
    """Within the block, :func:`flush_due` notes logs in the yielded list instead of flushing."""
    due: list[Any] = []
    outer = getattr(_tls, "due", None)
    _tls.due = due
    try:
        yield due
    finally:
        _tls.due = outer


def flush_due(plog: Any) -> None:
    """``plog`` reached its flush count (its lock held by the caller): flush it now, or note it
    for the worker running this job."""
    due = getattr(_tls, "due", None)
    if due is None:
        plog.flush()
    elif not any(p is plog for p in due):
        due.append(plog)
