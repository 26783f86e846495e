"""The results contract: write with the helper, read back identical; bad input is refused."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from harness.results import tables as rio
from harness.results import schema as rs

pytestmark = pytest.mark.unit


def _metric(**kw):
    row = dict(run_id="r1", scenario="S1", backend="fuse", metric="detect_ms", value=12.5, unit="ms",
               config=rs.config_label(log_dir_failure_timeout_ms=30000))
    row.update(kw)
    return row


def test_round_trip_every_table(tmp_path):
    run = tmp_path / "r1"
    rio.write_run_json(run, rs.RunInfo(run_id="r1", scenario="S1", seed=7, versions={"git_sha": "abc"},
                                      fault_backend="fuse", fidelity="block-eio-via-fuse"))
    ev = rs.event_row({"ts_ns": 10, "event": "dir_offline", "node_id": 2, "dir_id": "d-1", "errno": 5,
                       "op": "fsync", "isr": [1, 3], "extra": {"x": 1}}, run_id="r1", scenario="S1", source="node")
    rio.write_table(run, "events", [ev])
    rio.write_table(run, "client_ops", [dict(run_id="r1", scenario="S1", op="produce", partition=0, offset=5,
                                            value_id="v5", outcome="ok", ts_invoke_ns=1, ts_complete_ns=2)])
    rio.write_table(run, "metrics", [_metric(), _metric(value=13.0)])  # two calls append
    rio.write_table(run, "metrics", [_metric(metric="acked_lost", value=0, unit="count")])
    rio.write_table(run, "resources", [dict(run_id="r1", scenario="S1", node_id=1, ts_ns=3, cpu_percent=4.5,
                                           rss_bytes=10)])
    rio.write_table(run, "checks", [dict(run_id="r1", scenario="S1", checker="durability", valid="true",
                                        details="{}")])
    runs = rio.read_runs([tmp_path])
    assert [i.run_id for i in runs.infos] == ["r1"] and runs.infos[0].seed == 7
    e = runs["events"].to_pylist()[0]
    assert e["scenario"] == "S1" and e["dir_id"] == "d-1" and e["isr"] == [1, 3] and e["errno"] == 5
    assert json.loads(e["attrs"]) == {"dir_id": "d-1", "errno": 5, "op": "fsync", "isr": [1, 3], "extra": {"x": 1}}
    assert sorted(runs["metrics"].column("value").to_pylist()) == [0.0, 12.5, 13.0]
    assert runs["metrics"].schema.equals(rs.METRICS_SCHEMA.with_metadata(None), check_metadata=False)
    assert runs["checks"].num_rows == 1 and runs["resources"].num_rows == 1 and runs["client_ops"].num_rows == 1
    # hive layout: the files do not carry the partition column
    files = list((run / "metrics").glob("scenario=S1/*.parquet"))
    assert len(files) == 2 and "scenario" not in pq.read_schema(files[0]).names


def test_missing_table_reads_empty_with_schema(tmp_path):
    rio.write_run_json(tmp_path / "r", rs.RunInfo(run_id="r", scenario="S2", seed=1))
    runs = rio.read_runs([tmp_path / "r"])
    assert runs["events"].num_rows == 0 and runs["events"].schema.names == rs.EVENTS.names


@pytest.mark.parametrize("bad, message", [
    (dict(metric="detectms"), "column 'metric'"),
    (dict(value="fast"), "field 'value'"),
    (dict(backend=None), "required field 'backend'"),
    (dict(scenario="../x"), "scenario"),
    (dict(colour="red"), "unknown field"),
])
def test_bad_rows_are_refused_and_nothing_written(tmp_path, bad, message):
    with pytest.raises(rs.ResultsError, match=message):
        rio.write_table(tmp_path, "metrics", [_metric(), _metric(**bad)])
    assert not (tmp_path / "metrics").exists()


def test_bad_run_dirs_named(tmp_path):
    with pytest.raises(rs.ResultsError, match="no run.json"):
        rio.read_runs([tmp_path])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text("{\"run_id\": \"r\"}")
    with pytest.raises(rs.ResultsError, match="missing field 'scenario'"):
        rio.read_runs([tmp_path])
    with pytest.raises(rs.ResultsError, match="unknown results table"):
        rio.write_table(tmp_path, "nope", [])


def test_config_label_is_canonical():
    assert rs.config_label(b=2, a=1, c=None) == "a=1,b=2"
    assert rs.config_label() == "default"


def test_metrics_config_defaults_to_label_of_config_fields(tmp_path):
    import pyarrow as pa

    row = _metric(log_dir_failure_timeout_ms=5000, broker_session_timeout_ms=9000)
    del row["config"]
    bare = _metric()
    del bare["config"]
    t = rio.to_table("metrics", [row, bare, _metric(config="mine")])
    assert t.column("config").to_pylist() == [
        "broker_session_timeout_ms=9000,log_dir_failure_timeout_ms=5000", "default", "mine"]
    as_table = pa.table({k: [v] for k, v in row.items()})
    assert rio.to_table("metrics", as_table).column("config").to_pylist() == [
        "broker_session_timeout_ms=9000,log_dir_failure_timeout_ms=5000"]


def test_event_row_keeps_odd_values_in_attrs_only():
    import uuid

    d = uuid.UUID(int=7)
    row = rs.event_row({"ts_ns": 1, "event": "dir_offline", "node_id": 1, "errno": "EIO", "isr": "1,2",
                        "dir_id": d, "leader": True}, run_id="r", scenario="S", source="node")
    assert row["dir_id"] == str(d) and "errno" not in row and "isr" not in row and "leader" not in row
    assert json.loads(row["attrs"])["errno"] == "EIO"
    rio.to_table("events", [row])  # valid
    with pytest.raises(rs.ResultsError, match="node_id"):
        rs.event_row({"ts_ns": 1, "event": "x", "node_id": "one"}, run_id="r", scenario="S", source="node")
