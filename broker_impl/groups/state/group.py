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

import random
from typing import Iterable

from broker_impl.groups.state import codes as E
from broker_impl.groups.state.model import (  # noqa: F401  (the values are part of this module's API)
    CONSUMER, Effect, Group, GroupConfig, GroupState, JoinResult, Member, OffsetEntry, Reply, StoreGroup, SyncResult,
    parse_subscription,
)
from broker_impl.groups.state.membership import Membership
from broker_impl.groups.state.store import GroupStore, fenced, member_at, touch, transition


class Groups:
    """Every group this broker coordinates, composed of two parts over one catalogue: the
    :class:`GroupStore` (``store``: the groups, offsets, load/unload) and the membership rules
    (``membership``: JoinGroup and rebalancing); SyncGroup, Heartbeat, LeaveGroup and the
    timers are here. The store's and the membership's calls are this object's API."""

    def __init__(self, config: GroupConfig, rng: random.Random) -> None:
        self.store = GroupStore(config, rng)
        self.membership = Membership(self.store)
        self.config = config
        self.groups = self.store.groups   # the store's dict itself (it is never replaced)

    # ------------------------------------------------------------------ the parts' calls
    def get(self, group_id: str) -> Group | None:
        return self.store.get(group_id)

    def join(self, group_id: str, *, member_id: str, instance_id: str | None, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
             client_id: str, client_host: str, require_known_member_id: bool, token: int,
             now_ms: int) -> tuple[JoinResult | None, list[Effect]]:
        """JoinGroup (:meth:`Membership.join`): (an immediate answer, or None when it is parked
        under ``token``; effects)."""
        return self.membership.join(
            group_id, member_id=member_id, instance_id=instance_id, protocol_type=protocol_type,
            protocols=protocols, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id, client_host=client_host, require_known_member_id=require_known_member_id,
            token=token, now_ms=now_ms)

    def validate_commit(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
                        now_ms: int) -> int:
        return self.store.validate_commit(group_id, member_id=member_id, instance_id=instance_id,
                                          generation=generation, now_ms=now_ms)

    def commit(self, group_id: str, entries: Iterable[tuple[str, int, OffsetEntry]]) -> None:
        self.store.commit(group_id, entries)

    def delete_offsets(self, group_id: str, keys: Iterable[tuple[str, int]]) -> None:
        self.store.delete_offsets(group_id, keys)

    def offset_delete_errors(self, group_id: str, topics: Iterable[str]) -> tuple[int, dict[str, int]]:
        return self.store.offset_delete_errors(group_id, topics)

    def delete_group(self, group_id: str, now_ms: int) -> int:
        return self.store.delete_group(group_id, now_ms)

    def undelete(self, group_id: str, now_ms: int) -> None:
        self.store.undelete(group_id, now_ms)

    def forget(self, group_id: str) -> None:
        self.store.forget(group_id)

    def load_group(self, group_id: str, *, protocol_type: str | None, generation: int, protocol: str | None,
                   leader: str | None, state_timestamp_ms: int, members: Iterable[Member], now_ms: int) -> None:
        self.store.load_group(group_id, protocol_type=protocol_type, generation=generation, protocol=protocol,
                              leader=leader, state_timestamp_ms=state_timestamp_ms, members=members, now_ms=now_ms)

    def load_tombstone(self, group_id: str) -> None:
        self.store.load_tombstone(group_id)

    def load_offset(self, group_id: str, topic: str, partition: int, entry: OffsetEntry | None) -> None:
        self.store.load_offset(group_id, topic, partition, entry)

    def unload(self, group_ids: Iterable[str]) -> list[Effect]:
        return self.store.unload(group_ids)

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: Iterable[tuple[str, bytes]],
             token: int, now_ms: int) -> tuple[SyncResult | None, list[Effect]]:
        g = self.get(group_id)
        if g is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID), []
        err = fenced(g, member_id, instance_id)
        if err:
            return SyncResult(err), []
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
        touch(m, now_ms)
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
        transition(g, GroupState.STABLE, now_ms)
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
        return self.membership.prepare_rebalance(g, now_ms)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup
    def heartbeat(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
                  now_ms: int) -> int:
        g = self.get(group_id)
        if g is None:
            return E.UNKNOWN_MEMBER_ID
        err, m = member_at(g, member_id, instance_id, generation)
        if m is None:
            return err
        touch(m, now_ms)
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
                effects += self.membership.maybe_complete_join(g, now_ms)
                continue
            if member_id not in g.members:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            errors.append(E.NONE)
            effects += self.membership.member_gone(g, member_id, now_ms)
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
                    effects += self.membership.complete_join(g, now_ms)
                    continue
            for mid, m in list(g.members.items()):
                parked = m.join_token is not None or m.sync_token is not None
                if not parked and now_ms >= m.heartbeat_deadline_ms and mid in g.members:
                    effects += self.membership.member_gone(g, mid, now_ms)
            effects += self.membership.maybe_complete_join(g, now_ms)
            if g.state is GroupState.COMPLETING_REBALANCE and g.sync_deadline_ms is not None \
                    and now_ms >= g.sync_deadline_ms:
                for mid in [mid for mid, m in g.members.items() if not m.synced]:
                    effects += self.membership.remove_member(g, mid)
                effects += self.membership.prepare_rebalance(g, now_ms)
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
