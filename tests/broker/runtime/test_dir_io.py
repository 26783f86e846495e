"""Per-log-dir I/O workers (``broker_impl.runtime.dir_io``): FIFO per dir, exceptions back
to the awaiting coroutine, a stuck dir does not hold up another dir or the event loop, the
probe worker is separate from the data worker, partition locks are per partition."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from broker_impl.runtime.dir_io import DirExecutor, DirIO

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
    assert {name for _, name in seen} == {"dir-io-d1"}
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
