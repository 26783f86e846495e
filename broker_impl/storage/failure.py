"""The one path every OSError on a log dir takes (Kafka's LogDirFailureChannel).

Usage inside the storage layer::

    with channel.io(dir_path, "append"):
        os.write(fd, data)

* If ``dir_path`` is already offline, :class:`KafkaStorageError` is raised at once and the
  body never runs (no further writes to a failed dir).
* An ``OSError`` from the body marks the dir offline, calls ``on_failure(dir_path, errno, op)``
  — **once per dir**, the first failure only — and re-raises as :class:`KafkaStorageError`.

``on_failure`` runs synchronously in the thread that hit the error, possibly while a
partition lock is held: it must only record/schedule (e.g. ``loop.call_soon_threadsafe``),
never block or call back into a log. :func:`failure_callback_by_id` (the log manager's) maps the
path to the directory id at this edge; the broker runtime feeds the pure core
``on_storage_error(dir_id, errno, op)``.

Dirs that were unreadable at start-up are registered with :meth:`mark_offline_at_start`:
they are offline but never reported through ``on_failure`` (Kafka does not report them
either; the controller never saw their id).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from broker_impl.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from broker_impl.storage.startup import LogDirSet

OnFailure = Callable[[str, int, str], None]
log = logging.getLogger(__name__)

# Operation names used in on_failure(dir, errno, op) and in KafkaStorageError.op.
OPS = ("append", "fsync", "roll", "read", "index", "checkpoint", "create_log", "delete_log",
       "truncate", "load", "lock", "probe", "epoch_checkpoint", "partition_metadata", "close")


class DirFailureChannel:
    """Per-dir offline state plus the once-per-dir failure callback."""

    def __init__(self, on_failure: OnFailure | None = None) -> None:
        self._on_failure = on_failure
        self._offline: dict[str, tuple[int | None, str]] = {}
        self._lock = threading.Lock()

    def is_offline(self, dir_path: str) -> bool:
        return dir_path in self._offline

    def offline_dirs(self) -> dict[str, tuple[int | None, str]]:
        """dir path → (errno, op) of the failure that took it offline."""
        with self._lock:
            return dict(self._offline)

    def mark_offline_at_start(self, dir_path: str) -> None:
        with self._lock:
            self._offline.setdefault(dir_path, (None, "startup"))

    def report(self, dir_path: str, errno: int, op: str, exc: BaseException | None = None) -> bool:
        """Mark ``dir_path`` offline; True (and the callback fired) if this was the first report."""
        with self._lock:
            first = dir_path not in self._offline
            if first:
                self._offline[dir_path] = (errno, op)
        log.error("log dir %s: I/O error during %s (errno %s)%s%s", dir_path, op, errno,
                  ": " if exc else "", exc or "")
        if first and self._on_failure is not None:
            self._on_failure(dir_path, errno, op)
        return first

    def check(self, dir_path: str, op: str) -> None:
        if dir_path in self._offline:
            raise KafkaStorageError(dir_path, None, op)

    @contextlib.contextmanager
    def io(self, dir_path: str, op: str) -> Iterator[None]:
        if dir_path in self._offline:
            raise KafkaStorageError(dir_path, None, op)
        try:
            yield
        except OSError as exc:
            errno = exc.errno if exc.errno is not None else 5  # EIO when the OS gave none
            self.report(dir_path, errno, op, exc)
            raise KafkaStorageError(dir_path, errno, op, str(exc)) from exc


@dataclass(frozen=True, slots=True)
class DirFailure:
    """The first OSError on a dir, as it leaves the storage layer: the directory id (None
    for a dir that has none, e.g. a separate metadata dir without meta.properties); the
    path only for messages and events."""
    dir_id: uuid.UUID | None
    path: str
    errno: int
    op: str


def failure_callback_by_id(dir_set: LogDirSet, on_failure: Callable[[DirFailure], None]) -> OnFailure:
    """The storage edge: ``on_failure(path, errno, op)`` of the channel → ``on_failure(DirFailure)``
    with the dir's id (mapped here, once)."""
    def report(dir_path: str, errno: int, op: str) -> None:
        on_failure(DirFailure(dir_set.id_of(dir_path), dir_path, errno, op))
    return report
