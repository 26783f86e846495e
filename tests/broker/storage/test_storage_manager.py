"""LogManager on real dirs: placement, attach/create, checkpoints, clean vs unclean restart,
failure routing on a real OSError, offline partitions, future logs, strays, probe."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import uuid

import pytest

from kafka_common.clock import ManualClock
from broker_impl.replication.mover import DirMover
from broker_impl.state.effects import TopicPartition
from broker_impl.storage import checkpoint as ckpt
from broker_impl.storage.errors import InconsistentTopicId, KafkaStorageError, LogDirStartupError, LogNotFound
from broker_impl.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.probe import PROBE_FILE
from broker_impl.storage.startup import load_log_dirs
from conftest import NODE_ID
from storage_batches import headers, make_batch

pytestmark = pytest.mark.integration
T1, T2 = uuid.UUID(int=1 << 100), uuid.UUID(int=2 << 100)


def _open(log_dirs, failures, config=LogConfig()):
    dirs = load_log_dirs(log_dirs, log_dirs[0], NODE_ID, random.Random(1))
    return LogManager.open(dirs, config, on_failure=failures, now_ms=ManualClock().monotonic_ms)


def test_placement_least_loaded_ties_in_configured_order(log_dirs, failures):
    lm = _open(log_dirs, failures)
    placed = [lm.get_or_create_log(T1, "a", p).log_dir for p in range(4)]
    assert placed == [log_dirs[0], log_dirs[1], log_dirs[2], log_dirs[0]]
    lm.get_or_create_log(T2, "b", 0, log_dirs[2])
    lm.get_or_create_log(T2, "b", 1, log_dirs[2])
    assert lm.pick_dir() == log_dirs[1]
    assert sorted(l.partition for l in lm.logs_in(log_dirs[0])) == [0, 3]
    assert os.path.isdir(os.path.join(log_dirs[2], "b-1"))


def test_existing_log_wins_and_topic_id_is_checked(log_dirs, failures):
    lm = _open(log_dirs, failures)
    log = lm.get_or_create_log(T1, "a", 0, log_dirs[1])
    assert lm.get_or_create_log(T1, "a", 0, log_dirs[2]) is log  # an existing log wins (Kafka §4.4)
    with pytest.raises(InconsistentTopicId):
        lm.get_or_create_log(T2, "a", 0)
    with pytest.raises(LogNotFound):
        lm.get_or_create_log(T1, "a", 1, "/nonexistent/dir")
    lm.get_or_create_log(None, "c", 0)
    assert lm.get_or_create_log(T2, "c", 0).topic_id == T2  # id assigned later, written to disk
    assert ckpt.read_partition_metadata(os.path.join(lm.get_log("c", 0).path, ckpt.PARTITION_METADATA)) == T2


def test_checkpoints_and_clean_restart(log_dirs, failures):
    lm = _open(log_dirs, failures)
    a = lm.get_or_create_log(T1, "a", 0, log_dirs[0])
    b = lm.get_or_create_log(T1, "a", 1, log_dirs[1])
    for _ in range(3):
        a.append_as_leader(make_batch(2), 1)
    b.append_as_leader(make_batch(4), 1)
    a.high_watermark, b.high_watermark = 5, 4
    lm.close()
    hw0 = open(os.path.join(log_dirs[0], ckpt.HW_CHECKPOINT)).read()
    assert hw0 == "0\n1\na 0 5\n"  # Kafka's OffsetCheckpointFile text
    assert ckpt.read_offsets(os.path.join(log_dirs[1], ckpt.RECOVERY_CHECKPOINT)) == {("a", 1): 4}
    assert ckpt.read_offsets(os.path.join(log_dirs[2], ckpt.HW_CHECKPOINT)) == {}
    assert all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in log_dirs)

    again = _open(log_dirs, failures)
    a2, b2 = again.get_log("a", 0), again.get_log("a", 1)
    assert (a2.log_end_offset, a2.high_watermark, a2.log_dir) == (6, 5, log_dirs[0])
    assert (b2.log_end_offset, b2.high_watermark, b2.log_dir) == (4, 4, log_dirs[1])
    assert a2.recovery.recovered_segments == 0  # clean: trusted, not rescanned
    assert not any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in log_dirs)
    assert sorted(again.existing_logs()) == [("a", 0, T1, log_dirs[0], False), ("a", 1, T1, log_dirs[1], False)]
    assert failures.calls == []


def test_unclean_restart_recovers_from_the_checkpointed_recovery_point(log_dirs, failures):
    cfg = LogConfig(segment_bytes=len(make_batch(2)) * 2 + 1)
    lm = _open(log_dirs, failures, cfg)
    log = lm.get_or_create_log(T1, "a", 0, log_dirs[0])
    for _ in range(4):
        log.append_as_leader(make_batch(2), 1)  # segments at 0, 4
    log.flush()
    lm.checkpoint_recovery_points()
    log.append_as_leader(make_batch(2), 1)  # segment 8, not flushed
    tail = log._segments[-1].log_path
    # crash: no close(); the last write is torn
    os.truncate(tail, os.path.getsize(tail) - 1)
    for plog in lm.all_logs():
        plog.close()
    lm.release_locks()  # the process died: the kernel drops its flocks
    again = _open(log_dirs, failures, cfg)
    rec = again.get_log("a", 0)
    assert rec.log_end_offset == 8 and rec.recovery.truncated_bytes > 0
    assert rec.recovery.recovered_segments == 1  # only the segment past the recovery point (8)


def test_real_oserror_on_create_routes_once_and_falls_through(log_dirs, failures):
    lm = _open(log_dirs, failures)
    a0 = lm.get_or_create_log(T1, "a", 0, log_dirs[1])
    # the disk behind d1 "disappears": a file now sits where the dir was (a real ENOTDIR)
    a0.close()
    shutil.rmtree(log_dirs[1])
    open(log_dirs[1], "w").write("not a dir")
    for p, d in ((0, 0), (1, 0), (2, 2), (3, 2)):
        lm.get_or_create_log(T1, "x", p, log_dirs[d])
    placed = lm.get_or_create_log(T1, "x", 4)  # least loaded is d1 → fails → falls to d0
    assert placed.log_dir == log_dirs[0]
    assert failures.calls == [(log_dirs[1], errno.ENOTDIR, "create_log")]
    assert lm.offline_dirs() == [log_dirs[1]] and not lm.is_online(log_dirs[1])
    # further use of the dir fails at once, without touching the disk, and reports nothing new
    with pytest.raises(KafkaStorageError) as info:
        a0.append_as_leader(make_batch(1), 0)
    assert info.value.errno is None and info.value.error_code == 56
    with pytest.raises(KafkaStorageError):
        lm.get_or_create_log(T1, "y", 0, log_dirs[1])
    assert len(failures.calls) == 1
    assert lm.mark_offline(log_dirs[1]) == [("a", 0, T1)]
    assert lm.get_log("a", 0) is None
    # never re-created elsewhere while its dir is offline (KAFKA-16234) ...
    with pytest.raises(KafkaStorageError, match="offline log dir"):
        lm.get_or_create_log(T1, "a", 0)
    # ... unless the topic was re-created under a new id (KAFKA-16157)
    assert lm.get_or_create_log(T2, "a", 0).log_dir in (log_dirs[0], log_dirs[2])
    assert log_dirs[1] not in lm.checkpoint_high_watermarks()  # offline dirs are skipped, not retried
    assert lm.probe_all() == []


def test_offline_at_start_dir_is_never_used(log_dirs, failures):
    open(os.path.join(log_dirs[2], "meta.properties"), "w").write("broken")
    lm = _open(log_dirs, failures)
    assert lm.online_dirs() == log_dirs[:2] and lm.offline_dirs() == [log_dirs[2]]
    assert {lm.get_or_create_log(T1, "a", p).log_dir for p in range(4)} == set(log_dirs[:2])
    assert failures.calls == []  # offline at start is not a new failure


def test_future_log_swap(log_dirs, failures):
    lm = _open(log_dirs, failures)
    cur = lm.get_or_create_log(T1, "m", 0, log_dirs[0])
    cur.append_as_leader(make_batch(3), 2)
    cur.high_watermark = 3
    fut = lm.create_future_log(T1, "m", 0, log_dirs[1])
    assert fut.path.endswith("-future") and os.path.basename(fut.path).startswith("m-0.")
    assert lm.pick_dir() == log_dirs[2]  # futures count towards load
    fut.append_as_follower(cur.read(0, 1 << 20))
    new = lm.replace_current_with_future("m", 0)
    assert new.log_dir == log_dirs[1] and new.path == os.path.join(log_dirs[1], "m-0")
    assert not os.path.exists(os.path.join(log_dirs[0], "m-0"))
    assert (new.log_end_offset, new.high_watermark, new.epoch_cache.entries) == (3, 3, [(2, 0)])
    assert [h.base_offset for h in headers(new.read(0, 1 << 20))] == [0]
    lm.close()
    assert _open(log_dirs, failures).get_log("m", 0).log_dir == log_dirs[1]


def test_a_swap_whose_source_went_offline_is_refused(log_dirs, failures):
    # the future lacks the current's last records: swapping it in would drop acked records
    lm = _open(log_dirs, failures)
    cur = lm.get_or_create_log(T1, "m", 0, log_dirs[0])
    cur.append_as_leader(make_batch(3), 2)
    fut = lm.create_future_log(T1, "m", 0, log_dirs[1])
    fut.append_as_follower(cur.read(0, 1 << 20))
    cur.append_as_leader(make_batch(2), 2)              # not copied yet
    lm.forget_offline(log_dirs[0])                      # the source dir fails: its logs leave the tables
    mover = DirMover(lm, lambda _tp: None)
    with pytest.raises(KafkaStorageError, match="offline"):
        asyncio.run(mover.swap(TopicPartition("m", 0)))
    assert lm.get_log("m", 0) is None and lm.future_log("m", 0) is fut and fut.log_end_offset == 3
    lm.close()


def test_delete_renames_then_removes_and_a_crash_between_is_finished_at_start(log_dirs, failures):
    """Kafka's asyncDelete: the dir is renamed ``-delete`` (the name is free at once for a
    new incarnation), removed later; a ``-delete`` dir found at start-up is removed."""
    lm = _open(log_dirs, failures)
    lm.get_or_create_log(T1, "s", 0, log_dirs[0]).append_as_leader(make_batch(1), 0)
    lm.get_or_create_log(T1, "s", 1, log_dirs[0]).append_as_leader(make_batch(1), 0)
    new_path = lm.delete_log("s", 0)
    assert new_path.endswith("-delete") and os.path.isdir(new_path) and lm.get_log("s", 0) is None
    assert not os.path.exists(os.path.join(log_dirs[0], "s-0"))
    fresh = lm.get_or_create_log(T2, "s", 0, log_dirs[0])      # re-created at once, beside it
    assert fresh.topic_id == T2 and fresh.log_end_offset == 0
    lm.remove_deleted(new_path)
    assert not os.path.exists(new_path)
    crashed = lm.delete_log("s", 1)                              # renamed, never removed
    lm.close()
    again = _open(log_dirs, failures)
    assert not os.path.exists(crashed) and again.get_log("s", 1) is None
    assert again.get_log("s", 0).topic_id == T2 and failures.calls == []
    again.close()


def test_an_append_or_read_after_the_delete_closed_the_log_is_refused_not_a_dir_failure(log_dirs, failures):
    """An append or read queued before a DeleteLog closed the log (a topic deleted while a
    request was on its way) meets a closed log: NOT_LEADER_OR_FOLLOWER, never the dir's
    failure (KAFKA-15391's kind: a deletion racing I/O took the whole dir offline)."""
    from broker_impl.storage.errors import LogClosed
    lm = _open(log_dirs, failures)
    plog = lm.get_or_create_log(T1, "race", 0, log_dirs[0])
    plog.append_as_leader(make_batch(1), 0)
    lm.delete_log("race", 0)
    for op in (lambda: plog.append_as_leader(make_batch(1), 0), lambda: plog.read(0, 1024)):
        with pytest.raises(LogClosed) as err:
            op()
        assert err.value.error_code == 6
    assert failures.calls == [] and lm.offline_dirs() == []
    lm.close()


def test_two_incarnations_of_a_partition_both_load_and_the_stray_is_deleted_by_dir(log_dirs, failures):
    """KAFKA-16157: a topic deleted and re-created while a dir was away leaves the old
    incarnation's log in that dir and the new one in another: start-up loads both (no
    duplicate-log failure, no dir offline) and deleting the stray by its dir keeps the other."""
    lm = _open(log_dirs, failures)
    lm.get_or_create_log(T1, "r", 0, log_dirs[0]).append_as_leader(make_batch(3), 0)
    lm.close()
    os.rename(os.path.join(log_dirs[0], "r-0"), os.path.join(log_dirs[1], "parked"))   # the dir "away"
    lm = _open(log_dirs, failures)
    lm.get_or_create_log(T2, "r", 0, log_dirs[2]).append_as_leader(make_batch(5), 0)
    lm.close()
    os.rename(os.path.join(log_dirs[1], "parked"), os.path.join(log_dirs[0], "r-0"))   # back
    lm = _open(log_dirs, failures)
    assert sorted(lm.existing_logs()) == sorted([("r", 0, T1, log_dirs[0], False), ("r", 0, T2, log_dirs[2], False)])
    assert failures.calls == [] and lm.offline_dirs() == []
    stray_dir = lm.dir_id_of(log_dirs[0])
    path = lm.delete_log("r", 0, dir_id=stray_dir)
    lm.remove_deleted(path)
    kept = lm.get_log("r", 0)
    assert (kept.topic_id, kept.log_dir, kept.log_end_offset) == (T2, log_dirs[2], 5)
    assert lm.existing_logs() == [("r", 0, T2, log_dirs[2], False)]
    assert not os.path.exists(os.path.join(log_dirs[0], "r-0"))
    lm.close()


def test_probe_writes_and_fsyncs_a_block(log_dirs, failures):
    lm = _open(log_dirs, failures)
    lm.probe_dir(log_dirs[0])
    assert os.path.getsize(os.path.join(log_dirs[0], PROBE_FILE)) == 4096
    assert lm.probe_all() == [] and failures.calls == []


def test_dir_lock_second_broker_is_fatal(log_dirs, failures):
    lm = _open(log_dirs, failures)
    with pytest.raises(LogDirStartupError, match=f"Failed to acquire lock on file .lock in {log_dirs[0]}"):
        _open(log_dirs, failures)
    lm.close()
    _open(log_dirs, failures).close()  # released by close()
    assert failures.calls == []


def test_log_without_partition_metadata_loads_without_topic_id(log_dirs, failures):
    """KAFKA-16814: a missing partition.metadata must not fail start-up (the replica manager
    treats the log as a stray)."""
    lm = _open(log_dirs, failures)
    lm.get_or_create_log(T1, "p", 0, log_dirs[0]).append_as_leader(make_batch(1), 0)
    lm.close()
    os.unlink(os.path.join(log_dirs[0], "p-0", ckpt.PARTITION_METADATA))
    again = _open(log_dirs, failures)
    assert again.existing_logs() == [("p", 0, None, log_dirs[0], False)]
    again.close()


def test_abandoned_future_log_is_loaded_and_promotable(log_dirs, failures):
    """KAFKA-16082: a -future log left by a crash is loaded at start; the replica manager can
    promote it even when the current log is gone."""
    lm = _open(log_dirs, failures)
    lm.create_future_log(T1, "f", 0, log_dirs[2]).append_as_follower(make_batch(2, epoch=1))
    lm.close()
    again = _open(log_dirs, failures)
    assert again.existing_logs() == [("f", 0, T1, log_dirs[2], True)] and again.get_log("f", 0) is None
    promoted = again.replace_current_with_future("f", 0)
    assert (promoted.log_dir, promoted.log_end_offset) == (log_dirs[2], 2)
    again.close()


def test_metadata_log_dir_is_not_loaded_as_a_partition(log_dirs, failures):
    os.makedirs(os.path.join(log_dirs[0], "__cluster_metadata-0"))
    open(os.path.join(log_dirs[0], "__cluster_metadata-0", "00000000000000000000.log"), "wb").write(b"not kafka")
    lm = _open(log_dirs, failures)
    assert lm.existing_logs() == [] and failures.calls == []
    lm.close()
    assert open(os.path.join(log_dirs[0], "__cluster_metadata-0", "00000000000000000000.log"), "rb").read() == b"not kafka"


def test_delete_log_removes_its_dir(log_dirs, failures):
    lm = _open(log_dirs, failures)
    path = lm.get_or_create_log(T1, "d", 0, log_dirs[1]).path
    lm.delete_log("d", 0)
    assert not os.path.exists(path) and lm.get_log("d", 0) is None
    with pytest.raises(LogNotFound):
        lm.delete_log("d", 0)
    assert lm.get_or_create_log(T1, "d", 0).log_end_offset == 0  # may be created again
    assert failures.calls == []
    lm.close()


class _Stuck:
    """``PartitionLog.<name>`` patched to block (in dirs ``only``, or anywhere) until
    ``release``; ``run(fn)`` calls ``fn`` on a thread, its result or KafkaStorageError in
    ``outcome``, and returns once the call is stuck."""

    def __init__(self, monkeypatch, name: str, only: tuple[str, ...] = ()) -> None:
        import threading
        from broker_impl.storage import log_manager as lm_mod
        self.stuck, self.release, self.outcome = threading.Event(), threading.Event(), []
        real = getattr(lm_mod.PartitionLog, name)

        def blocking(log_dir, *args, **kwargs):
            if not only or log_dir in only:
                self.stuck.set()
                self.release.wait(10)
            return real(log_dir, *args, **kwargs)
        monkeypatch.setattr(lm_mod.PartitionLog, name, staticmethod(blocking))

    def run(self, fn) -> None:
        import threading

        def call():
            try:
                self.outcome.append(fn())
            except KafkaStorageError as exc:
                self.outcome.append(exc)
        self.thread = threading.Thread(target=call)
        self.thread.start()
        assert self.stuck.wait(5)

    def finish(self):
        self.release.set()
        self.thread.join(5)
        return self.outcome[0]


def _finishes(fn, timeout_s: float = 5.0) -> bool:
    import threading
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(timeout_s)


def test_a_create_blocked_in_one_dir_does_not_hold_the_table_lock(log_dirs, failures, monkeypatch):
    """Creation does its disk I/O outside the table lock: while a create in dir 0 is stuck,
    a create in dir 1, a delete and taking dir 2 offline all finish; the stuck create, when
    it lands in a dir that went offline meanwhile, is closed and fails instead of being installed."""
    lm = _open(log_dirs, failures)
    lm.get_or_create_log(T1, "a", 9, log_dirs[1])
    stuck = _Stuck(monkeypatch, "create", only=(log_dirs[0],))
    stuck.run(lambda: lm.get_or_create_log(T1, "a", 0, log_dirs[0]))

    def others():
        lm.get_or_create_log(T1, "a", 1, log_dirs[1])
        lm.delete_log("a", 9)
        lm.mark_offline(log_dirs[2])
        lm.mark_offline(log_dirs[0])
    assert _finishes(others), "the table lock was held across the stuck create's I/O"
    assert isinstance(stuck.finish(), KafkaStorageError), stuck.outcome
    assert lm.get_log("a", 0) is None and lm.get_log("a", 1) is not None and lm.get_log("a", 9) is None


def test_a_swap_blocked_in_its_dir_does_not_hold_the_table_lock(log_dirs, failures, monkeypatch):
    """The future log's swap does its disk work outside the table lock: while it is stuck,
    readers see the old current and a create in another dir finishes; a swap whose dir went
    offline meanwhile fails and leaves the current log in place."""
    lm = _open(log_dirs, failures)
    cur = lm.get_or_create_log(T1, "m", 0, log_dirs[0])
    cur.append_as_leader(make_batch(3), 2)
    fut = lm.create_future_log(T1, "m", 0, log_dirs[1])
    fut.append_as_follower(cur.read(0, 1 << 20))
    stuck = _Stuck(monkeypatch, "load")
    stuck.run(lambda: lm.replace_current_with_future("m", 0))
    assert _finishes(lambda: lm.get_or_create_log(T1, "x", 0, log_dirs[2])), \
        "the table lock was held across the swap's I/O"
    assert lm.get_log("m", 0) is cur
    lm.mark_offline(log_dirs[1])
    assert isinstance(stuck.finish(), KafkaStorageError), stuck.outcome
    assert lm.get_log("m", 0) is cur and lm.future_log("m", 0) is None
