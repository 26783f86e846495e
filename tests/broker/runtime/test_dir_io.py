"""Per-log-dir I/O workers (``broker_impl.runtime.dir_io``): FIFO per dir, exceptions back
to the awaiting coroutine, a stuck dir does not hold up another dir or the event loop, the
probe worker is separate from the data worker, partition locks are per partition."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from broker_impl.runtime.dir_io import DirExecutor, DirIO, dir_label

pytestmark = pytest.mark.unit


def test_jobs_of_one_dir_run_in_submission_order_on_one_thread(tmp_path):
    io = DirIO([str(tmp_path / "d1")])
    seen: list[tuple[int, str]] = []

    def job(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i * 2

    futs = [io.submit(str(tmp_path / "d1"), job, i) for i in range(200)]
    assert [f.result(5) for f in futs] == [i * 2 for i in range(200)]
    assert [i for i, _ in seen] == list(range(200))
    assert {name for _, name in seen} == {f"dir-io-{tmp_path.name}-d1"}
    io.close()
    assert io.join(5) == []


def test_an_exception_reaches_the_awaiting_coroutine(tmp_path):
    io = DirIO([str(tmp_path / "d1")])

    def fail() -> None:
        raise OSError(5, "Input/output error")

    async def run() -> None:
        with pytest.raises(OSError) as info:
            await io.run(str(tmp_path / "d1"), fail)
        assert info.value.errno == 5
        assert await io.run(str(tmp_path / "d1"), lambda: 7) == 7  # the worker survived
    asyncio.run(run())
    io.close()


def test_a_stuck_dir_holds_up_neither_another_dir_nor_the_loop(tmp_path):
    d1, d2 = str(tmp_path / "d1"), str(tmp_path / "d2")
    io = DirIO([d1, d2])
    release = threading.Event()
    io.submit(d2, release.wait)            # d2's worker is stuck
    queued = io.submit(d2, lambda: "d2 later")
    io.submit_probe(d2, lambda: None).result(5)  # the probe worker of d2 is free

    async def run() -> list[str]:
        ticks = []

        async def ticker() -> None:
            for _ in range(5):
                ticks.append("tick")
                await asyncio.sleep(0.001)
        got = await asyncio.gather(io.run(d1, lambda: "d1 done"), ticker())
        return [got[0], *ticks]
    assert asyncio.run(run()) == ["d1 done"] + ["tick"] * 5
    assert not queued.done()
    release.set()
    assert queued.result(5) == "d2 later"
    io.close()
    assert io.join(5) == []


def test_close_leaves_a_stuck_worker_behind_without_blocking(tmp_path):
    ex = DirExecutor("stuck")
    release = threading.Event()
    ex.submit(release.wait)
    ex.close()
    t0 = time.monotonic()
    assert ex.join(0.1) is False         # bounded: the caller goes on
    assert time.monotonic() - t0 < 5
    assert ex.submit(lambda: 1).exception(1) is not None  # closed: no new jobs
    release.set()
    assert ex.join(5) is True


def test_partition_locks_are_per_partition(tmp_path):
    io = DirIO([])

    async def run() -> None:
        a, b = io.partition_lock("t", 0), io.partition_lock("t", 1)
        assert a is io.partition_lock("t", 0) and a is not b
        async with a:
            async with b:  # another partition is not held up
                pass
    asyncio.run(run())


class _Log:
    """Stands for a PartitionLog in the flush-by-count path: ``flush`` waits
    for ``gate`` (a barrier or an event), then counts or raises."""

    def __init__(self, gate=None, error: BaseException | None = None) -> None:
        self.gate, self.error, self.flushes = gate, error, 0

    def flush(self) -> bool:
        if isinstance(self.gate, threading.Barrier):
            self.gate.wait(5)          # BrokenBarrierError unless every log flushes at once
        elif self.gate is not None:
            assert self.gate.wait(5)
        if self.error is not None:
            raise self.error
        self.flushes += 1
        return True


def _noting(*logs, value="appended", raises: BaseException | None = None):
    from broker_impl.storage import flush_deferral

    def job():
        for log in logs:
            flush_deferral.flush_due(log)
            flush_deferral.flush_due(log)      # noted once however often it is due
        if raises is not None:
            raise raises
        return value
    return job


def test_a_flush_by_count_leaves_the_worker_free_and_the_job_settles_after_it(tmp_path):
    """The job whose append is due a flush is answered only after the flush; the next job of
    the dir runs (and is answered) while that fsync is still going on."""
    io = DirIO([str(tmp_path / "d1")])
    release = threading.Event()
    log = _Log(release)
    first = io.submit(str(tmp_path / "d1"), _noting(log, value="a1"))
    second = io.submit(str(tmp_path / "d1"), lambda: "b")
    assert second.result(5) == "b"
    assert not first.done()             # its fsync has not finished: no answer yet
    release.set()
    assert first.result(5) == "a1" and log.flushes == 1

    async def on_the_loop() -> str:
        return await io.run(str(tmp_path / "d1"), _noting(_Log(), value="a2"))
    assert asyncio.run(on_the_loop()) == "a2"
    io.close()
    assert io.join(5) == []


def test_the_flushes_one_job_leaves_run_together(tmp_path):
    """A follower's step appends to many partitions of the dir: their fsyncs run at once (so
    the file system can commit them together), not one after another."""
    io = DirIO([str(tmp_path / "d1")])
    barrier = threading.Barrier(6)
    logs = [_Log(barrier) for _ in range(6)]
    assert io.submit(str(tmp_path / "d1"), _noting(*logs)).result(10) == "appended"
    assert [log.flushes for log in logs] == [1] * 6
    io.close()


def test_a_failed_flush_fails_the_job_and_a_failed_job_still_flushes(tmp_path):
    io = DirIO([str(tmp_path / "d1")])
    eio = OSError(5, "Input/output error")
    bad = io.submit(str(tmp_path / "d1"), _noting(_Log(), _Log(error=eio)))
    assert bad.exception(5) is eio      # the append is not acked when its fsync failed
    log = _Log()
    boom = RuntimeError("after the append")
    failed = io.submit(str(tmp_path / "d1"), _noting(log, raises=boom))
    assert failed.exception(5) is boom and log.flushes == 1
    io.close()


def test_dir_threads_are_named_by_the_last_two_parts_of_the_path():
    """The lab's dirs are /jbodlab/disks/<disk>/data: a profile must tell them apart."""
    assert dir_label("/jbodlab/disks/d2/data") == "d2-data"
    assert dir_label("/jbodlab/disks/d2/data/") == "d2-data"
    assert dir_label("/d1") == "d1"


def test_upkeep_runs_beside_a_busy_data_worker(tmp_path):
    """Checkpoints and time-based flushes (``submit_upkeep``) do not queue behind the dir's
    appends, nor the appends behind them."""
    io = DirIO([str(tmp_path / "d1")])
    release = threading.Event()
    io.submit(str(tmp_path / "d1"), release.wait)       # the data worker is busy
    assert io.submit_upkeep(str(tmp_path / "d1"), lambda: threading.current_thread().name).result(5) \
        == f"dir-io-{tmp_path.name}-d1-upkeep"
    release.set()
    io.close()
    assert io.join(5) == []


def test_a_roll_flush_runs_in_the_background_after_the_awaited_ones(tmp_path):
    """A roll's flush (``flush_soon``) does not hold up its job's answer, and the flush
    threads take the flushes answers wait for first."""
    from broker_impl.runtime import dir_io
    from broker_impl.storage import flush_deferral
    io = DirIO([str(tmp_path / "d1")])
    release = threading.Event()
    rolled = _Log(release)

    def roll_job():
        flush_deferral.flush_soon(rolled)
        return "rolled"
    assert io.submit(str(tmp_path / "d1"), roll_job).result(5) == "rolled"   # not waiting for it
    assert rolled.flushes == 0
    release.set()
    until = time.monotonic() + 5
    while rolled.flushes == 0 and time.monotonic() < until:
        time.sleep(0.01)
    assert rolled.flushes == 1
    ex = dir_io.DirExecutor("order")
    order: list[str] = []
    gate = threading.Event()
    for _ in range(dir_io.FLUSH_THREADS):            # every flush thread busy
        ex._put_flush(dir_io.AWAITED, lambda _p: gate.wait(5), None)
    until = time.monotonic() + 5
    while ex._flush_jobs.qsize() and time.monotonic() < until:
        time.sleep(0.01)                             # each thread took its blocking flush
    ex._put_flush(dir_io.BACKGROUND, lambda _p: order.append("background"), None)
    ex._put_flush(dir_io.AWAITED, lambda _p: order.append("awaited"), None)
    assert [job[0] for job in sorted(ex._flush_jobs.queue)] == [dir_io.AWAITED, dir_io.BACKGROUND]
    gate.set()
    until = time.monotonic() + 5
    while len(order) < 2 and time.monotonic() < until:
        time.sleep(0.01)
    assert sorted(order) == ["awaited", "background"]
    ex.close()
    io.close()


def test_maintenance_takes_its_checkpoint_intervals_from_the_config(tmp_path):
    """``replica.high.watermark.checkpoint.interval.ms`` / ``log.flush.offset.checkpoint.interval.ms``
    reach the per-dir rounds: with 20 ms / one hour, rounds write the HW checkpoint and never
    the recovery points; with the probe off, no probe runs."""
    from broker_impl.runtime.maintenance import Maintenance
    from kafka_common.config import parse_config

    cfg = parse_config("process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://h:1\nlog.dirs=/d\n"
                       "controller.quorum.voters=9@h:2\ncontroller.listener.names=CONTROLLER\n"
                       "replica.high.watermark.checkpoint.interval.ms=20\n"
                       "log.flush.offset.checkpoint.interval.ms=3600000\nlog.dir.probe.interval.ms=0\n")
    default = parse_config("process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://h:1\nlog.dirs=/d\n"
                           "controller.quorum.voters=9@h:2\ncontroller.listener.names=CONTROLLER\n")
    assert (default.hw_checkpoint_interval_ms, default.recovery_checkpoint_interval_ms) == (5000, 60000)
    d = str(tmp_path / "d")
    rounds: list[tuple[bool, bool, bool]] = []
    io = DirIO([d])

    class Logs:
        def online_dirs(self):
            return [d]

        def probe_targets(self):
            return [d]

    m = Maintenance(Logs(), io, lambda: int(time.monotonic() * 1000), cfg.log_dir_probe_interval_ms,
                    cfg.hw_checkpoint_interval_ms, cfg.recovery_checkpoint_interval_ms)
    m.dir_round = lambda path, probe, hw, rp, now: rounds.append((probe, hw, rp))

    async def main():
        task = asyncio.create_task(m.run())
        while sum(hw for _p, hw, _r in rounds) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
    asyncio.run(asyncio.wait_for(main(), 30))
    io.close()
    assert not any(probe or rp for probe, _hw, rp in rounds), rounds
