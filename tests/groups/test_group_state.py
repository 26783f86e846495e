"""The pure group state machine (``broker_impl.groups.state.group``): Kafka's classic
protocol rules, driven by hand with explicit times, no I/O."""

from __future__ import annotations

import random

import pytest

from broker_impl.groups.state import codes as E
from broker_impl.groups.state.group import (
    GroupConfig, Groups, GroupState, JoinResult, OffsetEntry, Reply, StoreGroup, SyncResult, parse_subscription,
)

pytestmark = pytest.mark.unit
SUB = b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"   # consumer subscription v0: topic "t"


class Harness:
    def __init__(self, **cfg) -> None:
        cfg.setdefault("initial_rebalance_delay_ms", 0)
        self.g = Groups(GroupConfig(**cfg), random.Random(1))
        self.token = 0
        self.replies: dict[int, object] = {}
        self.stored: list[StoreGroup] = []

    def run(self, effects) -> None:
        for e in effects:
            if isinstance(e, Reply):
                self.replies[e.token] = e.result
            else:
                assert isinstance(e, StoreGroup)
                self.stored.append(e)
                for r in e.replies:   # the write is durable at once here
                    self.replies[r.token] = r.result

    def join(self, member_id="", now=0, instance=None, protocols=(("range", SUB),), v4=True, session=10000,
             rebalance=30000, group="g"):
        self.token += 1
        immediate, effects = self.g.join(group, member_id=member_id, instance_id=instance, protocol_type="consumer",
                                         protocols=protocols, session_timeout_ms=session,
                                         rebalance_timeout_ms=rebalance, client_id="c", client_host="/h",
                                         require_known_member_id=v4, token=self.token, now_ms=now)
        self.run(effects)
        return immediate if immediate is not None else self.token

    def sync(self, member_id, generation, assignments=(), now=0, instance=None, group="g"):
        self.token += 1
        immediate, effects = self.g.sync(group, member_id=member_id, instance_id=instance, generation=generation,
                                         protocol_type="consumer", protocol_name="range", assignments=assignments,
                                         token=self.token, now_ms=now)
        self.run(effects)
        return immediate if immediate is not None else self.token

    def tick(self, now):
        self.run(self.g.tick(now))

    def member(self, now=0, **kw) -> tuple[str, int]:
        """A member through MEMBER_ID_REQUIRED; (member id, parked join token)."""
        first = self.join(now=now, **kw)
        assert isinstance(first, JoinResult) and first.error == E.MEMBER_ID_REQUIRED
        return first.member_id, self.join(first.member_id, now=now, **kw)


def test_single_member_joins_syncs_and_is_stable():
    h = Harness()
    mid, tok = h.member()
    res = h.replies[tok]
    assert isinstance(res, JoinResult) and res.error == E.NONE
    assert (res.generation, res.leader, res.member_id, res.protocol_name) == (1, mid, mid, "range")
    assert [m[0] for m in res.members] == [mid]          # the leader gets the member list
    stok = h.sync(mid, 1, [(mid, b"assign")])
    assert h.replies[stok] == SyncResult(E.NONE, "consumer", "range", b"assign")
    assert h.g.get("g").state is GroupState.STABLE
    assert [s.generation for s in h.stored] == [1]        # the group record is written before the answer


def test_v3_join_without_member_id_is_accepted_at_once():
    h = Harness()
    tok = h.join(v4=False)
    res = h.replies[tok]
    assert res.error == E.NONE and res.member_id.startswith("c-") and res.generation == 1


def test_second_member_triggers_rebalance_and_both_get_new_generation():
    h = Harness()
    a, tok = h.member()
    h.sync(a, 1, [(a, b"all")])
    b, tok_b = h.member(now=10)
    assert tok_b not in h.replies and h.g.get("g").state is GroupState.PREPARING_REBALANCE
    # a learns of the rebalance through its heartbeat, then rejoins
    assert h.g.heartbeat("g", member_id=a, instance_id=None, generation=1, now_ms=20) == E.REBALANCE_IN_PROGRESS
    tok_a = h.join(a, now=30)
    ra, rb = h.replies[tok_a], h.replies[tok_b]
    assert ra.generation == rb.generation == 2 and ra.leader == a
    assert len(ra.members) == 2 and rb.members == ()
    # old generation is fenced
    assert h.g.heartbeat("g", member_id=b, instance_id=None, generation=1, now_ms=40) == E.ILLEGAL_GENERATION
    sb = h.sync(b, 2)
    assert sb not in h.replies                                # parked until the leader's assignment
    sa = h.sync(a, 2, [(a, b"p0"), (b, b"p1")])
    assert h.replies[sa].assignment == b"p0" and h.replies[sb].assignment == b"p1"


def test_member_not_rejoining_within_rebalance_timeout_is_removed():
    h = Harness()
    a, _ = h.member(rebalance=5000)
    h.sync(a, 1, [(a, b"x")])
    b, tok_b = h.member(now=100, rebalance=5000)
    h.tick(4000)
    assert tok_b not in h.replies
    h.tick(5100)                                               # a never rejoined
    res = h.replies[tok_b]
    assert res.error == E.NONE and res.generation == 2 and res.leader == b
    assert set(h.g.get("g").members) == {b}


def test_session_timeout_removes_silent_member():
    h = Harness()
    a, _ = h.member(session=6000)
    h.sync(a, 1, [(a, b"x")])
    assert h.g.heartbeat("g", member_id=a, instance_id=None, generation=1, now_ms=5000) == E.NONE
    h.tick(10999)
    assert a in h.g.get("g").members
    h.tick(11001)
    g = h.g.get("g")
    assert not g.members and g.state is GroupState.EMPTY and g.generation == 2


def test_unknown_member_and_wrong_generation_errors():
    h = Harness()
    a, _ = h.member()
    assert h.g.heartbeat("g", member_id="nope", instance_id=None, generation=1, now_ms=0) == E.UNKNOWN_MEMBER_ID
    assert h.g.heartbeat("other", member_id=a, instance_id=None, generation=1, now_ms=0) == E.UNKNOWN_MEMBER_ID
    assert h.join("nope").error == E.UNKNOWN_MEMBER_ID
    assert h.sync(a, 7).error == E.ILLEGAL_GENERATION
    assert h.join(session=10).error == E.INVALID_SESSION_TIMEOUT
    assert h.join(protocols=()).error == E.INCONSISTENT_GROUP_PROTOCOL


def test_initial_rebalance_delay_collects_members_then_extends_up_to_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3000)
    a, tok_a = h.member(now=0, rebalance=10000)
    b, tok_b = h.member(now=2000, rebalance=10000)
    h.tick(3000)                              # a member joined during the window: wait another delay
    assert tok_a not in h.replies
    h.tick(6000)
    assert h.replies[tok_a].generation == 1 and {m[0] for m in h.replies[tok_a].members} == {a, b}


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced():
    h = Harness()
    tok = h.join(instance="i1")                                # static: no MEMBER_ID_REQUIRED
    first = h.replies[tok]
    assert first.error == E.NONE
    h.sync(first.member_id, 1, [(first.member_id, b"mine")])
    tok2 = h.join(instance="i1", now=100)                     # restarted: empty member id
    again = h.replies[tok2]
    assert again.error == E.NONE and again.generation == 1 and again.member_id != first.member_id
    assert again.skip_assignment and again.leader == again.member_id
    assert h.g.get("g").state is GroupState.STABLE
    assert h.g.heartbeat("g", member_id=first.member_id, instance_id="i1", generation=1,
                         now_ms=200) == E.FENCED_INSTANCE_ID
    s = h.sync(again.member_id, 1, instance="i1")
    assert s.assignment == b"mine"                            # Stable: the stored assignment


def test_leave_group_rebalances_and_static_leave_by_instance_id():
    h = Harness()
    a, _ = h.member()
    h.sync(a, 1, [(a, b"x")])
    tok = h.join(instance="s", now=10)
    err, per, effects = h.g.leave("g", [(a, None)], 20)
    h.run(effects)
    assert (err, per) == (E.NONE, [E.NONE])
    assert h.replies[tok].error == E.NONE and h.replies[tok].generation == 2
    _, per, _ = h.g.leave("g", [("", "s"), ("ghost", None)], 30)
    assert per == [E.NONE, E.UNKNOWN_MEMBER_ID]


def test_offset_commit_validation():
    h = Harness()
    assert h.g.validate_commit("simple", member_id="", instance_id=None, generation=-1, now_ms=0) == E.NONE
    assert h.g.get("simple").state is GroupState.EMPTY
    assert h.g.validate_commit("nogroup", member_id="m", instance_id=None, generation=3,
                               now_ms=0) == E.ILLEGAL_GENERATION
    a, tok = h.member()
    assert h.g.validate_commit("g", member_id=a, instance_id=None, generation=1,
                               now_ms=0) == E.REBALANCE_IN_PROGRESS   # CompletingRebalance
    h.sync(a, 1, [(a, b"")])
    assert h.g.validate_commit("g", member_id=a, instance_id=None, generation=1, now_ms=0) == E.NONE
    assert h.g.validate_commit("g", member_id=a, instance_id=None, generation=0, now_ms=0) == E.ILLEGAL_GENERATION
    assert h.g.validate_commit("g", member_id="x", instance_id=None, generation=1, now_ms=0) == E.UNKNOWN_MEMBER_ID
    assert h.g.validate_commit("g", member_id="", instance_id=None, generation=-1,
                               now_ms=0) == E.UNKNOWN_MEMBER_ID      # not Empty: no simple commits
    h.g.commit("g", [("t", 0, OffsetEntry(5, -1, "", 1))])
    assert h.g.get("g").offsets[("t", 0)].offset == 5


def test_delete_group_and_offset_delete_rules():
    h = Harness()
    a, _ = h.member()
    h.sync(a, 1, [(a, b"")])
    assert h.g.delete_group("g", 0) == E.NON_EMPTY_GROUP
    assert h.g.offset_delete_errors("g", ["t", "u"]) == (E.NONE, {"t": E.GROUP_SUBSCRIBED_TO_TOPIC, "u": E.NONE})
    h.run(h.g.leave("g", [(a, None)], 10)[2])
    assert h.g.get("g").state is GroupState.EMPTY
    assert h.g.delete_group("g", 20) == E.NONE and h.g.get("g") is None
    h.g.forget("g")
    assert "g" not in h.g.groups and h.g.delete_group("g", 30) == E.GROUP_ID_NOT_FOUND


def test_store_failure_drops_assignment_and_rebalances():
    h = Harness()
    a, _ = h.member()
    h.sync(a, 1, [(a, b"x")])
    h.run(h.g.store_failed("g", 1, 50))
    g = h.g.get("g")
    assert g.state is GroupState.PREPARING_REBALANCE and g.members[a].assignment == b""


def test_unload_answers_parked_requests_not_coordinator():
    h = Harness()
    a, _ = h.member()
    b, tok_b = h.member(now=1)
    h.run(h.g.unload(["g"]))
    assert h.replies[tok_b].error == E.NOT_COORDINATOR and h.g.get("g") is None


def test_protocol_vote_prefers_common_first_choice():
    h = Harness()
    _, tok = h.member(protocols=(("roundrobin", SUB), ("range", SUB)))
    assert h.replies[tok].protocol_name == "roundrobin"
    h2 = Harness(initial_rebalance_delay_ms=1000)
    h2.member(protocols=(("range", SUB), ("roundrobin", SUB)))
    _, tok2 = h2.member(protocols=(("roundrobin", SUB), ("cooperative-sticky", SUB), ("range", SUB)))
    _, tok3 = h2.member(protocols=(("roundrobin", SUB),))
    h2.tick(1000)                             # members kept coming during the delay: one more
    h2.tick(2000)
    assert h2.replies[tok2].protocol_name == "roundrobin" == h2.replies[tok3].protocol_name


def test_parse_subscription():
    assert parse_subscription(SUB) == ["t"]
    assert parse_subscription(b"\x00") is None


def test_next_deadline_and_pending_member_expiry():
    h = Harness()
    first = h.join(session=7000)
    assert h.g.next_deadline_ms() == 7000
    h.tick(7000)
    assert h.join(first.member_id, now=7001).error == E.UNKNOWN_MEMBER_ID
