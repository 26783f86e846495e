"""A flush fsyncs outside its log's lock (broker_impl.storage.log_flush): on real files, with
os.fsync held at a gate, what runs beside a flush under way and what the flush may then claim."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from kafka_common.clock import ManualClock
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from storage_batches import make_batch

pytestmark = pytest.mark.integration
TOPIC_ID = uuid.UUID(int=0x1234)


class FsyncGate:
    """os.fsync, recorded (thread, file name); the first ``hold`` fsyncs of a .log file wait
    at the gate until :meth:`open` (``entered`` is set when one is waiting)."""

    def __init__(self, monkeypatch, hold: int = 1) -> None:
        self.calls: list[tuple[str, str]] = []
        self.entered, self._open, self._hold, self._lock = threading.Event(), threading.Event(), hold, threading.Lock()
        real = os.fsync

        def fsync(fd):
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            with self._lock:
                self.calls.append((threading.current_thread().name, name))
                held = name.endswith(".log") and self._hold > 0
                self._hold -= held
            if held:
                self.entered.set()
                assert self._open.wait(10), "the gate was never opened"
            return real(fd)
        monkeypatch.setattr(os, "fsync", fsync)

    def open(self) -> None:
        self._open.set()


def _in_thread(fn, name: str) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            out["error"] = exc
    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t, out


def _flush_at_gate(log, monkeypatch) -> tuple[FsyncGate, threading.Thread, dict]:
    """A thread flushing ``log``, returned once its first .log fsync waits at the gate."""
    gate = FsyncGate(monkeypatch)
    flusher, out = _in_thread(log.flush, "flusher")
    assert gate.entered.wait(5)
    return gate, flusher, out


@pytest.fixture
def new_log(tmp_path, failures):
    channel = DirFailureChannel(failures)
    clock = ManualClock()

    def new(config=LogConfig()):
        return PartitionLog.create(str(tmp_path), "t", 0, TOPIC_ID, config, channel, clock.monotonic_ms)
    new.channel = channel
    return new


def test_appends_and_reads_go_on_while_the_log_is_fsynced(new_log, monkeypatch):
    """Before, an append to a log waited behind its whole fsync — and the dir's data worker,
    one thread for every log of the dir, with it."""
    log = new_log()
    for _ in range(3):
        log.append_as_leader(make_batch(1), 0)
    gate, flusher, out = _flush_at_gate(log, monkeypatch)
    appender, appended = _in_thread(lambda: log.append_as_leader(make_batch(2), 0), "appender")
    appender.join(5)
    assert not appender.is_alive(), "the append waited for the fsync"
    assert appended == {"value": (3, 4)}
    assert log.read(3, 1000)                           # a read too
    gate.open()
    flusher.join(5)
    assert out == {"value": True}
    assert log.recovery_point == 3                     # what the flush took, not the append after it
    assert log._dirty                                  # that append waits for the next flush
    log.flush()
    assert log.recovery_point == 5 and not log._dirty


def test_a_flush_overlapping_another_also_syncs_what_the_first_took(new_log, monkeypatch):
    """Flush threads may flush one log twice at once: the second, finding no dirty marks,
    must still not return (or move the recovery point) before the first one's data is synced."""
    log = new_log()
    log.append_as_leader(make_batch(2), 0)
    gate, first, first_out = _flush_at_gate(log, monkeypatch)
    log.append_as_leader(make_batch(1), 0)
    log.flush()                                         # the second, while the first is at the gate
    second = [name for thread, name in gate.calls if thread == threading.current_thread().name]
    assert second.count("00000000000000000000.log") == 1, gate.calls
    assert log.recovery_point == 3
    gate.open()
    first.join(5)
    assert first_out == {"value": True} and log.recovery_point == 3   # never down


def test_a_truncation_during_the_fsync_keeps_the_recovery_point(new_log, monkeypatch):
    """The flushed offsets are gone and new data at them is not synced: the flush that began
    before the truncation does not move the recovery point."""
    log = new_log()
    for _ in range(5):
        log.append_as_leader(make_batch(1), 0)
    gate, flusher, out = _flush_at_gate(log, monkeypatch)
    assert log.truncate_to(2)
    for _ in range(3):
        log.append_as_leader(make_batch(1), 1)         # a new leader's data at offsets 2-4
    assert log.log_end_offset == 5
    gate.open()
    flusher.join(5)
    assert out == {"value": True}
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 5


def test_segments_deleted_during_the_fsync_are_no_disk_failure(new_log, monkeypatch):
    """Retention or a follower's full truncation closes and deletes the segments a flush is
    syncing: its duplicated descriptors stay valid, the dir stays online."""
    log = new_log(LogConfig(segment_bytes=200, flush_interval_messages=1000))
    for _ in range(8):
        log.append_as_leader(make_batch(1, 60), 0)
    assert log.segment_count >= 3
    gate, flusher, out = _flush_at_gate(log, monkeypatch)
    log.truncate_fully_and_start_at(100)
    assert log.segment_count == 1 and not os.path.exists(os.path.join(log.path, "00000000000000000000.log"))
    gate.open()
    flusher.join(5)
    assert out == {"value": True}
    assert not new_log.channel.is_offline(log.log_dir)
    assert log.recovery_point <= log.log_end_offset == 100


def test_a_closed_log_is_not_flushed_and_an_offline_one_says_so(new_log, failures):
    log = new_log()
    log.append_as_leader(make_batch(1), 0)
    log.close()
    assert log.flush() is False
    new_log.channel.report(log.log_dir, 5, "append")
    from broker_impl.storage.errors import KafkaStorageError
    with pytest.raises(KafkaStorageError):
        log.flush()
