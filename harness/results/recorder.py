"""Write one run to ``results/<run_id>/``: run.json + the Parquet tables of
:mod:`harness.results.schema` (events, client_ops, metrics, resources, checks).

``record_run`` takes the values a run produced — the scenario, its merged history, the check
report, resource samples — computes the metrics if not given, and writes everything through
the schema module (which validates before writing anything). The events table holds the
whole history: node events, harness actions and client ops (``event`` =
``produce_invoke``, ``produce_ok``, ``consume_ok``, …, attrs carrying the op's fields), so
one table replays the run. Lines the history loader could not parse are kept in
``history_problems.txt``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.results import tables as rio
from harness.results import schema as rs
from harness.checkers import CheckReport, valid_text
from harness.history.model import ClientOp, Event, History, entry_to_json
from harness.checkers.metrics import compute_metrics
from harness.scenario.model import Scenario

__all__ = ["record_run", "new_run_id", "event_rows", "client_op_rows", "metric_rows", "check_rows", "host_facts"]


def new_run_id(scenario: Scenario, started_ns: int | None = None) -> str:
    """``<UTC yyyymmddThhmmss>-<variant>-s<seed>``: sortable, a valid path segment."""
    started_ns = time.time_ns() if started_ns is None else started_ns
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started_ns / 1e9))
    return f"{stamp}-{scenario.variant}-s{scenario.seed}"


_INT_COLUMNS = ("node_id", "partition", "leader", "errno")
_STR_COLUMNS = ("role", "dir_id", "path", "topic", "op", "reason", "fault_id", "fault_kind")


def _typed_ok(key: str, value: Any) -> bool:
    if key in _INT_COLUMNS:
        return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31
    if key == "isr":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if key in _STR_COLUMNS:
        return isinstance(value, str)
    return True


def event_rows(history: History, *, run_id: str, scenario: str,
               problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``events`` rows of the whole history. A typed column whose value has the wrong
    type (a node logging ``"partition": "0"``) is left null; the value stays in ``attrs``
    and the mismatch is reported in ``problems``, so one odd event never loses a run."""
    rows = []
    for e in history:
        obj = entry_to_json(e)
        source = obj.pop("source", "node")
        if isinstance(e, ClientOp):
            obj["event"] = f"{e.f}_{e.type}"
            obj["op_type"] = obj.pop("type")
            obj["op"] = e.f
        elif isinstance(e, Event) and e.role is not None:
            obj["role"] = e.role
        row = rs.event_row(obj, run_id=run_id, scenario=scenario, source=source)
        for key in _INT_COLUMNS + _STR_COLUMNS + ("isr",):
            value = obj.get(key)
            # event_row leaves a typed column null when the value does not fit; say so
            if value is not None and (row.get(key) is None or not _typed_ok(key, row[key])):
                if problems is not None:
                    problems.append(f"events: entry {e.index} ({row['event']}): {key}={value!r} has the wrong "
                                    "type; kept in attrs only")
                row[key] = None
        rows.append(row)
    return rows


def client_op_rows(history: History, *, run_id: str, scenario: str) -> list[dict[str, Any]]:
    """One row per produce (invoke + completion; never completed → ``info``) and per consumed
    record (``ok``, invoke = completion time)."""
    rows = []
    for pair in history.produce_pairs():
        inv, done = pair.invoke, pair.completion
        rows.append({
            "run_id": run_id, "scenario": scenario, "client_id": inv.process, "op": "produce",
            "topic": (done.topic if done and done.topic is not None else inv.topic),
            "partition": (done.partition if done and done.partition is not None else inv.partition),
            "offset": done.offset if done else None, "value_id": inv.value_id, "outcome": pair.outcome,
            "ts_invoke_ns": inv.ts_ns, "ts_complete_ns": done.ts_ns if done else None,
            "error": (done.error if done else "no completion recorded")})
    for op in history.ops("consume"):
        if op.type == "invoke":
            continue
        rows.append({"run_id": run_id, "scenario": scenario, "client_id": op.process, "op": "consume",
                     "topic": op.topic, "partition": op.partition, "offset": op.offset, "value_id": op.value_id,
                     "outcome": op.type, "ts_invoke_ns": op.ts_ns, "ts_complete_ns": op.ts_ns, "error": op.error})
    return rows


def metric_rows(metrics: Iterable[Mapping[str, Any]], *, run_id: str, scenario: Scenario, scenario_name: str,
                backend: str, fidelity: str) -> list[dict[str, Any]]:
    c = scenario.configs
    label = rs.config_label(log_dir_failure_timeout_ms=c.log_dir_failure_timeout_ms,
                            broker_heartbeat_interval_ms=c.heartbeat_interval_ms,
                            broker_session_timeout_ms=c.session_timeout_ms)
    return [{**m, "run_id": run_id, "scenario": scenario_name, "backend": backend, "fidelity": fidelity,
             "log_dir_failure_timeout_ms": c.log_dir_failure_timeout_ms,
             "broker_heartbeat_interval_ms": c.heartbeat_interval_ms,
             "broker_session_timeout_ms": c.session_timeout_ms, "config": label}
            for m in metrics]


def check_rows(report: CheckReport, *, run_id: str, scenario: str) -> list[dict[str, Any]]:
    rows = [{"run_id": run_id, "scenario": scenario, "checker": r.name, "valid": valid_text(r.valid),
             "details": json.dumps({"summary": r.summary, **r.to_dict()["details"]}, sort_keys=True)}
            for r in report.results]
    rows.append({"run_id": run_id, "scenario": scenario, "checker": "all", "valid": valid_text(report.valid),
                 "details": json.dumps({"summary": "composite: false > unknown > true",
                                        "checks": {r.name: valid_text(r.valid) for r in report.results}})})
    return rows


def host_facts() -> dict[str, Any]:
    uname = platform.uname()
    return {"hostname": uname.node, "kernel": uname.release, "machine": uname.machine,
            "cpus": os.cpu_count(), "python": sys.version.split()[0]}


def record_run(results_root: str | os.PathLike, *, scenario: Scenario, history: History,
               report: CheckReport | None = None, run_id: str | None = None,
               metrics: Iterable[Mapping[str, Any]] | None = None,
               resources: Iterable[Mapping[str, Any]] = (), backend: str = "unknown", fidelity: str = "unknown",
               versions: Mapping[str, str] | None = None, node_configs: Mapping[str, Mapping[str, Any]] | None = None,
               started_ns: int | None = None, ended_ns: int | None = None) -> Path:
    """Write the run; returns ``results_root/<run_id>``. The partition value ``scenario`` is
    the scenario's variant name (``leader-dir-fails-bounce``)."""
    if report is None:
        from harness.checkers import run_checks
        report = run_checks(scenario, history)
    run_id = run_id or new_run_id(scenario, started_ns or history.start_ns)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run_id):
        raise rs.ResultsError(f"run_id {run_id!r} is not a path segment")
    name = scenario.variant
    run_dir = Path(results_root) / run_id
    problems = list(history.problems)
    tables = {
        "events": event_rows(history, run_id=run_id, scenario=name, problems=problems),
        "client_ops": client_op_rows(history, run_id=run_id, scenario=name),
        "metrics": metric_rows(compute_metrics(history, scenario) if metrics is None else metrics, run_id=run_id,
                               scenario=scenario, scenario_name=name, backend=backend, fidelity=fidelity),
        "resources": [{**r, "run_id": run_id, "scenario": name} for r in resources],
        "checks": check_rows(report, run_id=run_id, scenario=name),
    }
    validated = {t: rio.to_table(t, rows) for t, rows in tables.items()}  # all valid before any write
    info = rs.RunInfo(run_id=run_id, scenario=name, seed=scenario.seed, scenario_value=scenario.to_dict(),
                      versions={"jbodlab": _version(), "python": sys.version.split()[0], **(versions or {})},
                      fault_backend=backend, fidelity=fidelity, host=host_facts(),
                      configs={str(k): dict(v) for k, v in (node_configs or {}).items()},
                      started_ns=started_ns if started_ns is not None else history.start_ns,
                      ended_ns=ended_ns if ended_ns is not None else history.end_ns)
    rio.write_run_json(run_dir, info)
    for t, table in validated.items():
        rio.write_table(run_dir, t, table)
    if problems:
        (run_dir / "history_problems.txt").write_text("\n".join(problems) + "\n")
    return run_dir


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("jbodlab")
    except Exception:
        return "unknown"
