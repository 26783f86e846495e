"""ISR management and leader epochs with real brokers (1 controller + 3 brokers, loopback).

- A follower that stops fetching (SIGSTOP) leaves the ISR after replica.lag.time.max.ms
  through the leader's AlterPartition (the controller's session timeout is far longer, so
  it is not a fencing); acks=all goes on with |ISR| = 2 = min.insync.replicas; with both
  followers stalled acks=all is refused with NOT_ENOUGH_REPLICAS; resumed followers catch
  up and the leader expands the ISR back to 3.
- Truncation on leader change: the leader appends records only it holds (acks=1 while its
  followers are stopped), then dies; a follower becomes leader (new leader epoch) and takes
  new writes; the old leader restarts as a follower, learns from the leader's
  diverging_epoch that its tail diverged, truncates it and replicates the new records: all
  three replicas end byte-identical and consumers never see the lost tail.
"""

from __future__ import annotations

import glob
import os
import signal
import time

import pytest

from testkit.cluster import Cluster, wait_until  # noqa: E402

pytestmark = pytest.mark.integration
NONE, NOT_ENOUGH_REPLICAS = 0, 19


def _cluster(tmp_path, request, session_timeout_ms: int) -> Cluster:
    c = Cluster(tmp_path, broker_extra={"replica.lag.time.max.ms": "1500"}, session_timeout_ms=session_timeout_ms)
    request.addfinalizer(c.kill)
    c.prepare()
    c.start()
    return c


@pytest.fixture
def cluster(tmp_path, request):
    return _cluster(tmp_path, request, 3000)


@pytest.fixture
def long_session_cluster(tmp_path, request):
    """Sessions far longer than the lag time: a stalled follower is not fenced meanwhile."""
    return _cluster(tmp_path, request, 20000)


def isr_of(cluster, topic: str, partition: int = 0) -> tuple[int, ...]:
    im = cluster.image()
    return im.partition(im.topic_ids[topic], partition).isr


def test_isr_shrinks_after_lag_time_and_expands_when_caught_up(long_session_cluster):
    cluster = long_session_cluster
    b1, b2, b3 = cluster.brokers
    cluster.create_topic("isr", {0: [1, 2, 3]})
    cluster.wait_image(lambda im: "isr" in im.topic_ids and len(im.partition(im.topic_ids["isr"], 0).isr) == 3
                       and im.partition(im.topic_ids["isr"], 0).leader == 1, 20, "ISR 1,2,3")
    wait_until(lambda: cluster.produce_raw(b1, "isr", 0, [b"warm"])[0] == NONE, 20, "first acks=all produce")
    os.kill(b3.proc.pid, signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        cluster.wait_image(lambda im: isr_of(cluster, "isr") == (1, 2), 15, "broker 3 out of the ISR")
        assert time.monotonic() - stopped >= 1.0, "shrunk before replica.lag.time.max.ms"
        assert not cluster.image().brokers[3].fenced, "the shrink must come from the leader, not a fencing"
        assert any(e["event"] == "alter_partition" and e["new_isr"] == [1, 2] and e["error_code"] == 0
                   for e in b1.events())
        assert cluster.produce_raw(b1, "isr", 0, [b"two-in-sync"])[0] == NONE
        os.kill(b2.proc.pid, signal.SIGSTOP)
        try:
            cluster.wait_image(lambda im: isr_of(cluster, "isr") == (1,), 15, "broker 2 out of the ISR")
            code, _ = cluster.produce_raw(b1, "isr", 0, [b"refused"])
            assert code == NOT_ENOUGH_REPLICAS
            assert cluster.produce_raw(b1, "isr", 0, [b"acks-1"], acks=1)[0] == NONE
        finally:
            os.kill(b2.proc.pid, signal.SIGCONT)
    finally:
        os.kill(b3.proc.pid, signal.SIGCONT)
    cluster.wait_image(lambda im: isr_of(cluster, "isr") == (1, 2, 3), 20, "ISR expanded back to 1,2,3")
    code, base = cluster.produce_raw(b1, "isr", 0, [b"all-back"])
    assert code == NONE and base == 3  # after warm, two-in-sync, acks-1 (the refused batch was never appended)


def log_bytes(broker, topic: str, partition: int) -> bytes:
    for d in broker.dirs:
        files = sorted(glob.glob(os.path.join(d, f"{topic}-{partition}", "*.log")))
        if files:
            return b"".join(open(f, "rb").read() for f in files)
    return b""


def test_follower_truncates_divergent_tail_after_leader_change(cluster):
    from tests.dataplane.clients import consume_confluent

    b1, b2, b3 = cluster.brokers
    cluster.create_topic("div", {0: [1, 2, 3]})
    im = cluster.wait_image(lambda im: "div" in im.topic_ids and len(im.partition(im.topic_ids["div"], 0).isr) == 3,
                            20, "ISR 1,2,3")
    epoch0 = im.partition(im.topic_ids["div"], 0).leader_epoch
    wait_until(lambda: cluster.produce_raw(b1, "div", 0, [b"c0", b"c1", b"c2"])[0] == NONE, 20, "committed batch")
    wait_until(lambda: log_bytes(b2, "div", 0) == log_bytes(b1, "div", 0) == log_bytes(b3, "div", 0), 10,
               "committed batch on every replica")
    for b in (b2, b3):
        os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        # let the followers' fetches already parked at the leader expire (replica.fetch.wait.max.ms
        # = 100): their answers reach the stopped followers empty, and no new fetch comes
        time.sleep(0.6)
        # only the leader gets these (acks=1, followers stalled): a tail nobody else has
        assert cluster.produce_raw(b1, "div", 0, [b"lost-1", b"lost-2"], acks=1) == (NONE, 3)
        assert cluster.produce_raw(b1, "div", 0, [b"lost-3"], acks=1) == (NONE, 5)
        b1.kill()  # the old leader dies with its divergent tail
    finally:
        for b in (b2, b3):
            os.kill(b.proc.pid, signal.SIGCONT)
    im = cluster.wait_image(lambda im: im.partition(im.topic_ids["div"], 0).leader in (2, 3), 40,
                            "a follower elected after broker 1's session expired")
    reg = im.partition(im.topic_ids["div"], 0)
    assert reg.leader_epoch > epoch0
    leader = cluster.brokers[reg.leader - 1]
    wait_until(lambda: cluster.produce_raw(leader, "div", 0, [b"new-1", b"new-2"], acks=1)[0] == NONE, 20,
               "the new leader takes writes")
    b1.start()  # restarts as a follower of the new leader
    cluster.wait_image(lambda im: im.partition(im.topic_ids["div"], 0).isr == (1, 2, 3), 40, "broker 1 back in ISR")
    wait_until(lambda: log_bytes(b1, "div", 0) == log_bytes(b2, "div", 0) == log_bytes(b3, "div", 0), 15,
               "broker 1 truncated its tail and replicated the new records")
    assert any(e["event"] == "follower_truncated" and e["topic"] == "div" and e["offset"] == 3 for e in b1.events())
    got = consume_confluent(cluster.bootstrap, "div", 5)
    assert [(v, o) for _k, v, _h, o in got] == [(b"c0", 0), (b"c1", 1), (b"c2", 2), (b"new-1", 3), (b"new-2", 4)]
