"""History: node event logs + ledger merged in time order; bad lines kept as problems."""

import json

import pytest

from harness.history.model import ClientOp, Event, parse_ledger, parse_node_events
from harness.results.ledger import LedgerWriter, load_history
from tests.harness.builders import ns

pytestmark = pytest.mark.unit


def test_merge_orders_by_time_and_keeps_everything(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    with LedgerWriter(ledger) as w:
        w.write(ClientOp(ts_ns=ns(10), type="invoke", f="produce", process="p0", topic="t1", partition=0,
                         value_id="v1"))
        w.write(Event(ts_ns=ns(20), source="harness", event="fault_injected", node_id=2,
                      attrs={"fault_id": "f0", "kind": "disk", "node_ref": "leader:t1/0", "dir_ids": ["x"]}))
        w.write(ClientOp(ts_ns=ns(40), type="ok", f="produce", process="p0", topic="t1", partition=0,
                         value_id="v1", offset=7))
    b2 = tmp_path / "broker-2.events"
    b2.write_text("\n".join([
        json.dumps({"ts_ns": ns(30), "node_id": 2, "role": "broker", "event": "dir_offline", "dir_id": "x",
                    "path": "/d1", "errno": 5, "op": "fsync"}),
        '{"ts_ns": 12, "node_id": 2, "event"',  # half-written last line after a halt
    ]))
    h = load_history(ledger, [b2, tmp_path / "never-started.events"])
    assert [e.index for e in h] == [0, 1, 2, 3]
    assert [getattr(e, "event", getattr(e, "type", None)) for e in h] == ["invoke", "fault_injected",
                                                                          "dir_offline", "ok"]
    off = h.events("dir_offline")[0]
    assert off.role == "broker" and off.get("errno") == 5 and off.source == "node"
    pairs = h.produce_pairs()
    assert len(pairs) == 1 and pairs[0].outcome == "ok" and pairs[0].completion.offset == 7
    assert h.resolve_ref("leader:t1/0") == 2 and h.resolve_ref("broker:3") == 3 and h.resolve_ref("x") is None
    assert len(h.problems) == 2
    assert any("broker-2.events:2" in p for p in h.problems)
    assert any("never-started" in p for p in h.problems)


def test_ledger_validation_names_line_and_problem():
    lines = [json.dumps({"ts_ns": 1, "source": "client", "type": "maybe", "f": "produce"}),
             json.dumps({"ts_ns": 1, "source": "client", "type": "ok", "f": "delete"}),
             json.dumps({"ts_ns": "soon", "source": "harness", "event": "fault_healed"}),
             json.dumps({"ts_ns": 1, "source": "robot", "event": "x"}),
             json.dumps({"ts_ns": 5, "source": "client", "event": "drained", "topic": "t1", "partition": 0,
                         "offset": 9})]
    entries, problems = parse_ledger(lines, "L")
    assert len(entries) == 1 and entries[0].event == "drained"
    assert problems[0].startswith("L:1: 'type' 'maybe' is not one of invoke, ok, fail, info")
    assert problems[1].startswith("L:2: 'f' 'delete'")
    assert problems[2].startswith("L:3: 'ts_ns' must be an integer")
    assert problems[3].startswith("L:4: 'source' 'robot'")


def test_unmatched_invoke_is_indeterminate():
    events, problems = parse_node_events(["", "[1]"], "n")
    assert events == [] and problems == ["n:2: not a JSON object: '[1]'"]
    from harness.history.model import History
    h = History.of([ClientOp(ts_ns=1, type="invoke", f="produce", process="p", value_id="a")])
    assert h.produce_pairs()[0].outcome == "info"


def test_runner_helpers_write_what_the_checkers_read(tmp_path):
    from harness.checkers.common import injected_faults
    from harness.scenario.faults import DiskFault, NetworkFault, RefBindings
    from harness.history.model import fault_healed_event, fault_injected_event
    fault = DiskFault(at_ms=5000, node="leader:t1/0", dir="replica:t1/0", mode="flaky", p=0.05, duration_ms=100)
    net = NetworkFault(at_ms=1, action="partition", node="leader:t1/0", peer="controller:3001")
    assert fault.label() == "flaky(0.05)" and net.label() == "partition"
    bindings, calls = RefBindings(), []
    lookup = lambda ref: calls.append(ref) or 2  # noqa: E731
    assert bindings.node("leader:t1/0", lookup) == 2 and bindings.node("leader:t1/0", lookup) == 2
    assert len(calls) == 1 and bindings.node("broker:3", lookup) == 3
    assert bindings.dirs(2, "replica:t1/0", lambda n, ref: ["X"]) == ("X",)
    ledger = tmp_path / "l.jsonl"
    with LedgerWriter(ledger) as w:
        w.write(fault_injected_event(fault, 0, ts_ns=ns(5000), node_id=2, dir_ids=["X"], paths=["/d1"]))
        w.write(fault_healed_event(fault, 0, ts_ns=ns(5100), node_id=2))
        w.op(ns(5001), "invoke", "produce", "p0", topic="t1", partition=0, value_id="a")
        w.action(ns(9000), "node_status", 2, alive=True)
        w.drained(ns(9001), "t1", 0, 1)
        with pytest.raises(ValueError):
            w.op(ns(1), "done", "produce", "p0")
    h = load_history(ledger, [])
    [f] = injected_faults(h)
    assert (f.fault_id, f.kind, f.mode, f.dir_ids, f.dir_ref, f.label) == \
        ("f0", "disk", "flaky", ("X",), "replica:t1/0", "flaky(0.05)")
    assert f.healed_ns == ns(5100) and h.resolve_ref("leader:t1/0") == 2 and not h.problems
