"""The system suite's scenario values: only the workload/drain are shortened (the shrunk
timings and checks stay the catalog's), S9 fails the dir right after the move."""

from __future__ import annotations

import pytest

from harness.catalog.catalog import by_name
from tests.system.test_system import (AFTER_LAST_FAULT_MS, MANY_DURATION_MS, MARGINAL, MISSING, SLOW_FAULT_MS,
                                   SUITE, SUITE_DURATION_MS, suite_scenario)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("variant", [v for v in SUITE if v != "soak"])
def test_suite_keeps_the_catalog_value_but_the_workload_length(variant: str) -> None:
    base, s = by_name(variant), suite_scenario(variant)
    assert s.configs == base.configs and s.checks == base.checks and s.expect == base.expect
    assert s.topology == base.topology and s.workload.topics == base.workload.topics
    shortest = MANY_DURATION_MS if base.id == "S15" else SUITE_DURATION_MS
    last_end = max(f.at_ms + (getattr(f, "duration_ms", None) or 0) for f in s.faults)
    duration = max(shortest, last_end + AFTER_LAST_FAULT_MS)
    assert s.workload.duration_ms == duration and s.workload.client == "confluent-kafka"
    assert duration <= max(base.workload.duration_ms, shortest)   # never longer than the catalog's own run
    assert all(f.at_ms < duration for f in s.faults)
    if variant.startswith("move-replica"):   # the catalog itself fails the dir mid-move (same at_ms)
        assert base.faults[1].at_ms == base.faults[0].at_ms
    if base.id == "S10":
        assert [getattr(f, "duration_ms", None) for f in s.faults if getattr(f, "duration_ms", None)] == \
            [SLOW_FAULT_MS] * 2
        assert all(f.at_ms + SLOW_FAULT_MS + 5000 <= duration for f in s.faults if getattr(f, "duration_ms", None))
    else:
        assert s.faults == base.faults


def test_soak_is_short_and_heals_before_the_end() -> None:
    s = suite_scenario("soak")
    assert s.id == "S11" and s.faults
    assert all(f.at_ms < s.workload.duration_ms - 6000 for f in s.faults)


def test_known_duplicates_only_where_a_leader_leads_several_partitions() -> None:
    from tests.system.test_system import DUPLICATES
    assert set(DUPLICATES) <= set(SUITE)
    assert all(by_name(v).workload.topics[0].partitions > 1 for v in DUPLICATES if v != "soak")


def test_every_xfail_names_a_known_check() -> None:
    assert not set(MISSING) & set(MARGINAL)
    for (variant, check), reason in (*MISSING.items(), *MARGINAL.items()):
        assert variant in SUITE and len(reason) > 40
        assert check == "schedule" or check in by_name(variant).checks


def _history(extra) -> object:
    """Five acked produces on t1-0, consumed back where acked, drained to the end; ``extra``
    adds to it."""
    from tests.harness.builders import H
    h = H()
    for i in range(5):
        h.produce(1000 + i * 10, 1005 + i * 10, f"v{i}", 0, offset=i)
    for i in range(5):
        h.consume(5000 + i, f"v{i}", 0, i)
    extra(h)
    h.drained(6000, 0, 9)
    return h.build()


@pytest.mark.parametrize("extra,only", [
    (lambda h: h.consume(5100, "v2", 0, 5), True),                                # v2 appended twice
    (lambda h: (h.consume(5100, "v2", 0, 5), h.produce(2000, 2005, "v9", 0, offset=6)), False),   # + lost
    (lambda h: (h.consume(5100, "v2", 0, 5), h.consume(5101, "ghost", 0, 6)), False),            # + phantom
    (lambda h: h.produce(2000, 2005, "v9", 0, offset=6), False),                  # lost alone
    (lambda h: None, False),                                                      # durable
], ids=["duplicates", "duplicates+lost", "duplicates+phantom", "lost", "clean"])
def test_known_duplicates_xfail_only_when_duplicates_are_the_only_error(extra, only: bool) -> None:
    from harness.checkers.durability import check_durability
    from tests.system.test_system import only_duplicates
    r = check_durability(by_name("leader-dir-fails"), _history(extra))
    assert only_duplicates(r) is only, r


def test_known_duplicates_xfail_fails_on_reordering() -> None:
    from harness.checkers.durability import check_durability
    from tests.system.test_system import only_duplicates
    from tests.harness.builders import H
    h = H()
    h.produce(1000, 1005, "a", 0, offset=1).produce(1010, 1015, "b", 0, offset=0)   # b invoked after a's ack
    h.consume(5000, "b", 0, 0).consume(5001, "a", 0, 1).consume(5002, "a", 0, 2)    # and a appended twice
    h.drained(6000, 0, 3)
    r = check_durability(by_name("leader-dir-fails"), h.build())
    assert r.details["reordered_count"] == 1 and r.details["duplicates_count"] == 1
    assert not only_duplicates(r)
