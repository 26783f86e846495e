"""Liveness: each broker ends as the scenario expects — alive, shut down, or halted.

Observed outcome per broker, from the history:
- **halted**: a ``halt`` node event, or an unexpected non-zero ``node_exited`` (the harness
  marks exits it caused with ``expected: true``);
- **shutdown**: a ``failure_timeout_shutdown`` node event (then the process exits);
- **alive**: none of those, and the final ``node_status`` action says ``alive: true``.
A broker that shut down or halted must also be fenced by the controller within one session
timeout (+ one heartbeat) of stopping. Expected outcomes come from ``expect.outcomes`` (node refs resolved through the history);
unlisted brokers are expected alive. Without a final ``node_status`` and without an exit
event the verdict for that broker is unknown.
"""

from __future__ import annotations

from harness.checkers.base import UNKNOWN, CheckResult, merge_valid
from harness.history.model import History

__all__ = ["check_liveness", "observed_outcome"]


def observed_outcome(history: History, broker_id: int) -> tuple[str | None, dict]:
    """(``alive``/``shutdown``/``halted``/None, evidence)."""
    ev: dict = {}
    halts = history.events("halt", source="node", node_id=broker_id)
    shutdowns = history.events("failure_timeout_shutdown", source="node", node_id=broker_id)
    exits = [e for e in history.events("node_exited", source="harness", node_id=broker_id)
             if not e.get("expected", False)]
    status = history.events("node_status", source="harness", node_id=broker_id)
    if halts:
        ev["halt"] = {"ts_ns": halts[0].ts_ns, "reason": halts[0].get("reason")}
    if shutdowns:
        ev["failure_timeout_shutdown_ts_ns"] = shutdowns[0].ts_ns
    if exits:
        ev["unexpected_exit"] = {"ts_ns": exits[0].ts_ns, "exit_code": exits[0].get("exit_code")}
    if status:
        ev["final_status_alive"] = bool(status[-1].get("alive"))
    if shutdowns:
        return "shutdown", ev
    if halts or (exits and exits[0].get("exit_code") not in (0, None)):
        return "halted", ev
    if exits:
        return "shutdown", ev
    if status:
        return ("alive" if status[-1].get("alive") else "halted"), ev
    return None, ev


def _fenced_after_exit(scenario, history: History, b: int, ev: dict) -> tuple:
    """A broker that shut down or halted must be fenced by the controller no later than one
    session timeout (+ one heartbeat) after it stopped (it may be fenced earlier, e.g. when
    it was cut off from the controller first)."""
    faults = [e.ts_ns for e in history.faults() if e.node_id == b]
    stop = ev.get("failure_timeout_shutdown_ts_ns") or (ev.get("halt") or {}).get("ts_ns") \
        or (ev.get("unexpected_exit") or {}).get("ts_ns")
    if stop is None:
        return UNKNOWN, "exit time unknown"
    since = faults[0] if faults else stop
    limit_ms = scenario.configs.session_timeout_ms + scenario.configs.heartbeat_interval_ms
    fences = [e for e in history.events("fenced", source="node", role="controller")
              if e.get("broker_id") == b and e.ts_ns >= since]
    if fences and fences[0].ts_ns <= stop + limit_ms * 1_000_000:
        return True, f"fenced {(fences[0].ts_ns - stop) / 1e6:+.0f} ms after it stopped"
    if fences:
        return False, f"fenced only {(fences[0].ts_ns - stop) / 1e6:.0f} ms after it stopped (> {limit_ms} ms)"
    if (history.end_ns or 0) > stop + limit_ms * 1_000_000:
        return False, f"never fenced by the controller within {limit_ms} ms of stopping"
    return UNKNOWN, "history ends before the session timeout"


def check_liveness(scenario, history: History) -> CheckResult:
    expected = {b: "alive" for b in scenario.topology.broker_ids()}
    unresolved = []
    for ref, outcome in scenario.expect.outcomes.items():
        node = history.resolve_ref(ref)
        if node is None:
            unresolved.append(ref)
        else:
            expected[node] = outcome
    verdicts, per_broker, problems = [], {}, []
    for b, want in sorted(expected.items()):
        got, ev = observed_outcome(history, b)
        v = UNKNOWN if got is None else (got == want)
        if v is False:
            problems.append(f"broker {b}: expected {want}, observed {got}")
        elif v is True and want in ("shutdown", "halted") and b in scenario.topology.broker_ids():
            fenced, note = _fenced_after_exit(scenario, history, b, ev)
            ev["controller_fenced"] = note
            if fenced is not True:
                v = fenced
                problems.append(f"broker {b}: {note}")
        verdicts.append(v)
        per_broker[str(b)] = {"expected": want, "observed": got, "evidence": ev, "valid": v}
    if unresolved:
        verdicts.append(UNKNOWN)
        problems.append(f"refs never bound by a fault: {unresolved}")
    valid = merge_valid(verdicts)
    summary = "; ".join(problems) if problems else (
        "every broker ended as expected" if valid is True else "final status of some broker not recorded")
    return CheckResult("liveness", valid, summary, {"brokers": per_broker, "unresolved_refs": unresolved})
