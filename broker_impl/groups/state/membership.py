"""JoinGroup and the rebalance it drives, as pure rules over the groups of a
:class:`MembershipHost` (the :class:`~broker_impl.groups.state.store.GroupStore`): unknown
and known members, static members replacing their old id, the protocol vote, leader choice,
completing the join, members leaving. The public API is
:class:`broker_impl.groups.state.group.Groups`, which composes this part with the store and
adds SyncGroup, Heartbeat, LeaveGroup and the timers (through :meth:`Membership.prepare_rebalance`,
:meth:`~Membership.maybe_complete_join`, :meth:`~Membership.complete_join`,
:meth:`~Membership.remove_member`, :meth:`~Membership.member_gone`).
"""
from __future__ import annotations

from typing import Iterable, Protocol

from broker_impl.groups.state import codes as E
from broker_impl.groups.state.model import (Effect, Group, GroupConfig, GroupState, JoinResult, Member, Reply,
                                            StoreGroup, SyncResult)
from broker_impl.groups.state.store import fenced, touch, transition


class MembershipHost(Protocol):
    """What the membership rules work on: the group catalogue (they add groups to it and
    never remove one), the limits, fresh member ids."""

    config: GroupConfig
    groups: dict[str, Group]

    def new_member_id(self, client_id: str) -> str: ...


class Membership:
    """JoinGroup and rebalancing (see :mod:`broker_impl.groups.state.group` for the rules)."""

    def __init__(self, host: MembershipHost) -> None:
        self.host = host

    # ------------------------------------------------------------------ JoinGroup
    def join(self, group_id: str, *, member_id: str, instance_id: str | None, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
             client_id: str, client_host: str, require_known_member_id: bool, token: int,
             now_ms: int) -> tuple[JoinResult | None, list[Effect]]:
        """(an immediate answer, or None when the JoinGroup is parked under ``token``; effects)."""
        protocols = tuple(protocols)
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id=member_id), []
        config = self.host.config
        if not (config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms):
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=member_id), []
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        g = self.host.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            if member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id), []
            g = Group(group_id, state_timestamp_ms=now_ms)
            self.host.groups[group_id] = g
        if not protocols or not protocol_type or not self._protocols_compatible(g, protocol_type, protocols):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id), []
        args = dict(client_id=client_id, client_host=client_host, protocol_type=protocol_type, protocols=protocols,
                    session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms)
        if not member_id:
            return self._join_unknown(g, instance_id, require_known_member_id, token, now_ms, args)
        return self._join_known(g, member_id, instance_id, token, now_ms, args)

    def _protocols_compatible(self, g: Group, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if g.state is GroupState.EMPTY and not g.members:
            return True
        if g.protocol_type != protocol_type:
            return g.protocol_type is None and not g.members
        names = {n for n, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in g.members.values()) if g.members else True

    def _join_unknown(self, g: Group, instance_id: str | None, require_known: bool, token: int, now_ms: int,
                      args: dict) -> tuple[JoinResult | None, list[Effect]]:
        new_id = self.host.new_member_id(args["client_id"])
        if instance_id is not None:
            old_id = g.static_members.get(instance_id)
            if old_id is not None and old_id in g.members:
                return self._replace_static(g, old_id, new_id, instance_id, token, now_ms, args)
            if len(g.members) >= self.host.config.max_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=""), []
            return None, self._add_member_and_rebalance(g, new_id, instance_id, token, now_ms, args)
        if len(g.members) + len(g.pending_members) >= self.host.config.max_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=""), []
        if require_known:
            g.pending_members[new_id] = now_ms + args["session_timeout_ms"]
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id), []
        return None, self._add_member_and_rebalance(g, new_id, None, token, now_ms, args)

    def _join_known(self, g: Group, member_id: str, instance_id: str | None, token: int, now_ms: int,
                    args: dict) -> tuple[JoinResult | None, list[Effect]]:
        if member_id in g.pending_members:
            del g.pending_members[member_id]
            return None, self._add_member_and_rebalance(g, member_id, instance_id, token, now_ms, args)
        err = fenced(g, member_id, instance_id)
        if err:
            return JoinResult(err, member_id=member_id), []
        m = g.members.get(member_id)
        if m is None:
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id), []
        same = m.protocols == args["protocols"]
        effects: list[Effect] = []
        if m.join_token is not None and m.join_token != token:  # a retried JoinGroup replaces the parked one
            effects.append(Reply(m.join_token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)))
        if g.state is GroupState.PREPARING_REBALANCE:
            self._update_member(m, args)
            m.join_token = token
            return None, effects + self.maybe_complete_join(g, now_ms)
        if g.state is GroupState.COMPLETING_REBALANCE and same:
            return self._current_join(g, m), effects   # it missed the join answer: resend it
        if g.state is GroupState.STABLE and same and member_id != g.leader:
            return self._current_join(g, m), effects
        self._update_member(m, args)
        m.join_token = token
        return None, effects + self.prepare_rebalance(g, now_ms)

    def _current_join(self, g: Group, m: Member) -> JoinResult:
        leader = m.member_id == g.leader
        return JoinResult(E.NONE, member_id=m.member_id, generation=g.generation, protocol_type=g.protocol_type,
                          protocol_name=g.protocol, leader=g.leader or "",
                          members=self._member_list(g) if leader else ())

    def _member_list(self, g: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple((m.member_id, m.instance_id, m.metadata(g.protocol)) for m in g.members.values())

    def _update_member(self, m: Member, args: dict) -> None:
        m.protocols = args["protocols"]
        m.protocol_type = args["protocol_type"]
        m.session_timeout_ms = args["session_timeout_ms"]
        m.rebalance_timeout_ms = args["rebalance_timeout_ms"]
        m.client_id = args["client_id"]
        m.client_host = args["client_host"]

    def _add_member_and_rebalance(self, g: Group, member_id: str, instance_id: str | None, token: int,
                                  now_ms: int, args: dict) -> list[Effect]:
        m = Member(member_id, instance_id, args["client_id"], args["client_host"], args["rebalance_timeout_ms"],
                   args["session_timeout_ms"], args["protocol_type"], args["protocols"], join_token=token)
        touch(m, now_ms)
        if not g.members and g.protocol_type is None:
            g.protocol_type = args["protocol_type"]
        g.members[member_id] = m
        if instance_id is not None:
            g.static_members[instance_id] = member_id
        if g.initial_delay_end_ms is not None:
            g.initial_joined = True
        if g.state is GroupState.PREPARING_REBALANCE:
            return self.maybe_complete_join(g, now_ms)
        return self.prepare_rebalance(g, now_ms)

    def _replace_static(self, g: Group, old_id: str, new_id: str, instance_id: str, token: int, now_ms: int,
                        args: dict) -> tuple[JoinResult | None, list[Effect]]:
        old = g.members.pop(old_id)
        effects: list[Effect] = []
        if old.join_token is not None:
            effects.append(Reply(old.join_token, JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id)))
        if old.sync_token is not None:
            effects.append(Reply(old.sync_token, SyncResult(E.FENCED_INSTANCE_ID)))
        same = old.protocols == args["protocols"]
        m = Member(new_id, instance_id, args["client_id"], args["client_host"], args["rebalance_timeout_ms"],
                   args["session_timeout_ms"], args["protocol_type"], args["protocols"], assignment=old.assignment,
                   synced=old.synced)
        touch(m, now_ms)
        g.members[new_id] = m
        g.static_members[instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        if g.state is GroupState.STABLE and same:
            leader = g.leader == new_id
            result = JoinResult(E.NONE, member_id=new_id, generation=g.generation, protocol_type=g.protocol_type,
                                protocol_name=g.protocol, leader=g.leader or "",
                                members=self._member_list(g) if leader else (), skip_assignment=leader)
            effects.append(StoreGroup(g.group_id, g.generation, (Reply(token, result),)))
            return None, effects
        m.join_token = token
        if g.state is GroupState.PREPARING_REBALANCE:
            return None, effects + self.maybe_complete_join(g, now_ms)
        return None, effects + self.prepare_rebalance(g, now_ms)

    # ------------------------------------------------------------------ rebalance
    def prepare_rebalance(self, g: Group, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if g.state is GroupState.COMPLETING_REBALANCE:
            effects += self._reset_syncs(g, E.REBALANCE_IN_PROGRESS)
        was_empty = g.state is GroupState.EMPTY
        transition(g, GroupState.PREPARING_REBALANCE, now_ms)
        g.sync_deadline_ms = None
        timeout = g.rebalance_timeout_ms()
        if was_empty and self.host.config.initial_rebalance_delay_ms > 0:
            delay = min(self.host.config.initial_rebalance_delay_ms, max(timeout, 1))
            g.initial_delay_end_ms = now_ms + delay
            g.join_deadline_ms = now_ms + max(timeout, delay)
            g.initial_joined = False
            return effects
        g.initial_delay_end_ms = None
        g.join_deadline_ms = now_ms + timeout
        return effects + self.maybe_complete_join(g, now_ms)

    def _reset_syncs(self, g: Group, error: int) -> list[Effect]:
        out: list[Effect] = []
        for m in g.members.values():
            m.assignment = b""
            if m.sync_token is not None:
                out.append(Reply(m.sync_token, SyncResult(error)))
                m.sync_token = None
        return out

    def maybe_complete_join(self, g: Group, now_ms: int) -> list[Effect]:
        if g.state is not GroupState.PREPARING_REBALANCE or g.initial_delay_end_ms is not None:
            return []
        if g.all_joined() or (g.join_deadline_ms is not None and now_ms >= g.join_deadline_ms):
            return self.complete_join(g, now_ms)
        return []

    def complete_join(self, g: Group, now_ms: int) -> list[Effect]:
        for mid in [mid for mid, m in g.members.items() if m.join_token is None]:
            self.remove_member(g, mid)
        g.pending_members.clear()
        g.join_deadline_ms = None
        g.initial_delay_end_ms = None
        g.generation += 1
        if not g.members:
            transition(g, GroupState.EMPTY, now_ms)
            g.protocol = None
            g.leader = None
            return [StoreGroup(g.group_id, g.generation)]
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        transition(g, GroupState.COMPLETING_REBALANCE, now_ms)
        g.sync_deadline_ms = now_ms + g.rebalance_timeout_ms()
        effects: list[Effect] = []
        for m in g.members.values():
            m.synced = False
            m.assignment = b""
            touch(m, now_ms)
            assert m.join_token is not None
            leader = m.member_id == g.leader
            effects.append(Reply(m.join_token, JoinResult(
                E.NONE, member_id=m.member_id, generation=g.generation, protocol_type=g.protocol_type,
                protocol_name=g.protocol, leader=g.leader, members=self._member_list(g) if leader else ())))
            m.join_token = None
        return effects

    def _select_protocol(self, g: Group) -> str:
        """Kafka's vote: candidates every member supports; each member votes for its first
        preferred candidate; most votes wins (ties: the first candidate in the leader's order)."""
        sets = [{n for n, _ in m.protocols} for m in g.members.values()]
        candidates = set.intersection(*sets)
        votes: dict[str, int] = {}
        for m in g.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(g.members.values()))
        order = [n for n, _ in first.protocols if n in candidates]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def remove_member(self, g: Group, member_id: str) -> list[Effect]:
        m = g.members.pop(member_id, None)
        if m is None:
            return []
        if m.instance_id is not None and g.static_members.get(m.instance_id) == member_id:
            del g.static_members[m.instance_id]
        out: list[Effect] = []
        if m.join_token is not None:
            out.append(Reply(m.join_token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)))
        if m.sync_token is not None:
            out.append(Reply(m.sync_token, SyncResult(E.UNKNOWN_MEMBER_ID)))
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)
        return out

    def member_gone(self, g: Group, member_id: str, now_ms: int) -> list[Effect]:
        effects = self.remove_member(g, member_id)
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return effects + self.prepare_rebalance(g, now_ms)
        if g.state is GroupState.PREPARING_REBALANCE:
            return effects + self.maybe_complete_join(g, now_ms)
        return effects

