"""The storage effects' workers: one per dir, so a create stuck in one dir holds up only that
dir; one partition's effects in the core's order even when they move between dirs;
MarkDirOffline never waits for a stuck dir. The log manager here is a recorder (the real one
is exercised by tests/broker/storage and the hung-dir test in test_broker_slow_dir.py)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from broker_impl.runtime.storage_effects import StorageEffects
from broker_impl.state import effects as fx
from kafka_runtime.events import EventLog

pytestmark = pytest.mark.unit
D1, D2 = uuid.uuid4(), uuid.uuid4()
TID = uuid.uuid4()


class RecordingLm:
    """Records calls; a create in ``stuck_dir`` blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.release = threading.Event()
        self.stuck_dir: uuid.UUID | None = None
        self.forgotten: list[str] = []
        self.closed = threading.Event()

    def path_of(self, dir_id):
        return {D1: "/d1", D2: "/d2"}.get(dir_id)

    def get_or_create_log(self, topic_id, topic, partition, *, dir_id):
        if dir_id == self.stuck_dir:
            self.release.wait(10)
        self.calls.append(("create", topic, partition))

    def delete_log(self, topic, partition, *, dir_id=None):
        self.calls.append(("delete", topic, partition))
        return f"/d/{topic}-{partition}.abc-delete"

    def remove_deleted(self, path):
        self.calls.append(("removed", path, 0))

    def create_future_log(self, topic_id, topic, partition, *, dir_id):
        self.calls.append(("future", topic, partition))

    def forget_offline(self, path):
        self.forgotten.append(path)
        closed = self.closed

        class Log:
            def close(self):
                closed.set()
        return [], [Log()]


def _wait(pred, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_create_stuck_in_one_dir_holds_up_only_that_dir():
    lm = RecordingLm()
    lm.stuck_dir = D2
    se = StorageEffects(lm, EventLog("", 1, "broker"))
    try:
        stuck = se.submit(fx.CreateLog(fx.TopicPartition("t", 0), TID, D2))
        later_same_dir = se.submit(fx.CreateLog(fx.TopicPartition("t", 2), TID, D2))
        others = [se.submit(fx.CreateLog(fx.TopicPartition("t", p), TID, D1)) for p in (1, 3, 5)]
        for f in others:
            f.result(5)
        assert not stuck.done() and not later_same_dir.done()
        off = se.submit(fx.MarkDirOffline(D2))   # not behind the stuck create
        off.result(5)
        assert lm.forgotten == ["/d2"]
        lm.release.set()
        stuck.result(5)
        later_same_dir.result(5)
        _wait(lm.closed.is_set)                  # the dir's own worker closed its logs
        assert [c for c in lm.calls if c[2] in (0, 2)] == [("create", "t", 0), ("create", "t", 2)]
    finally:
        lm.release.set()
        se.close()


def test_one_partitions_effects_keep_their_order_across_dirs():
    lm = RecordingLm()
    lm.stuck_dir = D2
    se = StorageEffects(lm, EventLog("", 1, "broker"))
    tp = fx.TopicPartition("t", 7)
    try:
        first = se.submit(fx.CreateLog(tp, TID, D2))            # stuck
        second = se.submit(fx.CreateFutureLog(tp, TID, D1))     # another dir, but must wait
        third = se.submit(fx.DeleteLog(tp, TID, D1))
        time.sleep(0.2)
        assert not second.done() and not third.done() and lm.calls == []
        lm.release.set()
        third.result(5)
        assert first.done() and second.done()
        _wait(lambda: len(lm.calls) == 4)        # the removal: a later job of the dir's worker
        assert lm.calls == [("create", "t", 7), ("future", "t", 7), ("delete", "t", 7),
                            ("removed", "/d/t-7.abc-delete", 0)]
        _wait(lambda: not se._tails)             # finished partitions are not remembered
    finally:
        lm.release.set()
        se.close()
