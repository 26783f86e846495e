"""A log dir failing under a running kraft-broker (real processes, real OSErrors).

The dir is broken by replacing it with a regular file: the next health probe (write + fsync
in the dir) fails with ENOTDIR through storage's one failure path. Checked: the broker
stays up and reports the dir (the controller drops it from the registration, shrinks ISRs
and moves leaderships); the metadata dir halts the broker; with the controller unreachable
the D5 timer shuts down a broker leading a partition in the dir and spares one that does not.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from testkit.cluster import create_and_settle, reader_for, unfenced, until, wait_unfenced, wait_until

pytestmark = pytest.mark.integration
FAST = {"log.dir.probe.interval.ms": "100"}


def break_dir(path: str) -> None:
    os.rename(path, path + ".broken")
    with open(path, "w", encoding="utf-8") as f:
        f.write("not a directory\n")


def log_dir_of(broker, topic: str, partition: int) -> str:
    [path] = [p for p in broker.dirs if os.path.isdir(os.path.join(p, f"{topic}-{partition}"))]
    return path


def test_dir_failure_is_reported_and_leadership_moves(make_cluster):
    ctrl, brokers = make_cluster(broker_extra=FAST)
    b1, b2 = brokers

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1, 2)), 30, "brokers unfenced", brokers)
            # broker 1 leads p0..p2, one per dir (least-loaded placement)
            await create_and_settle(client, reader, brokers, "t", {p: [1, 2] for p in range(3)})
            victim = next(d for d in b1.dirs[1:] if any(n.startswith("t-") for n in os.listdir(d)))
            victim_id = b1.dir_ids()[victim]
            hit = [p for p in range(3) if log_dir_of(b1, "t", p) == victim]
            tid = reader.image.topic_ids["t"]
            break_dir(victim)
            await until(reader, lambda im: victim_id not in im.brokers[1].log_dirs and all(
                im.partition(tid, p).leader == 2 and 1 not in im.partition(tid, p).isr for p in hit),
                20, "controller dropped the dir, moved leadership, shrank ISR", brokers)
            for p in set(range(3)) - set(hit):   # partitions in the other dirs are untouched
                assert reader.image.partition(tid, p).leader == 1
            assert b1.alive() and not reader.image.brokers[1].fenced
        finally:
            await client.close()

    asyncio.run(run())
    # the controller's image can show the change before the broker has logged the response
    # to its report, so the ack event is awaited rather than expected at once
    for ev in ("dir_offline", "dir_failure_reported", "dir_failure_acked"):
        wait_until(lambda: ev in [e["event"] for e in b1.events()], 10,
                   f"{ev} in broker 1's events: {[e['event'] for e in b1.events()]}")
    offline = next(e for e in b1.events() if e["event"] == "dir_offline")
    assert offline["op"] == "probe" and offline["errno"] == 20   # ENOTDIR
    assert b1.stop() == 0, b1.stderr()


def test_metadata_dir_failure_halts(make_cluster):
    ctrl, brokers = make_cluster(n_brokers=1, broker_extra=FAST)
    [b1] = brokers

    wait_unfenced(ctrl, brokers)
    break_dir(b1.dirs[0])          # metadata.log.dir defaults to the first of log.dirs
    assert b1.wait_exit(20) == 1
    err = b1.stderr()
    assert "kraft-broker: halted: the metadata log dir" in err, err
    assert any(e["event"] == "halt" for e in b1.events())


def test_failure_timeout_shuts_down_only_a_leader_D5(make_cluster):
    ctrl, brokers = make_cluster(broker_extra={**FAST, "log.dir.failure.timeout.ms": "1500"})
    b1, b2 = brokers

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1, 2)), 30, "brokers unfenced", brokers)
            await create_and_settle(client, reader, brokers, "t", {p: [1, 2] for p in range(3)})
        finally:
            await client.close()

    asyncio.run(run())
    # broker 1 leads a partition in each dir; broker 2 only follows
    lead_dir = next(d for d in b1.dirs[1:] if any(n.startswith("t-") for n in os.listdir(d)))
    follow_dir = next(d for d in b2.dirs[1:] if any(n.startswith("t-") for n in os.listdir(d)))
    ctrl.kill()                     # the failure can no longer be reported
    break_dir(lead_dir)
    break_dir(follow_dir)
    assert b1.wait_exit(20) == 1, "the leader did not shut down"
    assert "could not report the offline log dir" in b1.stderr(), b1.stderr()
    assert any(e["event"] == "failure_timeout_shutdown" for e in b1.events())
    wait_until(lambda: any(e["event"] == "failure_timeout_expired" for e in b2.events()), 20,
               "broker 2's failure timer to expire")
    assert b2.alive(), b2.stderr()


def test_dir_failing_while_loading_logs_is_reported_after_registration(make_cluster, tmp_path):
    """An OSError while loading a dir's logs at start (a segment that is a directory): the
    dir is registered (its id is known) and reported offline by the first heartbeats; the
    broker runs on the other dirs (reference §1.6 gotcha, §10.16)."""
    ctrl, brokers = make_cluster(n_brokers=1, broker_extra=FAST)
    [b1] = brokers

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1,)), 30, "broker unfenced", brokers)
            assert b1.stop() == 0, b1.stderr()
            bad = b1.dirs[2]
            os.makedirs(os.path.join(bad, "junk-0", "00000000000000000000.log"))
            b1.start()
            bad_id = b1.dir_ids()[bad]
            await until(reader, lambda im: im.brokers[1].epoch > 0 and bad_id not in im.brokers[1].log_dirs
                        and not im.brokers[1].fenced and len(im.brokers[1].log_dirs) == 2, 30,
                        "re-registered, the bad dir reported offline, unfenced", brokers)
        finally:
            await client.close()

    asyncio.run(run())
    ev = b1.events()
    offline = [e for e in ev if e["event"] == "dir_offline"]
    assert offline and offline[-1]["op"] == "load", offline
    assert b1.alive()
