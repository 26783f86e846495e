"""The groups a coordinator holds, their offsets, and how they are loaded and dropped (pure).

:class:`GroupStore` is a part of :class:`broker_impl.groups.state.group.Groups` (which
composes it with :class:`~broker_impl.groups.state.membership.Membership`): the catalogue of
groups (``groups``, the one dict both parts work on), offset commits (validated against the
membership rules), DeleteGroups / OffsetDelete rules, and the replay of ``__consumer_offsets``
records when a partition is loaded (:meth:`load_group`, :meth:`load_offset`,
:meth:`load_tombstone`) or dropped (:meth:`unload`). The member rules every part applies —
:func:`transition`, :func:`touch`, :func:`fenced`, :func:`member_at` — are functions of a
group or member here.
"""

from __future__ import annotations

import random
from typing import Iterable

from broker_impl.groups.state import codes as E
from broker_impl.groups.state.model import (
    Effect, Group, GroupConfig, GroupState, JoinResult, Member, OffsetEntry, Reply, SyncResult,
)


def transition(g: Group, state: GroupState, now_ms: int) -> None:
    g.state = state
    g.state_timestamp_ms = now_ms


def touch(m: Member, now_ms: int) -> None:
    m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms


def fenced(g: Group, member_id: str, instance_id: str | None) -> int:
    """FENCED_INSTANCE_ID when ``instance_id`` now belongs to another member id."""
    if instance_id is None:
        return E.NONE
    current = g.static_members.get(instance_id)
    if current is not None and current != member_id:
        return E.FENCED_INSTANCE_ID
    return E.NONE


def member_at(g: Group, member_id: str, instance_id: str | None, generation: int) -> tuple[int, Member | None]:
    """(NONE, the member) when ``member_id`` (with ``instance_id``) is a member of ``g``
    at ``generation``, else (the error, None): fenced instance, unknown member, or
    ILLEGAL_GENERATION."""
    err = fenced(g, member_id, instance_id)
    if err:
        return err, None
    m = g.members.get(member_id)
    if m is None:
        return E.UNKNOWN_MEMBER_ID, None
    if generation != g.generation:
        return E.ILLEGAL_GENERATION, None
    return E.NONE, m


class GroupStore:
    def __init__(self, config: GroupConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.groups: dict[str, Group] = {}

    def new_member_id(self, client_id: str) -> str:
        """A fresh member id: the client id and a random uuid, as Kafka forms them."""
        bits = self.rng.getrandbits(128)
        h = f"{bits:032x}"
        return f"{client_id}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def get(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        return g if g is not None and g.state is not GroupState.DEAD else None

    # ------------------------------------------------------------------ offsets
    def validate_commit(self, group_id: str, *, member_id: str, instance_id: str | None, generation: int,
                        now_ms: int) -> int:
        """The error for an OffsetCommit (NONE: go ahead; a simple commit creates the group)."""
        g = self.get(group_id)
        if g is None:
            if generation < 0 and not member_id:
                self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
                return E.NONE
            return E.ILLEGAL_GENERATION
        if generation < 0 and not member_id and g.state is GroupState.EMPTY:
            return E.NONE
        err, m = member_at(g, member_id, instance_id, generation)
        if m is None:
            return err
        if g.state is GroupState.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        touch(m, now_ms)
        return E.NONE

    def commit(self, group_id: str, entries: Iterable[tuple[str, int, OffsetEntry]]) -> None:
        g = self.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            g = self.groups[group_id] = Group(group_id)
        for topic, partition, entry in entries:
            g.offsets[(topic, partition)] = entry

    def delete_offsets(self, group_id: str, keys: Iterable[tuple[str, int]]) -> None:
        g = self.groups.get(group_id)
        if g is not None:
            for key in keys:
                g.offsets.pop(key, None)

    def offset_delete_errors(self, group_id: str, topics: Iterable[str]) -> tuple[int, dict[str, int]]:
        """(group error, per-topic error) for OffsetDelete: a non-empty consumer group's
        subscribed topics → GROUP_SUBSCRIBED_TO_TOPIC."""
        g = self.get(group_id)
        if g is None:
            return E.GROUP_ID_NOT_FOUND, {}
        if g.state is GroupState.EMPTY:
            return E.NONE, {t: E.NONE for t in topics}
        subscribed = g.subscribed_topics()
        if subscribed is None:
            return E.NON_EMPTY_GROUP, {}
        return E.NONE, {t: (E.GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed else E.NONE) for t in topics}

    def delete_group(self, group_id: str, now_ms: int) -> int:
        """DeleteGroups: only an Empty group; it is Dead until its tombstones are durable
        (then :meth:`forget`), or Empty again if they could not be written (:meth:`undelete`)."""
        g = self.get(group_id)
        if g is None:
            return E.GROUP_ID_NOT_FOUND
        if g.state is not GroupState.EMPTY:
            return E.NON_EMPTY_GROUP
        transition(g, GroupState.DEAD, now_ms)
        return E.NONE

    def undelete(self, group_id: str, now_ms: int) -> None:
        g = self.groups.get(group_id)
        if g is not None and g.state is GroupState.DEAD:
            transition(g, GroupState.EMPTY, now_ms)

    def forget(self, group_id: str) -> None:
        """The group's tombstones are durable: drop it."""
        g = self.groups.get(group_id)
        if g is not None and g.state is GroupState.DEAD:
            del self.groups[group_id]

    # ------------------------------------------------------------------ load / unload
    def load_group(self, group_id: str, *, protocol_type: str | None, generation: int, protocol: str | None,
                   leader: str | None, state_timestamp_ms: int, members: Iterable[Member], now_ms: int) -> None:
        g = self.groups.get(group_id) or Group(group_id)
        self.groups[group_id] = g
        g.protocol_type, g.generation, g.protocol, g.leader = protocol_type, generation, protocol, leader
        g.members = {}
        g.static_members = {}
        for m in members:
            touch(m, now_ms)
            m.synced = True
            g.members[m.member_id] = m
            if m.instance_id is not None:
                g.static_members[m.instance_id] = m.member_id
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        g.state_timestamp_ms = state_timestamp_ms

    def load_tombstone(self, group_id: str) -> None:
        """A group's metadata tombstone: the group is gone (its offsets were tombstoned too)."""
        self.groups.pop(group_id, None)

    def load_offset(self, group_id: str, topic: str, partition: int, entry: OffsetEntry | None) -> None:
        g = self.groups.get(group_id)
        if entry is None:
            if g is not None:
                g.offsets.pop((topic, partition), None)
            return
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        g.offsets[(topic, partition)] = entry

    def unload(self, group_ids: Iterable[str]) -> list[Effect]:
        """This broker no longer coordinates these groups: parked requests get NOT_COORDINATOR."""
        out: list[Effect] = []
        for gid in group_ids:
            g = self.groups.pop(gid, None)
            if g is None:
                continue
            for m in g.members.values():
                if m.join_token is not None:
                    out.append(Reply(m.join_token, JoinResult(E.NOT_COORDINATOR, member_id=m.member_id)))
                if m.sync_token is not None:
                    out.append(Reply(m.sync_token, SyncResult(E.NOT_COORDINATOR)))
        return out

