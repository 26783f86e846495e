"""The system suite's scenario values: only the workload/drain are shortened (the shrunk
timings and checks stay the catalog's), S9 fails the dir right after the move."""

from __future__ import annotations

import pytest

from scenarios.catalog import by_name
from scenarios.test_system import MANY_DURATION_MS, MISSING, SLOW_FAULT_MS, SUITE, SUITE_DURATION_MS, suite_scenario

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("variant", [v for v in SUITE if v != "soak"])
def test_suite_keeps_the_catalog_value_but_the_workload_length(variant: str) -> None:
    base, s = by_name(variant), suite_scenario(variant)
    assert s.configs == base.configs and s.checks == base.checks and s.expect == base.expect
    assert s.topology == base.topology and s.workload.topics == base.workload.topics
    duration = MANY_DURATION_MS if base.id == "S15" else SUITE_DURATION_MS
    assert s.workload.duration_ms == duration and s.workload.client == "confluent-kafka"
    assert all(f.at_ms < duration for f in s.faults)
    if variant.startswith("move-replica"):
        assert s.faults[1].at_ms == s.faults[0].at_ms and s.faults[1:] != base.faults[1:]
    elif base.id == "S10":
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
    from scenarios.test_system import DUPLICATES
    assert set(DUPLICATES) <= set(SUITE)
    assert all(by_name(v).workload.topics[0].partitions > 1 for v in DUPLICATES if v != "soak")


def test_every_xfail_names_a_known_check() -> None:
    for (variant, check), reason in MISSING.items():
        assert variant in SUITE and len(reason) > 40
        assert check == "schedule" or check in by_name(variant).checks
