"""REAL EIO: one log dir on an ext4 loop device that is shut down (EXT4_IOC_SHUTDOWN,
NOLOGFLUSH), so every later I/O on it fails with EIO. Each storage operation reports the dir
through on_failure exactly once with the right op; the other dirs keep working."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import uuid

import pytest

from kafka_common.clock import ManualClock
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.log_manager import LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.probe import probe
from broker_impl.storage.startup import load_log_dirs
from conftest import NODE_ID, format_dir
from storage_batches import headers, make_batch

pytestmark = pytest.mark.integration
TID = uuid.UUID(int=7 << 90)
BATCH = make_batch(2, 200)


@pytest.fixture
def dirs(tmp_path, loop_fs):
    good = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    bad = os.path.join(loop_fs.mnt, "d2")
    for p in [*good, bad]:
        format_dir(p)
    return good, bad


def _manager(good, bad, failures, config=LogConfig()):
    dir_set = load_log_dirs([*good, bad], good[0], NODE_ID, random.Random(3))
    return dir_set, LogManager.open(dir_set, config, on_failure=failures, now_ms=ManualClock().monotonic_ms)


def test_shutdown_fs_fails_append_fsync_probe_and_reports_once(dirs, loop_fs, failures):
    good, bad = dirs
    dir_set, lm = _manager(good, bad, failures)
    victim = lm.get_or_create_log(TID, "v", 0, bad)
    survivor = lm.get_or_create_log(TID, "s", 0, good[1])
    for _ in range(3):
        victim.append_as_leader(BATCH, 1)
        survivor.append_as_leader(BATCH, 1)
    victim.flush()
    assert probe(bad) is True  # healthy before, and O_DIRECT works on a real ext4 block device

    loop_fs.shutdown()
    with pytest.raises(OSError) as raw:  # the bare probe sees the real EIO
        probe(bad)
    assert raw.value.errno == errno.EIO

    with pytest.raises(KafkaStorageError) as info:
        victim.append_as_leader(BATCH, 1)
    assert (info.value.dir_path, info.value.errno, info.value.op, info.value.error_code) == (bad, errno.EIO, "append", 56)
    assert failures.calls == [(bad, errno.EIO, "append")]
    # later operations on the dir fail at once (nothing written) and report nothing new
    for attempt in (lambda: victim.flush(), lambda: victim.read(0, 1000), lambda: lm.probe_dir(bad),
                    lambda: victim.append_as_leader(BATCH, 1), lambda: lm.get_or_create_log(TID, "n", 0, bad)):
        with pytest.raises(KafkaStorageError) as info:
            attempt()
        assert info.value.errno is None
    assert lm.probe_all() == [] and lm.checkpoint_high_watermarks() == []
    assert failures.calls == [(bad, errno.EIO, "append")]
    assert dir_set.id_of(failures.calls[0][0]) == dir_set.dirs[2].directory_id  # path → dir id for the core

    # the other dirs keep working: writes, fsync, reads, checkpoints, probes, new logs
    assert survivor.append_as_leader(BATCH, 1) == (6, 7)
    survivor.flush()
    assert [h.base_offset for h in headers(survivor.read(0, 1 << 20))] == [0, 2, 4, 6]
    assert lm.get_or_create_log(TID, "n", 1).log_dir in good
    assert lm.online_dirs() == good
    assert lm.mark_offline(bad) == [("v", 0, TID)]
    lm.close()
    assert failures.calls == [(bad, errno.EIO, "append")]


OPS = ["append", "fsync", "roll", "read", "checkpoint", "create_log", "probe", "load", "epoch_checkpoint", "truncate"]


@pytest.mark.parametrize("op", OPS)
def test_each_operation_reports_its_op(dirs, loop_fs, failures, op):
    good, bad = dirs
    cfg = LogConfig(segment_bytes=len(BATCH) * 2 + 1)
    dir_set, lm = _manager(good, bad, failures, cfg)
    log = lm.get_or_create_log(TID, "v", 0, bad)
    log.append_as_leader(BATCH, 1)
    if op == "roll":
        log.append_as_leader(BATCH, 1)  # the segment is full: the next append rolls
    if op == "truncate":
        log.append_as_leader(BATCH, 1)
        log.append_as_leader(BATCH, 1)  # a second segment, so truncation deletes a file
    if op == "load":
        lm.close()
    if op == "epoch_checkpoint":
        log.flush()     # only the new epoch entry is left for the flush to write (KAFKA-15046)
    loop_fs.shutdown()
    calls = {
        "append": lambda: log.append_as_leader(BATCH, 1),
        "fsync": log.flush,
        "roll": lambda: log.append_as_leader(BATCH, 1),
        "read": lambda: log.read(0, 100),
        "checkpoint": lambda: lm.checkpoint_recovery_points(),
        "create_log": lambda: lm.get_or_create_log(TID, "new", 0, bad),
        "probe": lambda: lm.probe_dir(bad),
        "load": lambda: LogManager.open(dir_set, cfg, on_failure=failures, now_ms=lambda: 0),
        "epoch_checkpoint": lambda: (log.assign_epoch_start_offset(5, log.log_end_offset), log.flush()),
        "truncate": lambda: log.truncate_to(1),
    }
    if op in ("checkpoint", "load"):
        result = calls[op]()
        if op == "checkpoint":
            assert result == [bad]
        else:
            assert result.online_dirs() == good and result.get_log("v", 0) is None
            result.close()
    else:
        with pytest.raises(KafkaStorageError):
            calls[op]()
    # opening a manager on the failed fs fails at its first I/O there: taking the dir lock
    assert failures.calls == [(bad, errno.EIO, "lock" if op == "load" else op)]
    for plog in lm.all_logs():
        plog.close()


def test_read_only_dir_goes_offline_instead_of_crashing_startup(dirs, loop_fs, failures):
    """KAFKA-17310: a dir whose lock cannot be taken (read-only fs) is offline, start-up goes on."""
    good, bad = dirs
    dir_set = load_log_dirs([*good, bad], good[0], NODE_ID, random.Random(3))
    subprocess.run(["mount", "-o", "remount,ro", loop_fs.mnt], check=True, capture_output=True)
    lm = LogManager.open(dir_set, LogConfig(), on_failure=failures, now_ms=lambda: 0)
    assert lm.online_dirs() == good
    assert failures.calls == [(bad, errno.EROFS, "lock")]
    lm.close()
