"""The group-consumption checker and the rebalance metric on hand-built histories (pure)."""

from __future__ import annotations

import pytest

from harness.checkers.base import UNKNOWN
from harness.checkers.group_consumption import check_group_consumption, rebalance_ms
from harness.history.model import ClientOp, Event
from tests.harness.builders import H, ns

pytestmark = pytest.mark.unit


def gconsume(h: H, t: float, vid: str, partition: int, offset: int, member: int = 0) -> H:
    h.entries.append(ClientOp(ts_ns=ns(t), type="ok", f="consume", process=f"group-m{member}", topic="t1",
                              partition=partition, value_id=vid, offset=offset))
    return h


def client_event(h: H, t: float, event: str, **attrs) -> H:
    h.entries.append(Event(ts_ns=ns(t), source="client", event=event, attrs={"group": "g", **attrs}))
    return h


def good() -> H:
    h = H().produce(0, 5, "a", 0, 0).produce(1, 6, "b", 0, 1).produce(2, 7, "c", 1, 0)
    gconsume(h, 10, "a", 0, 0)
    gconsume(h, 11, "b", 0, 1)
    client_event(h, 12, "offsets_committed", member="group-m0", topic="t1", partition=0, offset=2)
    gconsume(h, 13, "c", 1, 0, member=1)
    client_event(h, 14, "offsets_committed", member="group-m1", topic="t1", partition=1, offset=1)
    return h


def test_valid_run():
    h = good()
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 2], ["t1", 1, 1]])
    r = check_group_consumption(None, h.build())
    assert r.valid is True, r


def test_unconsumed_acked_record_is_an_error_only_below_the_final_commit():
    h = good().produce(3, 8, "d", 1, 1)
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 2], ["t1", 1, 1]])
    assert check_group_consumption(None, h.build()).valid == UNKNOWN          # d at offset 1: not reached
    h = good().produce(3, 8, "d", 1, 1)
    client_event(h, 15, "offsets_committed", member="group-m1", topic="t1", partition=1, offset=2)
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 2], ["t1", 1, 2]])
    r = check_group_consumption(None, h.build())
    assert r.valid is False and r.details["unconsumed_count"] == 1


def test_commit_going_backwards_and_commit_lost():
    h = good()
    client_event(h, 15, "offsets_committed", member="group-m1", topic="t1", partition=0, offset=1)
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 2], ["t1", 1, 1]])
    r = check_group_consumption(None, h.build())
    assert r.valid is False and r.details["committed_backwards"][0]["from"] == 2
    h = good()
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 1], ["t1", 1, 1]])   # the coordinator lost one
    r = check_group_consumption(None, h.build())
    assert r.valid is False and r.details["commit_lost"] == [{"topic": "t1", "partition": 0, "committed": 2,
                                                              "fetched": 1}]


def test_never_acked_values():
    h = good().produce(3, 4, "refused", 0, outcome="fail").produce(3, 4, "maybe", 0, outcome="info")
    gconsume(h, 15, "maybe", 0, 2)
    client_event(h, 20, "offsets_fetched", offsets=[["t1", 0, 2], ["t1", 1, 1]])
    assert check_group_consumption(None, h.build()).valid is True             # unknown outcome: may be there
    gconsume(h, 16, "refused", 0, 3)
    gconsume(h, 17, "ghost", 0, 4)
    r = check_group_consumption(None, h.build())
    assert r.valid is False and r.details["never_acked"] == ["ghost", "refused"]


def test_no_group_activity_is_unknown_and_rebalance_ms():
    assert check_group_consumption(None, H().produce(0, 1, "a", 0, 0).build()).valid == UNKNOWN
    h = H()
    client_event(h, 100, "group_revoked", member="group-m0", partitions=[])
    client_event(h, 350, "group_assigned", member="group-m0", partitions=[["t1", 0]])
    client_event(h, 120, "group_revoked", member="group-m1", partitions=[])
    assert [(r["member"], r["value"]) for r in rebalance_ms(h.build())] == [("group-m0", 250.0)]
