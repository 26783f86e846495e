"""harness.nemesis.operator: the move plan (pure) and the calls through kafka-python's
KafkaAdminClient against real processes (1 controller + 4 brokers × 3 dirs)."""

from __future__ import annotations

import pytest

from harness.nemesis import operator as aa
from testkit.cluster import running_cluster


def test_plan_moves_replaces_in_place_and_spreads():
    replicas = {("t", 0): [1, 2, 3], ("t", 1): [2, 1, 3], ("t", 2): [3, 2, 4], ("t", 3): [1, 3, 4]}
    plan = aa.plan_moves(replicas, 1, [1, 2, 3, 4, 5])
    assert sorted(plan) == [("t", 0), ("t", 1), ("t", 3)]
    for key, target in plan.items():
        assert 1 not in target and len(set(target)) == 3
        assert [b for b in target if b in replicas[key]] == [b for b in replicas[key] if b != 1]
        assert target.index(next(b for b in target if b not in replicas[key])) == replicas[key].index(1)
    assert {plan[k][replicas[k].index(1)] for k in plan} == {5}   # 0 replicas before: the least loaded each time
    with pytest.raises(ValueError, match="nowhere to move"):
        aa.plan_moves({("t", 0): [1, 2, 3]}, 1, [1, 2, 3])


@pytest.mark.integration
def test_reassign_off_and_elect_through_kafka_python(tmp_path):
    with running_cluster(tmp_path, n_brokers=4, controller_extra={"auto.leader.rebalance.enable": "false"}) as c:
        c.create_topic("aa", {0: [1, 2, 3], 1: [2, 3, 1], 2: [2, 3, 4]})
        c.wait_image(lambda im: "aa" in im.topic_ids and all(
            len(p.isr) == 3 for p in im.partitions_of(im.topic_ids["aa"]).values()), 30, "aa in sync")
        plan, errors = aa.reassign_off(c.bootstrap, 1)
        assert errors == {} and plan == {("aa", 0): [4, 2, 3], ("aa", 1): [2, 3, 4]}
        assert aa.wait_reassignments(c.bootstrap, 60) == []
        im = c.image()
        tid = im.topic_ids["aa"]
        assert [im.partition(tid, p).replicas for p in range(3)] == [(4, 2, 3), (2, 3, 4), (2, 3, 4)]
        got = aa.elect(c.bootstrap, "preferred", ["aa"])
        assert set(got) == {"aa/0", "aa/1", "aa/2"}
        assert all(v in ("NONE", "ELECTION_NOT_NEEDED") for v in got.values()), got
        assert aa.elect(c.bootstrap, "unclean", ["aa"]) == {f"aa/{p}": "ELECTION_NOT_NEEDED" for p in range(3)}
