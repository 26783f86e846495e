"""The committed-prefixes checker over controllers' metadata logs (pure) and the read-only
batch scan that feeds it (real log files)."""

import pytest

from harness.checkers.quorum_logs import check_committed_prefixes

pytestmark = pytest.mark.unit

A = [(0, 0, 1, 11), (1, 4, 1, 12), (5, 5, 2, 13), (6, 9, 2, 14)]


def test_identical_and_lagging_logs_agree():
    r = check_committed_prefixes({1: A, 2: A, 3: A[:2]}, {}, committed=10)
    assert r.valid is True, r
    r = check_committed_prefixes({1: A, 2: A[:3], 3: A[:2]}, {}, committed=5)
    assert r.valid is True


def test_a_different_committed_batch_is_caught():
    other = A[:2] + [(5, 5, 3, 99)]
    r = check_committed_prefixes({1: A, 2: other, 3: A}, {}, committed=10)
    assert r.valid is False and "differ" in r.summary


def test_divergence_above_the_committed_offset_is_fine():
    other = A[:2] + [(5, 5, 3, 99)]
    r = check_committed_prefixes({1: A, 2: other, 3: A[:2]}, {}, committed=5)
    assert r.valid is True


def test_a_committed_offset_on_a_minority_is_lost():
    r = check_committed_prefixes({1: A, 2: A[:2], 3: A[:2]}, {}, committed=10)
    assert r.valid is False and "fewer than 2" in r.summary


def test_a_snapshot_covers_the_offsets_before_it():
    logs = {1: A, 2: A[2:], 3: A[:1]}  # 2's log starts at 5; 3 holds offset 0 only
    assert check_committed_prefixes(logs, {}, committed=10).valid is False  # 1..4 on one controller
    assert check_committed_prefixes(logs, {2: 5}, committed=10).valid is True  # 2's snapshot holds 0..4


def test_one_log_is_unknown():
    assert check_committed_prefixes({1: A}, {}, committed=10).valid == "unknown"


@pytest.mark.integration
def test_scan_batches_reads_a_log_without_touching_it(tmp_path):
    import os
    from controller_impl.log import MetadataLog
    from controller_impl.log.recovery import scan_batches
    from controller_impl.log.segments import DIR_NAME
    from kafka_common.metadata.records import NoOpRecord
    log = MetadataLog.open(str(tmp_path), segment_bytes=1024)
    for epoch in (1, 1, 2):
        log.append([NoOpRecord()] * 3, leader_epoch=epoch, timestamp_ms=0)
    log.close()
    seg = os.path.join(tmp_path, DIR_NAME, sorted(os.listdir(os.path.join(tmp_path, DIR_NAME)))[-1])
    with open(seg, "ab") as f:
        f.write(b"torn")
    size = os.path.getsize(seg)
    batches = scan_batches(str(tmp_path))
    assert [(b, l, e) for b, l, e, _ in batches] == [(0, 2, 1), (3, 5, 1), (6, 8, 2)]
    assert os.path.getsize(seg) == size


@pytest.mark.integration
def test_the_quorum_logs_action_reads_every_controller_and_says_what_it_could_not(tmp_path):
    """The high watermark asked first, each controller's log from its dir, and an unreadable
    dir or an unanswered DescribeQuorum as an error beside the others' logs."""
    from controller_impl.log import MetadataLog
    from harness.cluster.controller_reads import read_quorum_logs
    from kafka_common.metadata.records import NoOpRecord
    log = MetadataLog.open(str(tmp_path / "c1"), segment_bytes=1024)
    log.append([NoOpRecord()] * 2, leader_epoch=3, timestamp_ms=0)
    log.close()
    asked = []
    got = read_quorum_logs({1: tmp_path / "c1", 2: tmp_path / "gone"}, lambda: asked.append(1) or 1)
    assert asked == [1] and got["committed"] == 1
    assert [tuple(b[:3]) for b in got["logs"]["1"]] == [(0, 1, 3)] and got["snapshot_ends"] == {"1": 0}
    assert set(got["errors"]) == {"2"} and "2" not in got["logs"]

    def no_leader() -> int:
        raise RuntimeError("no active controller")
    got = read_quorum_logs({1: tmp_path / "c1"}, no_leader)
    assert got["committed"] is None and got["errors"] == {"active": "no active controller"}
    assert len(got["logs"]["1"]) == 1
