"""Log dir state: which data dirs exist, which are online, and what a storage error does.

``LogDirs`` knows the broker's data dirs (id, path, online at start) and the metadata dir.
:meth:`LogDirs.on_storage_error` is the single entry for every ``OSError`` on a dir
(an I/O error takes the dir offline): the first report marks the dir offline and decides
between a graceful report to the controller and a halt; later reports are ignored.

The partition-level part of the handler (stop fetchers, mark partitions offline) belongs to
the replica manager; :class:`broker_impl.state.core.BrokerCore` runs both in Kafka's order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from broker_impl.state.effects import Halt, MarkDirOffline, ReportDirFailure, event
from kafka_common.ids import halves, is_reserved, to_base64


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    dir_id: uuid.UUID
    path: str
    online: bool = True


def sort_dir_ids(ids) -> tuple[uuid.UUID, ...]:
    """Kafka's Uuid order: signed compare of msb, then lsb."""
    return tuple(sorted(ids, key=halves))


class LogDirs:
    """Data dirs of one broker process. ``metadata_dir_id`` may be one of the data dirs
    (Kafka's default: the first of ``log.dirs``) or a separate dir (``metadata_dir_path``
    names it in the halt reason).

    ``unidentified_offline``: paths of configured data dirs that were offline at start-up
    with no readable identity (EIO on ``meta.properties``, unmountable, not a directory).
    They have no id, so they are not in the registration and no heartbeat can name them, but
    they are offline dirs of this broker: :attr:`any_offline` counts them, so a replica the
    metadata places in a dir id this broker does not know is never re-created in another dir
    while one of them is missing (the KIP's "unknown dir and any dir offline: do nothing";
    Kafka's ``hasOfflineLogDirs`` since KAFKA-16234)."""

    def __init__(self, dirs: list[LogDirInfo] | tuple[LogDirInfo, ...], metadata_dir_id: uuid.UUID | None,
                 metadata_dir_path: str | None = None, unidentified_offline: tuple[str, ...] = ()) -> None:
        if not dirs:
            raise ValueError("log.dirs: at least one log directory is required")
        seen: dict[uuid.UUID, str] = {}
        for d in dirs:
            if is_reserved(d.dir_id):
                raise ValueError(f"log dir {d.path}: reserved directory.id {d.dir_id}")
            if d.dir_id in seen:
                raise ValueError(f"duplicate directory.id {d.dir_id} in {seen[d.dir_id]} and {d.path}")
            seen[d.dir_id] = d.path
        self._order: tuple[uuid.UUID, ...] = tuple(d.dir_id for d in dirs)
        self._paths: dict[uuid.UUID, str] = {d.dir_id: d.path for d in dirs}
        self._offline: dict[uuid.UUID, None] = {d.dir_id: None for d in dirs if not d.online}
        self.metadata_dir_id = metadata_dir_id
        self.metadata_dir_path = metadata_dir_path
        self.unidentified_offline: tuple[str, ...] = tuple(unidentified_offline)
        # Registration LogDirs: every data dir whose id is known at start, fixed for the
        # process. Dirs already offline at start are in it and reported offline by the
        # first heartbeat (an id the controller never saw would fail the heartbeat).
        self.registration_dirs: tuple[uuid.UUID, ...] = sort_dir_ids(self._order)
        # KIP-1066: dirs that take no new replica (``cordoned.log.dirs``), sent in heartbeats
        self.cordoned: frozenset[uuid.UUID] = frozenset()

    def cordon_paths(self, paths, norm=lambda p: p.rstrip("/") or "/") -> list[str]:
        """Set :attr:`cordoned` from ``cordoned.log.dirs`` paths (``*``: every dir), each
        compared after ``norm`` (the runtime passes ``os.path.normpath``); returns the paths
        that are not data dirs of this broker (nothing is set then)."""
        by_path = {norm(p): d for d, p in self._paths.items()}
        paths = [p for p in paths if p]
        if paths == ["*"]:
            self.cordoned = frozenset(self._order)
            return []
        unknown = [p for p in paths if norm(p) not in by_path]
        if not unknown:
            self.cordoned = frozenset(by_path[norm(p)] for p in paths)
        return unknown

    # ------------------------------------------------------------------ queries
    @property
    def configured(self) -> tuple[uuid.UUID, ...]:
        """All data dir ids in configured order."""
        return self._order

    def path(self, dir_id: uuid.UUID) -> str:
        return self._paths[dir_id]

    def is_known(self, dir_id: uuid.UUID) -> bool:
        return dir_id in self._paths

    def is_online(self, dir_id: uuid.UUID) -> bool:
        return dir_id in self._paths and dir_id not in self._offline

    @property
    def online(self) -> tuple[uuid.UUID, ...]:
        """Online dirs in configured order."""
        return tuple(d for d in self._order if d not in self._offline)

    @property
    def offline(self) -> tuple[uuid.UUID, ...]:
        """Offline dirs in the order they went offline (start-up offline dirs first)."""
        return tuple(self._offline)

    @property
    def any_offline(self) -> bool:
        """Some configured data dir is offline: failed since start, offline at start, or
        unreadable at start (no id)."""
        return bool(self._offline) or bool(self.unidentified_offline)

    def start_check(self) -> list:
        """Effects at start-up: halt if no dir is usable or the metadata dir is offline;
        else report each dir that is offline already."""
        if not self.online:
            return [event("halt", reason="no log dir is online at start-up"),
                    Halt("none of the configured log dirs is online at start-up")]
        if self.metadata_dir_id is not None and self.metadata_dir_id in self._offline:
            return [event("halt", reason="metadata log dir offline at start-up"),
                    Halt(f"the metadata log dir {self._paths[self.metadata_dir_id]} is offline at start-up")]
        return [ReportDirFailure(d) for d in self._offline]

    # ------------------------------------------------------------------ the handler
    def on_storage_error(self, dir_id: uuid.UUID, errno: int, op: str) -> list:
        """An OSError on ``dir_id``. Returns [] if the dir is already offline (report once).

        Effects: MarkDirOffline + dir_offline event, then either Halt (the metadata dir,
        the last online dir, or a single-dir broker) or ReportDirFailure."""
        if dir_id == self.metadata_dir_id and dir_id not in self._paths:
            named = f" {self.metadata_dir_path}" if self.metadata_dir_path else ""
            reason = f"the metadata log dir{named} failed ({op}: errno {errno})"
            return [event("halt", reason=reason, dir_id=to_base64(dir_id)), Halt(reason)]
        if dir_id not in self._paths:
            raise ValueError(f"storage error on unknown directory id {dir_id} (op {op}, errno {errno})")
        if dir_id in self._offline:
            return []
        self._offline[dir_id] = None
        path = self._paths[dir_id]
        out: list = [MarkDirOffline(dir_id),
                     event("dir_offline", dir_id=to_base64(dir_id), path=path, errno=errno, op=op)]
        reason = None
        if len(self._order) + len(self.unidentified_offline) == 1:
            reason = f"the only log dir {path} failed ({op}: errno {errno})"
        elif dir_id == self.metadata_dir_id:
            reason = f"the metadata log dir {path} failed ({op}: errno {errno})"
        elif not self.online:
            reason = f"all log dirs have failed, the last was {path} ({op}: errno {errno})"
        if reason is not None:
            out += [event("halt", reason=reason, dir_id=to_base64(dir_id)), Halt(reason)]
        else:
            out.append(ReportDirFailure(dir_id))
        return out
