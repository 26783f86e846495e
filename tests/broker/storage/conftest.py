"""Fixtures of the storage tests: formatted log dirs, a failure recorder, and a real ext4 file
system on a loop device that can be shut down (every later I/O fails with EIO)."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from kafka_common import ids, meta_properties as mp
from loopdev import loop_fs, loop_fs_factory  # noqa: F401  (fixtures: one loop fs, 32 MiB)
from kafka_runtime import fsutil

CLUSTER_ID = ids.to_base64(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF))
NODE_ID = 1


class FailureRecorder:
    """The ``on_failure(dir_path, errno, op)`` callback, recording every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def __call__(self, dir_path: str, errno: int, op: str) -> None:
        self.calls.append((dir_path, errno, op))


@pytest.fixture
def failures() -> FailureRecorder:
    return FailureRecorder()


def format_dir(path: str, *, node_id: int = NODE_ID, cluster_id: str = CLUSTER_ID,
               directory_id: uuid.UUID | None | str = "random", rng: random.Random | None = None) -> uuid.UUID | None:
    os.makedirs(path, exist_ok=True)
    if directory_id == "random":
        directory_id = ids.random_directory_id(rng or random.Random(path))
    fsutil.atomic_write(os.path.join(path, mp.FILE_NAME),
                        mp.render(mp.MetaProperties(node_id=node_id, cluster_id=cluster_id,
                                                    directory_id=directory_id)).encode())
    return directory_id


@pytest.fixture
def log_dirs(tmp_path):
    """Three formatted data dirs (the first is also the metadata dir)."""
    paths = [str(tmp_path / f"d{i}") for i in range(3)]
    for p in paths:
        format_dir(p)
    return paths
