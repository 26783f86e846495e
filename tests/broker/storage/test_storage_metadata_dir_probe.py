"""The health probe covers a metadata.log.dir that is NOT one of log.dirs (the lab's layout:
every dir its own disk): its failure takes the one failure path (on_failure(path, errno,
"probe")), so the broker core can halt."""

from __future__ import annotations

import errno
import os
import random

import pytest

from kafka_common.clock import ManualClock
from broker_impl.storage.log_manager import LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.probe import PROBE_FILE
from broker_impl.storage.startup import load_log_dirs
from conftest import NODE_ID, format_dir

pytestmark = pytest.mark.integration


def _open(data, meta, failures):
    dirs = load_log_dirs(data, meta, NODE_ID, random.Random(1))
    return LogManager.open(dirs, LogConfig(), on_failure=failures, now_ms=ManualClock().monotonic_ms)


def test_separate_metadata_dir_is_probed_and_its_failure_reported(log_dirs, tmp_path, failures):
    meta = str(tmp_path / "meta")
    format_dir(meta)
    lm = _open(log_dirs, meta, failures)
    assert lm.probe_targets() == [*log_dirs, meta]
    assert lm.probe_all() == [] and failures.calls == []
    assert os.path.getsize(os.path.join(meta, PROBE_FILE)) == 4096     # written + fsynced there too
    # a real OSError on the metadata dir: its probe file cannot be opened for writing
    os.unlink(os.path.join(meta, PROBE_FILE))
    os.mkdir(os.path.join(meta, PROBE_FILE))
    assert lm.probe_all() == [meta]
    assert failures.calls == [(meta, errno.EISDIR, "probe")]
    assert lm.online_dirs() == log_dirs                                  # the data dirs are untouched
    assert lm.probe_targets() == log_dirs and lm.probe_all() == []       # reported once, not re-probed
    lm.close()


def test_metadata_dir_in_log_dirs_is_probed_once(log_dirs, failures):
    lm = _open(log_dirs, log_dirs[1], failures)
    assert lm.probe_targets() == log_dirs
    lm.close()
