"""Random operation sequences: every result replays cleanly and the cluster invariants hold.

Invariants after every step: the ISR is never empty and within the replicas; a leader is
in the ISR, its broker registered, unfenced, and its replica's dir online (never an
offline or LOST dir); each broker's online dirs are distinct and owned by it alone;
resending the same heartbeat writes nothing.
"""

import pytest
from hypothesis import given, settings, strategies as st

from kafka_common.ids import LOST, uuid_of

from controller_harness import Harness, dir_id as d

pytestmark = pytest.mark.unit

BROKERS = (1, 2, 3)
DIRS = {b: [d(b, 1), d(b, 2)] for b in BROKERS}

ops = st.one_of(
    st.tuples(st.just("heartbeat"), st.sampled_from(BROKERS), st.sets(st.integers(0, 1)), st.booleans()),
    st.tuples(st.just("create"), st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("assign"), st.sampled_from(BROKERS), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("advance"), st.integers(0, 6000)),
    st.tuples(st.just("restart"), st.sampled_from(BROKERS), st.integers(0, 1000)),
    st.tuples(st.just("shrink"), st.integers(0, 5)),
)


def check_invariants(h):
    img = h.image
    for p in img.all_partitions():
        assert p.isr and set(p.isr) <= set(p.replicas)
        if p.leader != -1:
            reg = img.brokers.get(p.leader)
            assert p.leader in p.isr and reg is not None and not reg.fenced
            assert reg.has_online_dir(p.directory(p.leader)), (p, reg)
    owners = {}
    for b, reg in img.brokers.items():
        for dd in reg.log_dirs:
            assert owners.setdefault(dd, b) == b


@settings(max_examples=150, deadline=None)
@given(st.lists(ops, max_size=50))
def test_random_operations_keep_invariants(steps):
    h = Harness(session_timeout_ms=9000)
    for b in BROKERS:
        h.start_broker(b, DIRS[b])
    offline = {b: set() for b in BROKERS}
    topics = []
    for step in steps:
        kind = step[0]
        if kind == "heartbeat":
            _, b, idx, want_fence = step
            offline[b] |= {DIRS[b][i] for i in idx}
            if b in h.image.brokers:
                res, resp = h.heartbeat(b, offline=sorted(offline[b], key=lambda x: x.int), want_fence=want_fence)
                assert resp.error_code.value == 0
                res2, _ = h.heartbeat(b, offline=sorted(offline[b], key=lambda x: x.int), want_fence=want_fence)
                assert res2.records == ()
        elif kind == "create":
            _, n, rf = step
            _, t = h.create_topic(f"t{len(topics)}", n, rf)
            if t.error_code.value == 0:
                topics.append(t.topic_id)
        elif kind == "assign" and topics:
            _, b, which, pid = step
            tid = topics[pid % len(topics)]
            target = [DIRS[b][0], DIRS[b][1], LOST][which]
            if b in h.image.brokers and pid < len(h.image.partitions_of(tid)):
                _, resp = h.assign(b, {target: [(tid, pid)]})
                assert resp.error_code.value == 0
        elif kind == "advance":
            h.advance(step[1])
            h.tick()
        elif kind == "restart":
            _, b, salt = step
            h.advance(9001)
            h.tick()
            _, resp = h.register(b, DIRS[b], incarnation=uuid_of(0x5000 + b, salt + 1))
            if resp.error_code.value == 0:
                offline[b] = set()
        elif kind == "shrink" and topics:
            tid = topics[step[1] % len(topics)]
            p = h.part(tid, 0)
            if p.leader != -1 and len(p.isr) > 1:
                h.alter_partition(p.leader, tid, 0, [p.leader])
        check_invariants(h)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_long_seeded_random_walk(seed):
    import random
    rnd = random.Random(seed)
    h = Harness(session_timeout_ms=9000)
    for b in BROKERS:
        h.start_broker(b, DIRS[b])
    offline = {b: set() for b in BROKERS}
    topics, seen = [], set()
    for i in range(600):
        kind = rnd.choice(["heartbeat"] * 4 + ["create", "assign", "assign", "advance", "restart", "shrink"])
        b = rnd.choice(BROKERS)
        if kind == "heartbeat":
            if rnd.random() < 0.05:
                offline[b].add(rnd.choice(DIRS[b]))
            if b in h.image.brokers:
                _, resp = h.heartbeat(b, offline=sorted(offline[b], key=lambda x: x.int),
                                      want_fence=rnd.random() < 0.05)
                assert resp.error_code.value == 0
                seen.add("fenced" if resp.is_fenced else "unfenced")
        elif kind == "create":
            _, t = h.create_topic(f"t{i}", rnd.randint(1, 4), rnd.randint(1, 3))
            if t.error_code.value == 0:
                topics.append(t.topic_id)
        elif kind == "assign" and topics:
            tid = rnd.choice(topics)
            n = len(h.image.partitions_of(tid))
            pid = rnd.randrange(n)
            p = h.part(tid, pid)
            if b in p.replicas:
                target = rnd.choice(DIRS[b] + [LOST] * (rnd.random() < 0.1))
                _, resp = h.assign(b, {target: [(tid, pid)]})
                assert resp.error_code.value == 0
        elif kind == "advance":
            h.advance(rnd.randint(0, 4000))
            h.tick()
        elif kind == "restart" and rnd.random() < 0.3:
            h.advance(9001)
            h.tick()
            _, resp = h.register(b, DIRS[b], incarnation=uuid_of(0x6000 + b, i))
            if resp.error_code.value == 0:
                offline[b] = set()
        elif kind == "shrink" and topics:
            tid = rnd.choice(topics)
            p = h.part(tid, 0)
            if p.leader != -1 and len(p.isr) > 1:
                _, resp = h.alter_partition(p.leader, tid, 0, [p.leader])
                assert resp.topics[0].partitions[0].error_code.value == 0
        check_invariants(h)
        for p in h.image.all_partitions():
            seen.add("leaderless" if p.leader == -1 else "led")
    assert {"fenced", "unfenced", "leaderless", "led"} <= seen
