"""Pure checkers over a run's history: ``(scenario, history) -> CheckResult``.

Tri-state verdicts composed with false > unknown > true (Jepsen). :func:`run_checks` runs
the checks a scenario names, each through :func:`check_safe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.checkers.base import UNKNOWN, CheckResult, Valid, check_safe, merge_valid, valid_text
from harness.checkers.corruption import check_no_corrupt_consumed
from harness.checkers.durability import analyse_durability, check_durability
from harness.checkers.failover import check_failover
from harness.checkers.fencing import check_fencing
from harness.checkers.group_consumption import check_group_consumption
from harness.checkers.liveness import check_liveness
from harness.checkers.metadata import check_metadata_invariants
from harness.checkers.operator import check_preferred_leaders, check_reassignment_complete
from harness.checkers.quorum_logs import check_quorum_logs
from harness.checkers.service import analyse_service, check_service
from harness.checkers.timeout import check_timeout_accuracy
from harness.checkers.topic_admin import check_topic_admin

__all__ = ["CHECKERS", "CheckReport", "CheckResult", "UNKNOWN", "Valid", "run_checks", "merge_valid",
           "check_safe", "valid_text", "analyse_durability", "analyse_service"]

CHECKERS: dict[str, Callable[..., CheckResult]] = {
    "durability": check_durability,
    "failover": check_failover,
    "liveness": check_liveness,
    "timeout_accuracy": check_timeout_accuracy,
    "fencing": check_fencing,
    "metadata_invariants": check_metadata_invariants,
    "service": check_service,
    "quorum_logs": check_quorum_logs,
    "group_consumption": check_group_consumption,     # optional: scenarios with group consumers
    "no_corrupt_consumed": check_no_corrupt_consumed,
    "reassignment_complete": check_reassignment_complete,   # optional: scenarios with a reassign action
    "preferred_leaders": check_preferred_leaders,           # optional: leadership back at the end
    "topic_admin": check_topic_admin,                 # optional: scenarios with admin actions
}


@dataclass(frozen=True)
class CheckReport:
    valid: Valid
    results: tuple[CheckResult, ...]

    def to_dict(self) -> dict:
        return {"valid": valid_text(self.valid), "checks": [r.to_dict() for r in self.results]}


def run_checks(scenario, history, names=None) -> CheckReport:
    """Run ``names`` (default: ``scenario.checks``) and compose the verdicts."""
    results = tuple(check_safe(n, CHECKERS[n], scenario, history) for n in (names or scenario.checks))
    return CheckReport(merge_valid(r.valid for r in results), results)
