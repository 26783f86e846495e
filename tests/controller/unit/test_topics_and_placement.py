"""CreateTopics (placement, Directories, ISR invariants, errors) and the placement rule."""

import uuid

import pytest

from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from controller_impl.state.cluster_control import default_dir
from controller_impl.state.placement import PlacementError, place
from controller_impl.state.topics import topic_name_problem

from controller_harness import Harness, dir_id as d, kinds

pytestmark = pytest.mark.unit


def test_create_topic_records_and_directories():
    # RCMT testCreateTopics / testCreatePartitions: single dir → that dir; multi → UNASSIGNED.
    h = Harness()
    h.start_broker(1, [d(1, 1), d(1, 2)])
    h.start_broker(2, [d(2, 1)])
    res, t = h.create_topic("orders", 4, 2)
    assert t.error_code.value == 0 and t.num_partitions == 4 and t.replication_factor == 2
    assert kinds(res) == ["TopicRecord"] + ["PartitionRecord"] * 4
    assert res.records[1].__version__ == 1
    assert h.image.topic_ids["orders"] == t.topic_id
    for pid, p in h.image.partitions_of(t.topic_id).items():
        assert sorted(p.replicas) == [1, 2] and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert p.directories == tuple(UNASSIGNED if b == 1 else d(2, 1) for b in p.replicas)
    leaders = [p.leader for p in h.image.partitions_of(t.topic_id).values()]
    assert set(leaders) == {1, 2}  # spread


def test_fenced_brokers_only_as_followers_and_out_of_isr():
    # RCMT testCreateTopicsISRInvariants; behaviour §6 placement.
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    h.register(2, [d(2, 1)])  # fenced
    _, t = h.create_topic("t", 3, 2)
    for p in h.image.partitions_of(t.topic_id).values():
        assert p.replicas[0] == 1 and p.leader == 1 and p.isr == (1,)
        assert p.directories == (d(1, 1), d(2, 1))  # Directories set for fenced replicas too


def test_create_errors():
    h = Harness()
    _, t = h.create_topic("t", 1, 1)
    assert t.error_code.value == 38 and "fenced" in t.error_message  # no broker at all
    h.register(1, [d(1, 1)])
    _, t = h.create_topic("t", 1, 1)
    assert t.error_code.value == 38  # only fenced brokers
    h.heartbeat(1)
    _, t = h.create_topic("t", 1, 2)
    assert t.error_code.value == 38 and "larger" in t.error_message
    _, t = h.create_topic("t", 0, 1)
    assert t.error_code.value == 37
    _, t = h.create_topic("bad/name", 1, 1)
    assert t.error_code.value == 17
    res, t = h.create_topic("t", 1, 1)
    assert t.error_code.value == 0
    res, t = h.create_topic("t", 1, 1)
    assert t.error_code.value == 36 and res.records == ()


def test_defaults_and_validate_only():
    h = Harness(num_partitions=3, default_replication_factor=1)
    h.start_broker(1, [d(1, 1)])
    res, t = h.create_topic("v", validate_only=True)
    assert t.error_code.value == 0 and t.num_partitions == 3 and res.records == ()
    assert "v" not in h.image.topic_ids
    res, t = h.create_topic("v")
    assert t.num_partitions == 3 and len(h.image.partitions_of(t.topic_id)) == 3


def test_manual_assignments():
    h = Harness()
    for b in (1, 2, 3):
        h.start_broker(b, [d(b, 1)])
    _, t = h.create_topic("m", assignments=[[3, 1], [2, 3]])
    assert t.error_code.value == 0
    assert h.part(t.topic_id, 0).replicas == (3, 1) and h.part(t.topic_id, 0).leader == 3
    for bad in ([[1, 1]], [[1], [1, 2]], [[9]], []):
        if not bad:
            continue
        _, t = h.create_topic("n", assignments=bad)
        assert t.error_code.value == 39, bad
    h.heartbeat(3, want_fence=True)
    _, t = h.create_topic("n", assignments=[[3]])
    assert t.error_code.value == 39 and "fenced" in t.error_message
    _, t = h.create_topic("n", assignments=[[3, 1]])
    assert t.error_code.value == 0 and h.part(t.topic_id).isr == (1,) and h.part(t.topic_id).leader == 1


def test_two_topics_in_one_request_and_duplicates():
    from kio.schema.create_topics.v7 import request as ct7
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    mk = lambda n: ct7.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=(), configs=())
    res = h.apply(h.state.handle_create_topics(ct7.CreateTopicsRequest(topics=(mk("a"), mk("b"), mk("c"), mk("c"))), 0))
    codes = [t.error_code.value for t in res.response.topics]
    assert codes == [0, 0, 42, 42] and set(h.image.topic_ids) == {"a", "b"}


def test_old_create_topics_version_response():
    from kio.schema.create_topics.v2 import request as ct2
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    req = ct2.CreateTopicsRequest(topics=(ct2.CreatableTopic(name="old", num_partitions=2, replication_factor=1,
                                                             assignments=(), configs=()),))
    res = h.apply(h.state.handle_create_topics(req, 0))
    assert res.response.__version__ == 2 and res.response.topics[0].error_code.value == 0


def test_placement_rule():
    assert place(3, 2, [1, 2, 3], []) == [(1, 2), (2, 3), (3, 1)]
    assert place(2, 3, [2], [5, 4]) == [(2, 4, 5), (2, 5, 4)]
    assert place(1, 1, [1, 2], [], start=1) == [(2,)]
    for args, msg in [((1, 1, [], [1]), "fenced"), ((1, 3, [1], [2]), "larger"), ((0, 1, [1], []), "partitions"),
                      ((1, 0, [1], []), "replication factor")]:
        with pytest.raises(PlacementError, match=msg):
            place(*args)


def test_placement_turns_the_followers_each_round():
    # 3 brokers: leaders rotate 1, 2, 3; the followers' order turns each round, so the
    # partitions one broker leads do not all share one first follower
    got = place(6, 3, [1, 2, 3], [])
    assert got == [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2), (2, 1, 3), (3, 2, 1)]
    # whichever broker fails, its leaders move (to the first follower) evenly to the others
    for failed in (1, 2, 3):
        big = place(300, 3, [1, 2, 3], [])
        heirs = [next(b for b in r if b != failed) for r in big if r[0] == failed]
        assert len(heirs) == 100 and sorted({h: heirs.count(h) for h in heirs}.values()) == [50, 50]
    # 4 brokers RF 3: each broker's 3 possible first followers all get used
    first = {r[1] for r in place(12, 3, [1, 2, 3, 4], []) if r[0] == 1}
    assert first == {2, 3, 4}
    # every replica list has distinct brokers, with and without a start offset
    for start in range(7):
        for rf in (1, 2, 3, 4, 5):
            assert all(len(set(r)) == rf for r in place(20, rf, [1, 2, 3, 4, 5], [], start=start))


def test_default_dir():
    # CCMT testDefaultDir (no MIGRATING case: every registration has dirs, D2).
    from kafka_common.metadata.model import BrokerRegistration
    one = BrokerRegistration(1, 0, uuid.uuid4(), (), None, False, False, (d(1, 1),))
    two = BrokerRegistration(1, 0, uuid.uuid4(), (), None, False, False, (d(1, 1), d(1, 2)))
    assert default_dir(None) == UNASSIGNED and default_dir(one) == d(1, 1) and default_dir(two) == UNASSIGNED


@pytest.mark.parametrize("name,ok", [("a.b-c_D9", True), ("", False), (".", False), ("..", False),
                                     ("x" * 249, True), ("x" * 250, False), ("ü", False), ("a b", False)])
def test_topic_names(name, ok):
    assert (topic_name_problem(name) is None) == ok


def test_a_request_over_the_partition_bound_is_refused_before_placement():
    """One CreateTopics asking for 2^31-1 partitions must not make the controller build them
    (a 40-byte request would otherwise hang it and eat its memory): POLICY_VIOLATION, no records."""
    from controller_impl.state.topics import MAX_PARTITIONS_PER_REQUEST
    h = Harness()
    h.start_broker(1, [d(1, 1)])
    res, t = h.create_topic("huge", 2**31 - 1, 1)
    assert t.error_code.name == "policy_violation" and res.records == ()
    assert "huge" not in h.image.topic_ids
    res, t = h.create_topic("at-limit", MAX_PARTITIONS_PER_REQUEST, 1)
    assert t.error_code.value == 0 and len(res.records) == 1 + MAX_PARTITIONS_PER_REQUEST
