"""Node event log lines and config loading (real files)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from kafka_common import ids
from kafka_runtime.events import EventLog, read_events
from kafka_runtime.properties import ConfigLoadError, load_config

pytestmark = pytest.mark.integration


def test_event_lines_are_json_with_the_common_fields_and_flushed(tmp_path):
    path = tmp_path / "sub" / "events.jsonl"
    log = EventLog(str(path), 3, "controller")
    before = time.time_ns()
    d = uuid.UUID(int=12345 << 64)
    log.emit("partition_change", topic="t", partition=0, leader=2, isr=(2, 3), directories=[d])
    # flushed per line: readable before close
    [line] = read_events(str(path))
    assert line["event"] == "partition_change" and line["node_id"] == 3 and line["role"] == "controller"
    assert before <= line["ts_ns"] <= time.time_ns()
    assert line["isr"] == [2, 3] and line["directories"] == [ids.to_base64(d)]
    log.close()
    EventLog(str(path), 3, "controller").emit("halt", reason="x")
    assert [e["event"] for e in read_events(str(path))] == ["partition_change", "halt"]
    with open(path) as f:
        assert all(json.loads(l) for l in f)


def test_event_log_without_a_path_only_counts():
    log = EventLog("", 1, "broker")
    log.emit("x")
    assert log.count == 1


def test_load_config_warns_on_unknown_keys_and_defaults_metadata_dir(tmp_path):
    path = tmp_path / "s.properties"
    path.write_text("process.roles=broker\nnode.id=2\nlisteners=PLAINTEXT://h:1\n"
                    "controller.quorum.voters=1@h:2\nlog.dirs=/a,/b\nmystery=1\n")
    warnings = []
    cfg = load_config(str(path), warn=warnings.append)
    assert cfg.metadata_log_dir == "/a"
    assert len(warnings) == 1 and "mystery" in warnings[0]


def test_load_config_errors_name_file_key_and_value(tmp_path):
    path = tmp_path / "s.properties"
    path.write_text("process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://h:1\n"
                    "metadata.log.dir=/m\nbroker.session.timeout.ms=soon\n")
    with pytest.raises(ConfigLoadError) as err:
        load_config(str(path))
    assert "broker.session.timeout.ms" in str(err.value) and "soon" in str(err.value)
    assert str(path) in str(err.value)
    with pytest.raises(ConfigLoadError, match="cannot read"):
        load_config(str(tmp_path / "missing"))
