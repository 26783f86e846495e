"""Classic consumer groups: Kafka's group state machine as a pure object (no I/O, no clock).

:class:`Groups` holds every group of the ``__consumer_offsets`` partitions this broker
coordinates. Every input takes ``now_ms``; results are plain values: an error code for what
is answered at once (Heartbeat, a refused JoinGroup/SyncGroup) and a list of effects for
what completes later:

- :class:`Reply` — answer the JoinGroup/SyncGroup waiting under ``token`` with ``result``
  (a :class:`JoinResult` or :class:`SyncResult`);
- :class:`StoreGroup` — write the group's metadata record to its offsets partition with acks=all; deliver ``replies`` only when the write is
  durable. When the write fails the runtime calls :meth:`Groups.store_failed` and delivers
  the replies with its error instead (Kafka: the assignment is dropped and the group
  rebalances).

State per group (Kafka's ``GroupMetadata``): ``Empty`` → (first JoinGroup)
``PreparingRebalance`` → (every member rejoined, or the rebalance timeout passed; for an
Empty group after ``group.initial.rebalance.delay.ms``, extended while members keep coming,
bounded by the rebalance timeout) ``CompletingRebalance`` (generation + 1, leader chosen,
protocol voted) → (the leader's SyncGroup, stored) ``Stable``. A member leaves by
LeaveGroup, by missing heartbeats for ``session.timeout.ms`` (not while its JoinGroup or
SyncGroup is parked), by not rejoining within the rebalance timeout, or by not sending
SyncGroup within it after the join completed; each leave rebalances. ``Dead`` is a deleted
or unloaded group.

Membership rules (Kafka 3.x classic protocol):
- a dynamic member joining with an empty member id on JoinGroup v4+ gets a fresh id and
  MEMBER_ID_REQUIRED; it is pending until it rejoins with that id (or a session timeout);
- a static member (``group.instance.id``) joining with an empty id replaces its old member
  id; in Stable with unchanged protocols there is no rebalance: it gets the current
  generation (and the leader the member list with ``skip_assignment``); the old id is fenced
  (FENCED_INSTANCE_ID);
- generation fencing: a wrong generation → ILLEGAL_GENERATION; an unknown member →
  UNKNOWN_MEMBER_ID; during PreparingRebalance Heartbeat and SyncGroup → REBALANCE_IN_PROGRESS;
- OffsetCommit: generation -1 with no member id is a "simple" commit, accepted while the
  group is Empty (and creates it); otherwise the member and generation must match, and
  CompletingRebalance refuses with REBALANCE_IN_PROGRESS (PreparingRebalance accepts the
  current generation's commits, as Kafka does).
"""
from __future__ import annotations

from typing import Iterable

from broker_impl.groups.state import codes as E
from broker_impl.groups.state.model import (  # noqa: F401  (the values are part of this module's API)
    CONSUMER, Effect, Group, GroupConfig, GroupState, JoinResult, Member, OffsetEntry, Reply, StoreGroup, SyncResult,
    parse_subscription,
)
from broker_impl.groups.state.membership import Membership


class Groups(Membership):
    """Every group this broker coordinates: the membership rules (JoinGroup and rebalancing in
    :class:`Membership`; SyncGroup, Heartbeat, LeaveGroup, timers here) over :class:`GroupStore`
    (offsets, load/unload)."""

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: Iterable[tuple[str, bytes]],
             token: int, now_ms: int) -> tuple[SyncResult | None, list[Effect]]:
        g = self.get(group_id)
        if g is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID), []
        fenced = self._fenced(g, member_id, instance_id)
        if fenced:
            return SyncResult(fenced), []
        m = g.members.get(member_id)
        if m is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID), []
        if generation != g.generation:
            return SyncResult(E.ILLEGAL_GENERATION), []
        if (protocol_type is not None and protocol_type != g.protocol_type) or \
                (protocol_name is not None and protocol_name != g.protocol):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL), []
        if g.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(E.REBALANCE_IN_PROGRESS), []
        self._touch(m, now_ms)
        m.synced = True
        if g.state is GroupState.STABLE:
            return SyncResult(E.NONE, g.protocol_type, g.protocol, m.assignment), []
        assert g.state is GroupState.COMPLETING_REBALANCE
        effects: list[Effect] = []
        if m.sync_token is not None and m.sync_token != token:
            effects.append(Reply(m.sync_token, SyncResult(E.REBALANCE_IN_PROGRESS)))
        m.sync_token = token
        if member_id != g.leader:
            return None, effects
        given = dict(assignments)
        for mm in g.members.values():
            mm.assignment = given.get(mm.member_id, b"")
        self._transition(g, GroupState.STABLE, now_ms)
        g.sync_deadline_ms = None
        replies = []
        for mm in g.members.values():
            if mm.sync_token is not None:
                replies.append(Reply(mm.sync_token, SyncResult(E.NONE, g.protocol_type, g.protocol, mm.assignment)))
                mm.sync_token = None
        effects.append(StoreGroup(g.group_id, g.generation, tuple(replies)))
        return None, effects

    def store_failed(self, group_id: str, generation: int, now_ms: int) -> list[Effect]:
        """The group record of ``generation`` could not be written: drop the assignment and
        rebalance (Kafka's behaviour when the leader's assignment is not stored)."""
        g = self.get(group_id)
        if g is None or g.generation != generation or g.state is not GroupState.STABLE:
            return []
        for m in g.members.values():
            m.assignment = b""
        return self._prepare_rebalance(g, now_ms)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup
    def heartbeat(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
                  now_ms: int) -> int:
        g = self.get(group_id)
        if g is None:
            return E.UNKNOWN_MEMBER_ID
        err, m = self._member_at(g, member_id, instance_id, generation)
        if m is None:
            return err
        self._touch(m, now_ms)
        if g.state is GroupState.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int
              ) -> tuple[int, list[int], list[Effect]]:
        """(top-level error, per-member errors, effects). A member named only by its instance
        id (member id "") is found through the static mapping."""
        members = list(members)
        g = self.get(group_id)
        if g is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members), []
        errors, effects = [], []
        for member_id, instance_id in members:
            if instance_id is not None:
                current = g.static_members.get(instance_id)
                if current is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != current:
                    errors.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = current
            if member_id in g.pending_members:
                del g.pending_members[member_id]
                errors.append(E.NONE)
                effects += self._maybe_complete_join(g, now_ms)
                continue
            if member_id not in g.members:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            errors.append(E.NONE)
            effects += self._member_gone(g, member_id, now_ms)
        return E.NONE, errors, effects

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for g in list(self.groups.values()):
            if g.state is GroupState.DEAD:
                continue
            for mid, deadline in list(g.pending_members.items()):
                if now_ms >= deadline:
                    del g.pending_members[mid]
            if g.state is GroupState.PREPARING_REBALANCE and g.initial_delay_end_ms is not None \
                    and now_ms >= g.initial_delay_end_ms:
                assert g.join_deadline_ms is not None
                left = g.join_deadline_ms - now_ms
                if g.initial_joined and left > 0:   # members still arriving: wait another delay
                    g.initial_delay_end_ms = now_ms + min(self.config.initial_rebalance_delay_ms, left)
                    g.initial_joined = False
                else:
                    g.initial_delay_end_ms = None
                    effects += self._complete_join(g, now_ms)
                    continue
            for mid, m in list(g.members.items()):
                parked = m.join_token is not None or m.sync_token is not None
                if not parked and now_ms >= m.heartbeat_deadline_ms and mid in g.members:
                    effects += self._member_gone(g, mid, now_ms)
            effects += self._maybe_complete_join(g, now_ms)
            if g.state is GroupState.COMPLETING_REBALANCE and g.sync_deadline_ms is not None \
                    and now_ms >= g.sync_deadline_ms:
                for mid in [mid for mid, m in g.members.items() if not m.synced]:
                    effects += self._remove_member(g, mid)
                effects += self._prepare_rebalance(g, now_ms)
        return effects

    def next_deadline_ms(self) -> int | None:
        deadlines = []
        for g in self.groups.values():
            if g.state is GroupState.DEAD:
                continue
            deadlines += list(g.pending_members.values())
            deadlines += [d for d in (g.join_deadline_ms, g.initial_delay_end_ms, g.sync_deadline_ms) if d is not None]
            deadlines += [m.heartbeat_deadline_ms for m in g.members.values()
                          if m.join_token is None and m.sync_token is None]
        return min(deadlines) if deadlines else None
