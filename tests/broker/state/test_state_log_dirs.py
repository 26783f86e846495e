import pytest

from broker_impl.state.effects import Halt, MarkDirOffline, ReportDirFailure
from broker_impl.state.log_dirs import LogDirInfo, LogDirs, sort_dir_ids
from broker_state_helpers import D1, D2, D3, events, of
from kafka_common.ids import LOST, to_base64, uuid_of

pytestmark = pytest.mark.unit


def three(metadata=D1):
    return LogDirs([LogDirInfo(D1, "/d1"), LogDirInfo(D2, "/d2"), LogDirInfo(D3, "/d3")], metadata)


def test_first_error_marks_offline_and_reports_once():
    dirs = three(metadata=None)
    out = dirs.on_storage_error(D2, 5, "append")
    assert of(out, MarkDirOffline) == [MarkDirOffline(D2)]
    assert of(out, ReportDirFailure) == [ReportDirFailure(D2)]
    assert not of(out, Halt)
    ev = events(out, "dir_offline")[0].as_dict()
    assert ev == {"dir_id": to_base64(D2), "path": "/d2", "errno": 5, "op": "append"}
    assert dirs.online == (D1, D3) and dirs.offline == (D2,)
    assert dirs.on_storage_error(D2, 5, "fsync") == []


def test_single_log_dir_halts():
    dirs = LogDirs([LogDirInfo(D1, "/only")], None)
    out = dirs.on_storage_error(D1, 5, "roll")
    assert "only log dir /only" in of(out, Halt)[0].reason
    assert not of(out, ReportDirFailure)


def test_metadata_dir_in_log_dirs_halts():
    out = three(metadata=D1).on_storage_error(D1, 30, "checkpoint")
    assert "metadata log dir /d1" in of(out, Halt)[0].reason


def test_separate_metadata_dir_halts():
    meta = uuid_of(0x4444, 4)
    dirs = three(metadata=meta)
    out = dirs.on_storage_error(meta, 5, "metadata append")
    assert "metadata log dir" in of(out, Halt)[0].reason
    assert dirs.online == (D1, D2, D3)


def test_last_online_dir_halts():
    dirs = three(metadata=None)
    dirs.on_storage_error(D1, 5, "a")
    dirs.on_storage_error(D2, 5, "a")
    out = dirs.on_storage_error(D3, 5, "a")
    assert "all log dirs have failed" in of(out, Halt)[0].reason


def test_unknown_dir_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown directory id"):
        three().on_storage_error(uuid_of(7, 700), 5, "append")


def test_reserved_and_duplicate_ids_rejected():
    with pytest.raises(ValueError, match="reserved"):
        LogDirs([LogDirInfo(LOST, "/x")], None)
    with pytest.raises(ValueError, match="duplicate"):
        LogDirs([LogDirInfo(D1, "/x"), LogDirInfo(D1, "/y")], None)
    with pytest.raises(ValueError, match="at least one"):
        LogDirs([], None)


def test_start_check():
    assert of(LogDirs([LogDirInfo(D1, "/a", online=False)], None).start_check(), Halt)
    assert of(LogDirs([LogDirInfo(D1, "/a", online=False), LogDirInfo(D2, "/b")], D1).start_check(), Halt)
    dirs = LogDirs([LogDirInfo(D1, "/a"), LogDirInfo(D2, "/b", online=False)], D1)
    assert dirs.start_check() == [ReportDirFailure(D2)]
    # an offline-at-start dir is still registered (so the heartbeat may report it, D3)
    assert set(dirs.registration_dirs) == {D1, D2}


def test_registration_dirs_sorted_signed():
    neg = uuid_of(-5, 1)        # msb negative sorts first in Kafka's signed order
    pos = uuid_of(5, 1)
    dirs = LogDirs([LogDirInfo(pos, "/p"), LogDirInfo(neg, "/n")], None)
    assert dirs.registration_dirs == (neg, pos)
    assert sort_dir_ids([pos, neg]) == (neg, pos)


def test_separate_metadata_dir_halt_reason_names_its_path():
    meta = uuid_of(0x4444, 5)
    dirs = LogDirs([LogDirInfo(D1, "/d1"), LogDirInfo(D2, "/d2")], meta, "/meta")
    out = dirs.on_storage_error(meta, 5, "probe")
    assert of(out, Halt)[0].reason == "the metadata log dir /meta failed (probe: errno 5)"
    assert [e.event for e in out if hasattr(e, "event")] == ["halt"] and dirs.online == (D1, D2)
