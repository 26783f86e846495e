"""Broker start-up rules for the log dir set (Kafka's ``initializeLogDirs``).

``load_log_dirs(log_dirs, metadata_log_dir, node_id, rng, cluster_id=None) -> LogDirSet``
reads every ``meta.properties`` and either returns the dir set or raises
:class:`LogDirStartupError` with a message naming the dir and the problem:

* duplicate ``directory.id`` between two dirs; a reserved ``directory.id``;
* ``node.id`` ≠ the configured node id; ``cluster.id`` differing between dirs (or from the
  configured ``cluster.id`` when one is given);
* a readable data dir with no ``meta.properties`` ("run kraft-storage format");
* an unreadable metadata dir; no readable dir at all; the same dir listed twice;
* a ``__cluster_metadata-0`` dir in a data dir that is not the metadata dir.

A file without ``directory.id`` gets a fresh random non-reserved id (``rng`` injected; never
equal to another dir's id) and is rewritten atomically; if the rewrite fails start-up fails.
A data dir whose ``meta.properties`` cannot be read (I/O error, not a directory, or a file
that does not parse — Kafka's "error dir") is **not** fatal: it is returned offline, without
an id, and is not part of the registration's ``LogDirs``.
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from dataclasses import dataclass

from kafka_common import ids, meta_properties as mp
from kafka_runtime import fsutil
from broker_impl.storage.errors import LogDirStartupError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    path: str                      # absolute path
    directory_id: uuid.UUID | None  # None only for dirs offline at start
    online: bool
    is_metadata_dir: bool
    is_data_dir: bool              # listed in log.dirs
    reason: str = ""               # why it is offline


@dataclass(frozen=True, slots=True)
class LogDirSet:
    dirs: tuple[LogDirInfo, ...]   # log.dirs in configured order, then a separate metadata dir
    cluster_id: str
    node_id: int
    rewritten: tuple[str, ...] = ()  # dirs whose meta.properties got a generated directory.id

    @property
    def data_dirs(self) -> tuple[LogDirInfo, ...]:
        return tuple(d for d in self.dirs if d.is_data_dir)

    @property
    def online_data_dirs(self) -> tuple[LogDirInfo, ...]:
        return tuple(d for d in self.dirs if d.is_data_dir and d.online)

    @property
    def offline_at_start(self) -> tuple[LogDirInfo, ...]:
        return tuple(d for d in self.dirs if not d.online)

    @property
    def metadata_dir(self) -> LogDirInfo:
        return next(d for d in self.dirs if d.is_metadata_dir)

    def registration_dir_ids(self) -> list[uuid.UUID]:
        """``LogDirs`` of BrokerRegistration: ids of the data dirs online at start, sorted as
        Kafka sorts Uuids (signed msb, then signed lsb)."""
        return sorted((d.directory_id for d in self.online_data_dirs if d.directory_id is not None),
                      key=ids.halves)

    def id_of(self, path: str) -> uuid.UUID | None:
        path = os.path.abspath(path)
        return next((d.directory_id for d in self.dirs if d.path == path), None)

    def path_of(self, dir_id: uuid.UUID) -> str | None:
        return next((d.path for d in self.dirs if d.directory_id == dir_id), None)


@dataclass(slots=True)
class _Read:
    path: str
    props: mp.MetaProperties | None = None
    missing: bool = False
    error: str = ""


def _read_one(path: str) -> _Read:
    file = os.path.join(path, mp.FILE_NAME)
    try:
        with open(file, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if os.path.isdir(path) or not os.path.exists(path):
            return _Read(path, missing=True)
        return _Read(path, error=f"{path} is not a directory")
    except OSError as exc:
        return _Read(path, error=f"cannot read {file}: {exc.strerror or exc} (errno {exc.errno})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _Read(path, error=f"{file} is not UTF-8 text")
    try:
        props = mp.parse(text, source=file)
    except mp.MetaPropertiesError as exc:
        dir_text = _raw_dir_id(text)
        if dir_text is not None:
            try:
                if ids.is_reserved(ids.from_base64(dir_text)):
                    raise LogDirStartupError(f"Invalid reserved directory.id {dir_text} in {file}") from None
            except ids.InvalidUuid:
                pass
        return _Read(path, error=f"{file} is invalid: {exc}")
    return _Read(path, props=props)


def _raw_dir_id(text: str) -> str | None:
    try:
        return mp.parse_properties(text).get("directory.id")
    except mp.MetaPropertiesError:
        return None


def load_log_dirs(log_dirs: list[str] | tuple[str, ...], metadata_log_dir: str, node_id: int,
                  rng: random.Random, cluster_id: str | None = None) -> LogDirSet:
    if not log_dirs:
        raise LogDirStartupError("log.dirs is empty: you must specify at least one log directory")
    data = [os.path.abspath(p) for p in log_dirs]
    if len(set(data)) != len(data):
        dup = next(p for p in data if data.count(p) > 1)
        raise LogDirStartupError(f"Duplicate log directory found: {dup} is listed twice in log.dirs")
    meta_dir = os.path.abspath(metadata_log_dir or log_dirs[0])
    all_dirs = data + ([meta_dir] if meta_dir not in data else [])
    reads = {p: _read_one(p) for p in all_dirs}

    if reads[meta_dir].error:
        raise LogDirStartupError(f"Encountered I/O error in metadata log directory {meta_dir}. Cannot continue: "
                                 f"{reads[meta_dir].error}")
    normal = [r for r in (reads[p] for p in sorted(all_dirs)) if r.props is not None]
    if not normal:
        raise LogDirStartupError("No readable meta.properties files found in " + ", ".join(all_dirs))
    expected_cluster = cluster_id or None
    seen_ids: dict[uuid.UUID, str] = {}
    for r in normal:
        p = r.props
        assert p is not None
        if expected_cluster is None:
            expected_cluster = p.cluster_id
        elif p.cluster_id != expected_cluster:
            raise LogDirStartupError(f"Invalid cluster.id in: {r.path}/meta.properties. Expected {expected_cluster}, "
                                     f"but read {p.cluster_id}")
        if p.node_id != node_id:
            raise LogDirStartupError(f"Stored node id {p.node_id} in {r.path}/meta.properties doesn't match the "
                                     f"configured node.id {node_id}")
        if p.directory_id is not None:
            if p.directory_id in seen_ids:
                raise LogDirStartupError(f"Duplicate directory ID {ids.to_base64(p.directory_id)}: it is the "
                                         f"directory.id of {seen_ids[p.directory_id]} and of {r.path}")
            seen_ids[p.directory_id] = r.path
    for p in all_dirs:
        if reads[p].missing:
            raise LogDirStartupError(f"No meta.properties found in {p} (have you run `kraft-storage format` "
                                     f"to format the directory?)")

    for p in all_dirs:
        if p != meta_dir and reads[p].props is not None and os.path.isdir(os.path.join(p, ids.METADATA_TOPIC + "-0")):
            raise LogDirStartupError(f"Found unexpected metadata location in data directory {p} (the metadata "
                                     f"log dir is {meta_dir})")

    rewritten = []
    infos = []
    for p in all_dirs:
        r = reads[p]
        is_meta, is_data = p == meta_dir, p in data
        if r.props is None:
            log.error("log dir %s is offline at start-up: %s", p, r.error)
            infos.append(LogDirInfo(p, None, False, is_meta, is_data, r.error))
            continue
        dir_id = r.props.directory_id
        if dir_id is None:
            dir_id = _fresh_id(rng, set(seen_ids))
            seen_ids[dir_id] = p
            _rewrite(p, mp.MetaProperties(node_id=r.props.node_id, cluster_id=r.props.cluster_id,
                                          directory_id=dir_id, version=r.props.version))
            rewritten.append(p)
        infos.append(LogDirInfo(p, dir_id, True, is_meta, is_data))
    assert expected_cluster is not None
    return LogDirSet(dirs=tuple(infos), cluster_id=expected_cluster, node_id=node_id, rewritten=tuple(rewritten))


def _fresh_id(rng: random.Random, taken: set[uuid.UUID]) -> uuid.UUID:
    for _ in range(1000):
        value = ids.random_directory_id(rng)
        if value not in taken:
            return value
    raise LogDirStartupError("could not generate a unique directory.id")  # only with a broken rng


def _rewrite(path: str, props: mp.MetaProperties) -> None:
    file = os.path.join(path, mp.FILE_NAME)
    log.info("Rewriting %s (generated directory.id %s)", file, ids.to_base64(props.directory_id))
    try:
        fsutil.atomic_write(file, mp.render(props).encode())
    except OSError as exc:
        raise LogDirStartupError(f"Error while writing {file} with a generated directory.id: {exc}") from exc
