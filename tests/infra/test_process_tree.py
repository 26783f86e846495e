"""The process-tree walk of the runner's resource sampler (pure)."""

from infra.procfaults import descendants


def test_descendants_walks_the_whole_tree_from_its_root_only():
    children_of = {1: [10, 20], 10: [11, 12], 12: [13], 20: [], 99: [100]}
    assert sorted(descendants(children_of, 10)) == [10, 11, 12, 13]
    assert descendants(children_of, 10)[0] == 10   # the root first
    assert sorted(descendants(children_of, 1)) == [1, 10, 11, 12, 13, 20]
    assert descendants(children_of, 13) == [13]
    assert descendants(children_of, 5) == [5]      # a root with no children (or gone)


def test_descendants_survives_a_cycle():
    # a pid reused while the table was read can make a (momentary) loop: no endless walk
    assert sorted(descendants({1: [2], 2: [1, 3]}, 1)) == [1, 2, 3]
