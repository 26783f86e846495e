"""`kraft-storage`: format log dirs, show them, make ids.

    kraft-storage format -c server.properties --cluster-id ID [--ignore-formatted]
    kraft-storage info -c server.properties
    kraft-storage random-uuid

``format`` writes ``meta.properties`` (version=1, node.id, cluster.id, a fresh random
non-reserved ``directory.id``, distinct per dir) into every dir of ``log.dirs`` plus
``metadata.log.dir``, atomically (temp file + fsync + rename + dir fsync). A dir that already
has a ``meta.properties`` is an error unless ``--ignore-formatted`` (then it is left as is
and only the others are written). Nothing is written unless every dir can be formatted.
Exit status: 0 ok, 1 a storage problem (message names the dir), 2 bad arguments/config.
"""

from __future__ import annotations

if __name__ == "__main__":
    # kio registers hypothesis strategies for its types whenever it can import hypothesis: in
    # the test venv that was ~0.7 s of every node process's start (1.95 → 1.25 s measured), and
    # a node never uses them (the node image has no hypothesis at all)
    import sys as _sys
    _sys.modules.setdefault("hypothesis", None)

import argparse
import os
import random
import sys
import uuid
from dataclasses import dataclass

from kafka_common import ids, meta_properties
from kafka_common.meta_properties import MetaProperties, MetaPropertiesError
from kafka_runtime import fsutil
from kafka_runtime.errors import KafkaRuntimeError
from kafka_runtime.properties import ConfigLoadError, load_config

PROG = "kraft-storage"


class StorageToolError(KafkaRuntimeError):
    """A dir that cannot be formatted or read; the message names it."""


@dataclass(frozen=True)
class DirState:
    path: str
    state: str  # formatted | unformatted | missing | error
    meta: MetaProperties | None = None
    error: str = ""


def read_dir(path: str) -> DirState:
    file = os.path.join(path, meta_properties.FILE_NAME)
    if not os.path.isdir(path):
        return DirState(path, "missing")
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return DirState(path, "unformatted")
    except OSError as exc:
        return DirState(path, "error", error=f"cannot read {file}: {exc.strerror or exc}")
    try:
        return DirState(path, "formatted", meta=meta_properties.parse(text, source=file))
    except MetaPropertiesError as exc:
        return DirState(path, "error", error=str(exc))


def format_dirs(dirs: tuple[str, ...], *, node_id: int, cluster_id: str, ignore_formatted: bool,
                rng: random.Random | None = None) -> list[tuple[str, uuid.UUID]]:
    """Format every dir; returns [(path, directory_id)] of the dirs written."""
    try:
        ids.from_base64(cluster_id)
    except ids.InvalidUuid as exc:
        raise StorageToolError(f"--cluster-id: {exc}") from None
    rng = rng or random.SystemRandom()
    states = [read_dir(d) for d in dirs]
    used: set = set()
    for st in states:
        if st.state == "formatted" and not ignore_formatted:
            raise StorageToolError(f"{st.path}: already formatted (use --ignore-formatted to skip it)")
        if st.state == "error" and not ignore_formatted:
            raise StorageToolError(f"{st.path}: {st.error}")
        if st.state == "formatted" and st.meta and st.meta.directory_id is not None:
            used.add(st.meta.directory_id)
    todo = [st.path for st in states if st.state in ("missing", "unformatted")]
    written = []
    for path in todo:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise StorageToolError(f"{path}: cannot create directory: {exc.strerror or exc}") from None
    for path in todo:
        dir_id = ids.random_directory_id(rng)
        while dir_id in used:
            dir_id = ids.random_directory_id(rng)
        used.add(dir_id)
        mp = MetaProperties(node_id=node_id, cluster_id=cluster_id, directory_id=dir_id)
        try:
            fsutil.atomic_write(os.path.join(path, meta_properties.FILE_NAME),
                                meta_properties.render(mp).encode())
        except OSError as exc:
            raise StorageToolError(f"{path}: cannot write meta.properties: {exc.strerror or exc}") from None
        written.append((path, dir_id))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="format and inspect KRaft log dirs")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = sub.add_parser("format", help="write meta.properties into log.dirs and metadata.log.dir")
    fmt.add_argument("-c", "--config", required=True, help="server.properties")
    fmt.add_argument("-t", "--cluster-id", required=True, help="cluster id (kraft-storage random-uuid)")
    fmt.add_argument("-g", "--ignore-formatted", action="store_true",
                     help="skip dirs that are already formatted instead of failing")
    info = sub.add_parser("info", help="show each dir's path, directory.id and state")
    info.add_argument("-c", "--config", required=True)
    sub.add_parser("random-uuid", help="print a random Kafka uuid")
    args = parser.parse_args(argv)

    if args.command == "random-uuid":
        print(ids.to_base64(ids.random_uuid(random.SystemRandom())))
        return 0
    try:
        cfg = load_config(args.config, warn=lambda m: print(f"{PROG}: {m}", file=sys.stderr))
    except ConfigLoadError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    dirs = cfg.all_dirs()
    if not dirs:
        print(f"{PROG}: {args.config}: no log.dirs or metadata.log.dir to format", file=sys.stderr)
        return 2
    if args.command == "format":
        try:
            written = format_dirs(dirs, node_id=cfg.node_id, cluster_id=args.cluster_id,
                                  ignore_formatted=args.ignore_formatted)
        except StorageToolError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2 if str(exc).startswith("--cluster-id") else 1
        for path, dir_id in written:
            print(f"Formatting {path} with directory.id {ids.to_base64(dir_id)}")
        skipped = len(dirs) - len(written)
        if skipped:
            print(f"Skipped {skipped} already formatted dir(s)")
        return 0
    # info
    bad = 0
    for d in dirs:
        st = read_dir(d)
        if st.state == "formatted" and st.meta is not None:
            did = ids.to_base64(st.meta.directory_id) if st.meta.directory_id else "(none)"
            print(f"{st.path}\tdirectory.id={did}\tnode.id={st.meta.node_id}\t"
                  f"cluster.id={st.meta.cluster_id}\tstate=formatted")
        else:
            bad += st.state == "error"
            print(f"{st.path}\tdirectory.id=-\tstate={st.state}" + (f"\terror={st.error}" if st.error else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
