"""Unavailability per op kind: produces, readers' consumes and group members' consumes each
have their own gaps around a fault window, and the drain (which reads everything back after
the workload) takes no part — pooled with the produces, its first record made S1's report show a
3.1–3.4 s "gap" where the longest gap between acked produces was 225–431 ms. The figures are
checked against a plain walk over the client_ops rows, for both engines."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.results import tables as rio
from harness.results import schema as rs
from harness.analysis import pandas_engine

pytestmark = pytest.mark.integration
MS = 1_000_000
FAULT, HEAL = 5000, 15000


def _ops() -> list[dict]:
    rows = []

    def op(client, kind, t, outcome="ok", p=0):
        rows.append(dict(run_id="kinds", scenario="S20", client_id=client, op=kind, topic="t1", partition=p,
                         outcome=outcome, ts_invoke_ns=(t - (2 if kind == "produce" else 0)) * MS, ts_complete_ns=t * MS))
    for t in [*range(0, 6000, 100), *range(6400, 15000, 100)]:       # produces: one 500 ms gap (5900 → 6400)
        op("p0", "produce", t)
    for t in [*range(7000, 9000, 50), *range(10200, 15000, 50)]:      # a reader: 1250 ms without a record
        op("reader-0", "consume", t)
    op("reader-0", "consume", 9500, outcome="fail")
    for t in range(0, 15000, 100):
        op("group-m0", "consume", t)
    for t in range(18000, 19000, 5):                                 # the drain, after the workload
        op("drain", "consume", t)
    return rows


def _expected(rows: list[dict]) -> dict[str, float]:
    """The longest gap between consecutive ok completions of each kind that overlaps the window."""
    out = {}
    for kind, clients in (("produce", {"p0"}), ("consume", {"reader-0"}), ("group-consume", {"group-m0"})):
        ts = sorted(r["ts_complete_ns"] for r in rows if r["client_id"] in clients and r["outcome"] == "ok")
        gaps = [(b - a) / MS for a, b in zip(ts, ts[1:]) if a < HEAL * MS and b > FAULT * MS]
        out[kind] = max(gaps)
    return out


@pytest.fixture(scope="module")
def kinds_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("kinds") / "kinds"
    rio.write_run_json(run, rs.RunInfo(run_id="kinds", scenario="S20", seed=0, fault_backend="fuse"))
    rio.write_table(run, "events", [rs.event_row(o, run_id="kinds", scenario="S20", source="harness") for o in (
        {"ts_ns": FAULT * MS, "event": "fault_injected", "fault_id": "f0", "fault_kind": "bad-blocks"},
        {"ts_ns": HEAL * MS, "event": "fault_healed", "fault_id": "f0"})])
    rows = _ops()
    rio.write_table(run, "client_ops", rows)
    return run, rows


def _check(summary, rows) -> None:
    un = summary["unavailability"].set_index("op_kind")
    assert sorted(un.index) == ["consume", "group-consume", "produce"], "the drain is not service"
    want = _expected(rows)
    assert want == {"produce": 500.0, "consume": 1250.0, "group-consume": 100.0}
    for kind, gap in want.items():
        assert un.loc[kind, "longest_gap_ms"] == gap, kind
    assert un.loc["produce", "unavailable_ms"] == 100.0        # last ok at the fault (5000) → the next (5100)
    assert un.loc["consume", "failed_ops"] == 1 and pd.isna(un.loc["consume", "last_ok_ns"])
    s = summary["unavailability_summary"]
    gaps = s[s["metric"] == "longest_gap_ms"].set_index("op_kind")["max"].to_dict()
    assert gaps == want


def test_pandas_gaps_per_op_kind_agree_with_the_client_ops(kinds_run):
    run, rows = kinds_run
    _check(pandas_engine.analyze([run]), rows)


def test_spark_gaps_per_op_kind_agree_with_the_client_ops(kinds_run, spark):
    from harness.analysis import spark_engine
    run, rows = kinds_run
    s = spark_engine.analyze([run], spark=spark)
    _check(s, rows)
    p = pandas_engine.analyze([run])
    for name in ("unavailability", "unavailability_summary"):
        pd.testing.assert_frame_equal(s[name], p[name], check_exact=True)
