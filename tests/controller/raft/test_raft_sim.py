"""Raft's safety properties under message loss, partitions and crashes (simulated cluster,
manual clock): election safety, log matching, leader completeness, state machine safety —
checked after every simulated millisecond by :class:`SimCluster` — plus liveness when the
faults stop."""

import pytest

from tests.controller.raft.sim_cluster import SimCluster

pytestmark = pytest.mark.unit


def _settle(c: SimCluster, ms: int = 3000) -> int:
    for _ in range(ms // 10):
        c.step(10)
        leader = c.leader()
        if leader is not None and all(c.hw(i) == c.hw(leader) for i in c.voters) and c.hw(leader) > 0:
            return leader
    raise AssertionError("no stable leader")


@pytest.mark.parametrize("n", [1, 3, 5])
def test_elects_one_leader_and_commits_on_every_voter(n):
    c = SimCluster(n, seed=n)
    leader = _settle(c)
    for _ in range(20):
        assert c.propose()
        c.step(2)
    c.step(500)
    assert c.leader() == leader
    hws = {c.hw(i) for i in c.voters}
    assert hws == {len(c.nodes[leader].log)}
    assert all(c.nodes[i].log == c.nodes[leader].log for i in c.voters)


@pytest.mark.parametrize("seed", range(25))
def test_safety_under_loss_partitions_and_crashes(seed):
    c = SimCluster(3 if seed % 2 else 5, seed=seed, loss=0.05)
    rng = c.rng
    crashed: set[int] = set()
    for _ in range(60):
        action = rng.random()
        if action < 0.2 and len(crashed) < (len(c.voters) - 1) // 2:
            victim = c.leader() if rng.random() < 0.6 else rng.choice(c.voters)
            if victim is not None and victim not in crashed:
                c.crash(victim)
                crashed.add(victim)
        elif action < 0.35 and crashed:
            i = crashed.pop()
            c.restart(i)
        elif action < 0.45:
            c.partition({rng.choice(c.voters)})
        elif action < 0.55:
            c.heal()
        for _ in range(rng.randint(0, 5)):
            c.propose()
        c.step(rng.randint(5, 120))
    c.heal()
    for i in list(crashed):
        c.restart(i)
    c.loss = 0.0
    leader = _settle(c, 5000)
    c.propose()
    leader = _settle(c, 3000)
    # every committed entry survived, in place, on every voter
    for i in c.voters:
        log = c.nodes[i].log
        assert all(log[o] == e for o, e in c.committed.items()), f"node {i} lost a committed entry"
    assert len(c.committed) > 0
    assert c.hw(leader) >= len(c.committed)


def test_minority_never_commits():
    c = SimCluster(5, seed=7)
    leader = _settle(c)
    c.partition({leader, [i for i in c.voters if i != leader][0]})  # the leader with one follower
    before = c.hw(leader)
    for _ in range(50):
        c.propose()
        c.step(3)
    c.step(100)
    assert c.hw(leader) == before  # two of five hold the new entries: nothing more commits
    c.step(1000)
    new_leader = c.leader()
    assert new_leader is not None and new_leader != leader   # the majority side elected another
    c.heal()
    _settle(c)
    assert c.nodes[leader].log == c.nodes[c.leader()].log  # the old leader's tail was truncated


def test_isolated_voter_does_not_disrupt_the_quorum_when_it_returns():
    c = SimCluster(3, seed=11)
    leader = _settle(c)
    epoch = c.nodes[leader].state.epoch
    lonely = [i for i in c.voters if i != leader][0]
    c.partition({lonely})
    c.step(3000)  # its pre-votes fail: it never bumps the epoch
    assert c.nodes[lonely].state.epoch == epoch
    c.heal()
    c.step(500)
    assert c.leader() == leader and c.nodes[leader].state.epoch == epoch


def test_without_pre_vote_an_isolated_voter_bumps_epochs():
    c = SimCluster(3, seed=11, pre_vote=False)
    leader = _settle(c)
    epoch = c.nodes[leader].state.epoch
    lonely = [i for i in c.voters if i != leader][0]
    c.partition({lonely})
    c.step(3000)
    assert c.nodes[lonely].state.epoch > epoch


def test_leader_cut_off_resigns_by_check_quorum():
    c = SimCluster(3, seed=5)
    leader = _settle(c)
    c.partition({leader})
    c.step(1000)
    assert c.nodes[leader].state.role != "leader"
    others = [i for i in c.voters if i != leader]
    assert c.leader() in others
