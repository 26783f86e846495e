"""Retention and DeleteRecords on real segment files: segments deleted by size and by time
(only below the high watermark; the active segment rolled first when it goes too), the log
start offset moved, persisted in ``log-start-offset-checkpoint`` and restored at load; reads
below it are OFFSET_OUT_OF_RANGE. A real EIO while deleting (ext4 loop device shut down)
goes through the dir failure channel once, as op ``retention``, and nothing crashes."""

from __future__ import annotations

import errno
import glob
import os
import random
import uuid

import pytest

from kafka_common.clock import ManualClock
from broker_impl.storage.errors import OffsetOutOfRange
from broker_impl.storage.log_manager import LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.startup import load_log_dirs
from conftest import NODE_ID, format_dir
from testkit.protocol import make_batch

pytestmark = pytest.mark.integration
TID = uuid.UUID(int=9 << 90)
NOW = 1_800_000_000_000


def _batch(ts: int) -> bytes:
    return make_batch([b"v" * 200, b"w" * 200], base_timestamp=ts - 1)  # max timestamp = ts


def _open(paths, failures, cfg):
    dir_set = load_log_dirs(paths, paths[0], NODE_ID, random.Random(5))
    return LogManager.open(dir_set, cfg, on_failure=failures, now_ms=ManualClock().monotonic_ms)


def _segments(log) -> list[int]:
    return sorted(int(os.path.basename(p)[:20]) for p in glob.glob(os.path.join(log.path, "*.log")))


@pytest.fixture
def paths(tmp_path):
    out = [str(tmp_path / "d0")]
    for p in out:
        format_dir(p)
    return out


def test_retention_by_size_and_time_moves_log_start_and_survives_restart(paths, failures):
    cfg = LogConfig(segment_bytes=len(_batch(0)) * 2, retention_ms=-1, retention_bytes=-1)
    lm = _open(paths, failures, cfg)
    limits = {"t": cfg}
    lm.config_for = lambda topic: limits[topic]
    log = lm.get_or_create_log(TID, "t", 0, paths[0])
    for i in range(10):
        log.append_as_leader(_batch(NOW - 10_000 + i), 0)
    assert _segments(log) == [0, 4, 8, 12, 16]
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=100) == (0, [])  # no limits
    limits["t"] = LogConfig(segment_bytes=cfg.segment_bytes, retention_bytes=3 * cfg.segment_bytes, retention_ms=-1)
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=100) == (0, [])  # nothing below the HW yet
    log.high_watermark = 20
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=1) == (1, [])    # bounded per round
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=100) == (1, [])
    assert _segments(log) == [8, 12, 16] and log.log_start_offset == 8 and log.config is limits["t"]
    with pytest.raises(OffsetOutOfRange):
        log.read(7, 1000)
    # by time: every batch is older than 5 s → all segments go, the active one after a roll
    limits["t"] = LogConfig(segment_bytes=cfg.segment_bytes, retention_ms=5_000)
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=100) == (3, [])
    assert _segments(log) == [20] and log.log_start_offset == log.log_end_offset == 20
    log.append_as_leader(_batch(NOW), 0)  # a fresh batch stays
    log.high_watermark = 22
    assert lm.enforce_retention(NOW, only_dir=paths[0], max_segments=100) == (0, [])
    lm.close()
    again = _open(paths, failures, cfg)
    back = again.get_log("t", 0)
    assert (back.log_start_offset, back.log_end_offset) == (20, 22)
    again.close()
    assert failures.calls == []


def test_delete_records_inside_a_segment_is_persisted(paths, failures):
    cfg = LogConfig(segment_bytes=len(_batch(0)) * 2)
    lm = _open(paths, failures, cfg)
    log = lm.get_or_create_log(TID, "d", 0, paths[0])
    for i in range(6):
        log.append_as_leader(_batch(NOW), 0)
    log.high_watermark = 12
    assert log.increment_log_start_offset(5) == 5
    assert _segments(log) == [4, 8] and log.log_start_offset == 5
    assert log.increment_log_start_offset(3) == 5  # never backwards
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 1000)
    assert log.read(5, 1000)  # the batch holding 5 (4..5) is still served; clients skip 4
    lm.checkpoint_high_watermarks()  # the log start checkpoint goes with it
    lm.close()
    again = _open(paths, failures, cfg)
    assert again.get_log("d", 0).log_start_offset == 5
    again.close()


@pytest.fixture
def eio_paths(tmp_path, loop_fs):
    good = str(tmp_path / "d0")
    bad = os.path.join(loop_fs.mnt, "d1")
    for p in (good, bad):
        format_dir(p)
    return [good, bad]


def test_eio_while_deleting_segments_takes_the_dir_offline_once(eio_paths, loop_fs, failures):
    good, bad = eio_paths
    cfg = LogConfig(segment_bytes=len(_batch(0)) * 2, retention_ms=1_000)
    lm = _open([good, bad], failures, cfg)
    victim = lm.get_or_create_log(TID, "v", 0, bad)
    survivor = lm.get_or_create_log(TID, "s", 0, good)
    for log in (victim, survivor):
        for _ in range(6):
            log.append_as_leader(_batch(NOW - 60_000), 0)
        log.high_watermark = 12
        log.flush()
    loop_fs.shutdown()
    deleted, failed = lm.enforce_retention(NOW, only_dir=bad, max_segments=100)
    assert (deleted, failed) == (0, [bad])
    assert failures.calls[0][0] == bad and failures.calls[0][1] == errno.EIO and len(failures.calls) == 1
    assert failures.calls[0][2] in ("retention", "roll", "delete_segments")
    assert lm.enforce_retention(NOW, only_dir=bad, max_segments=100) == (0, [])  # offline: skipped
    assert lm.enforce_retention(NOW, only_dir=good, max_segments=100)[0] == 3      # the other dir goes on
    assert survivor.log_start_offset == 12
    lm.mark_offline(bad)
    lm.close()
    assert len(failures.calls) == 1
