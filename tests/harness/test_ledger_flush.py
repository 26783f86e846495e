"""The ledger's flushing: a harness action reaches the file at once, client ops within
FLUSH_S (with a later line) or at close, and nothing is lost or reordered."""

from __future__ import annotations

import pytest

from harness.history.model import ClientOp, Event
from harness.results import ledger as ledger_mod
from harness.results.ledger import LedgerWriter, load_history

pytestmark = pytest.mark.unit


def _lines(path) -> list[str]:
    return path.read_text().splitlines()


def test_an_action_is_on_disk_at_once_and_buffered_ops_with_it(tmp_path):
    path = tmp_path / "ledger.jsonl"
    w = LedgerWriter(path)
    w.op(1, "invoke", "produce", "p0", topic="t", partition=0, value_id="v0")
    assert _lines(path) == []                       # a client op waits in the buffer
    w.action(2, "node_started", node_id=1)
    assert len(_lines(path)) == 2                   # the action flushed both, in order
    w.close()


def test_client_ops_are_flushed_by_a_line_written_after_flush_s(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(ledger_mod.time, "monotonic", lambda: clock[0])
    path = tmp_path / "ledger.jsonl"
    w = LedgerWriter(path)
    w.op(1, "invoke", "produce", "p0", topic="t", partition=0, value_id="v0")
    clock[0] += ledger_mod.FLUSH_S / 2
    w.op(2, "ok", "produce", "p0", topic="t", partition=0, value_id="v0", offset=0)
    assert _lines(path) == []
    clock[0] += ledger_mod.FLUSH_S
    w.op(3, "invoke", "produce", "p0", topic="t", partition=0, value_id="v1")
    assert len(_lines(path)) == 3
    w.close()


def test_close_writes_every_line_and_the_history_reads_them_back(tmp_path):
    path = tmp_path / "ledger.jsonl"
    with LedgerWriter(path) as w:
        for i in range(500):
            w.op(i, "invoke", "produce", "p0", topic="t", partition=i % 3, value_id=f"v{i}")
            w.op(i, "ok", "produce", "p0", topic="t", partition=i % 3, value_id=f"v{i}", offset=i)
        w.action(1000, "node_exited", node_id=2, code=0)
    history = load_history(path, [])
    ops = [e for e in history.entries if isinstance(e, ClientOp)]
    assert len(ops) == 1000 and [o.value_id for o in ops[::2]] == [f"v{i}" for i in range(500)]
    assert any(isinstance(e, Event) and e.event == "node_exited" for e in history.entries)
