"""Snapshot files of the metadata image beside the log:
``__cluster_metadata-0/<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` (Kafka's
naming), each written whole (temp + fsync + rename + dir fsync). The newest two are kept.
The bytes are ``kafka_common.metadata.snapshot``'s; FetchSnapshot serves them as they are.
"""

from __future__ import annotations

import os

from kafka_runtime.fsutil import atomic_write

SUFFIX = ".checkpoint"
KEEP = 2


def file_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}{SUFFIX}"


class SnapshotStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        for n in os.listdir(directory):  # an interrupted write
            if n.endswith(SUFFIX + ".tmp"):
                os.unlink(os.path.join(directory, n))

    def ids(self) -> list[tuple[int, int]]:
        """(end offset, epoch) of every snapshot, oldest first."""
        out = []
        for n in os.listdir(self.directory):
            if n.endswith(SUFFIX):
                head = n[:-len(SUFFIX)]
                end, dash, epoch = head.partition("-")
                if dash and end.isdigit() and epoch.isdigit():
                    out.append((int(end), int(epoch)))
        return sorted(out)

    def latest(self) -> tuple[int, int] | None:
        ids = self.ids()
        return ids[-1] if ids else None

    def path(self, snapshot_id: tuple[int, int]) -> str:
        return os.path.join(self.directory, file_name(*snapshot_id))

    def read(self, snapshot_id: tuple[int, int]) -> bytes:
        with open(self.path(snapshot_id), "rb") as f:
            return f.read()

    def size(self, snapshot_id: tuple[int, int]) -> int:
        return os.path.getsize(self.path(snapshot_id))

    def read_range(self, snapshot_id: tuple[int, int], position: int, max_bytes: int) -> bytes:
        with open(self.path(snapshot_id), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def write(self, snapshot_id: tuple[int, int], data: bytes) -> None:
        atomic_write(self.path(snapshot_id), data)
        for old in self.ids()[:-KEEP]:
            try:
                os.unlink(self.path(old))
            except FileNotFoundError:
                pass
