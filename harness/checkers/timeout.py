"""Timeout accuracy (decision D5): ``log.dir.failure.timeout.ms`` shutdown, or none.

For each disk fault on broker *b*, the timer starts when *b* marks the dir offline (its
``dir_offline`` event, time *D*). With *t* = ``configs.log_dir_failure_timeout_ms`` and
*h* = ``configs.heartbeat_interval_ms``:

- ``expect.timeout_shutdown`` True: a ``failure_timeout_shutdown`` event from *b* at
  *D + t ± h*. None by *D + t + h* (history reaching that far) → false.
- False: no such event, with the history reaching *D + t + h* (else unknown).
- None: every shutdown that did happen must be on time (vacuously true if none).
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult, merge_valid
from harness.checkers.common import NOT_A_FAILURE_MODES, WHOLE_NODE_DIRS, dir_offline_events, injected_faults
from harness.history.model import History

__all__ = ["check_timeout_accuracy"]

MS = 1_000_000


def check_timeout_accuracy(scenario, history: History) -> CheckResult:
    timeout_ms = scenario.configs.log_dir_failure_timeout_ms
    hb_ms = scenario.configs.heartbeat_interval_ms
    want = scenario.expect.timeout_shutdown
    end = history.end_ns or 0
    verdicts, rows = [], []
    # a delay fault is a slow disk, not a failed one: it must never start the D5 timer (the
    # failover check's "no false failover" judges it), so it has no timeout to be accurate about
    disk = [f for f in injected_faults(history) if f.kind == "disk" and f.node_id is not None
            and f.mode not in NOT_A_FAILURE_MODES]
    if not disk:
        return CheckResult("timeout_accuracy", UNKNOWN, "no disk failure in the history (delay faults are not "
                                                        "failures)", {})
    for f in disk:
        b = f.node_id
        row: dict = {"fault_id": f.fault_id, "node_id": b, "timeout_ms": timeout_ms, "tolerance_ms": hb_ms}
        offline = dir_offline_events(history, b, f.dir_ids, f.ts_ns) if f.dir_ref not in WHOLE_NODE_DIRS \
            else history.events("dir_offline", source="node", node_id=b)
        shutdowns = [e for e in history.events("failure_timeout_shutdown", source="node", node_id=b)
                     if e.ts_ns >= f.ts_ns]
        if not offline:
            row["problem"] = "broker never marked the dir offline: timer start unknown"
            v = UNKNOWN if not shutdowns or want is not False else False
        else:
            d = offline[0].ts_ns
            row["dir_offline_after_fault_ms"] = (d - f.ts_ns) / MS
            horizon = d + (timeout_ms + hb_ms) * MS
            if shutdowns:
                took = (shutdowns[0].ts_ns - d) / MS
                row["shutdown_after_dir_offline_ms"] = took
                on_time = abs(took - timeout_ms) <= hb_ms
                if want is False:
                    v, row["problem"] = False, f"shut down after {took:.0f} ms though it led nothing there (D5)"
                else:
                    v = on_time
                    if not on_time:
                        row["problem"] = f"shut down after {took:.0f} ms, expected {timeout_ms} ± {hb_ms} ms"
            elif want is True:
                v = False if end >= horizon else UNKNOWN
                row["problem"] = "no failure-timeout shutdown" + ("" if v is False else " yet (history too short)")
            elif want is False:
                v = True if end >= horizon else UNKNOWN
                if v == UNKNOWN:
                    row["problem"] = "history ends before the timeout could have fired"
            else:
                v = True
        row["valid"] = v
        verdicts.append(v)
        rows.append(row)
    valid = merge_valid(verdicts)
    problems = [r["problem"] for r in rows if r.get("problem")]
    summary = "; ".join(problems) if problems else (
        f"shutdown at {timeout_ms} ± {hb_ms} ms as expected" if want else
        "no failure-timeout shutdown, as expected" if want is False else "every failure-timeout shutdown on time")
    return CheckResult("timeout_accuracy", valid, summary, {"faults": rows, "expect_shutdown": want})
