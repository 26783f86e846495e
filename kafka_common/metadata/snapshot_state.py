"""The metadata image as plain tuples (what :mod:`kafka_common.metadata.snapshot` frames)
and back. Fills the image's own tables and indexes directly: these two functions are part
of :class:`~kafka_common.metadata.image.MetadataImage`'s implementation (``image`` is one;
typed ``Any`` because the image imports this module)."""

from __future__ import annotations

import uuid
from typing import Any

from kafka_common.ids import TopicId, is_reserved
from kafka_common.metadata.image_changes import ImageError
from kafka_common.metadata.model import BrokerRegistration, Endpoint, PartitionRegistration, TopicRegistration


def snapshot_state(image: Any) -> tuple:
    """The whole image as plain tuples of ints/bytes/str (fast to marshal). Directory
    and topic ids are interned in a table so a partition carries small indexes."""
    ids_table: dict[uuid.UUID, int] = {}

    def ref(u: uuid.UUID) -> int:
        i = ids_table.get(u)
        if i is None:
            i = ids_table[u] = len(ids_table)
        return i

    brokers = tuple((b.broker_id, b.epoch, ref(b.incarnation_id),
                     tuple((e.name, e.host, e.port, e.security_protocol) for e in b.endpoints),
                     b.rack, b.fenced, b.in_controlled_shutdown, tuple(ref(d) for d in b.log_dirs),
                     image.register_offsets.get(b.broker_id, -1),
                     tuple(ref(d) for d in sorted(image._known_dirs.get(b.broker_id, ()), key=lambda u: u.int)))
                    for b in image.brokers.values())
    refs: dict[tuple, tuple] = {}

    def dir_refs(dirs: tuple) -> tuple:
        out = refs.get(dirs)
        if out is None:
            out = refs[dirs] = tuple(ref(d) for d in dirs)
        return out

    topics = tuple((t.name, ref(t.topic_id),
                    tuple((p.partition_id, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch,
                           dir_refs(p.directories), p.removing_replicas, p.adding_replicas,
                           p.leader_recovery_state)
                          for p in image._partitions[t.topic_id].values()))
                   for t in image.topics.values())
    table = tuple(u.bytes for u in ids_table)
    configs = tuple((rtype, rname, tuple(sorted(values.items())))
                    for (rtype, rname), values in sorted(image.configs.items()))
    return (2, image.last_offset, table, brokers, topics, tuple(image.features.items()), configs)


def restore_snapshot_state(img: Any, state: tuple) -> None:
    """Fill ``img``, a fresh empty image, from :func:`snapshot_state` (no change tracking)."""
    version = state[0]
    if version == 1:  # written before configs were stored
        (_v, last_offset, table, brokers, topics, features), configs = state, ()
    elif version == 2:
        _v, last_offset, table, brokers, topics, features, configs = state
    else:
        raise ImageError(f"snapshot state version {version} is not 1 or 2")
    uuids = [uuid.UUID(bytes=b) for b in table]
    img.last_offset = last_offset
    img.features = dict(features)
    img.configs = {(rtype, rname): dict(values) for rtype, rname, values in configs}
    for (bid, epoch, inc, eps, rack, fenced, in_cs, dirs, reg_off, known) in brokers:
        log_dirs = tuple(uuids[d] for d in dirs)
        img.brokers[bid] = BrokerRegistration(broker_id=bid, epoch=epoch, incarnation_id=uuids[inc],
                                              endpoints=tuple(Endpoint(*e) for e in eps), rack=rack,
                                              fenced=fenced, in_controlled_shutdown=in_cs, log_dirs=log_dirs)
        if reg_off >= 0:
            img.register_offsets[bid] = reg_off
        img._known_dirs[bid] = frozenset(uuids[d] for d in known)
        for d in log_dirs:
            img._dir_owner[d] = bid
    reserved = [is_reserved(u) for u in uuids]
    by_dir, by_isr, by_replica = img.indexes.by_dir, img.indexes.by_isr, img.indexes.by_replica
    count = 0
    new_part = PartitionRegistration
    dir_tuples: dict[tuple, tuple] = {}
    dir_sets: dict[tuple, list] = {}
    for name, tref, parts in topics:
        tid = TopicId(uuids[tref])
        img.topics[tid] = TopicRegistration(name=name, topic_id=tid)
        img.topic_ids[name] = tid
        table_parts: dict[int, PartitionRegistration] = {}
        img._partitions[tid] = table_parts
        for (pid, replicas, isr, leader, le, pe, drefs, removing, adding, lrs) in parts:
            dirs = dir_tuples.get(drefs)
            if dirs is None:
                dirs = dir_tuples[drefs] = tuple(uuids[d] for d in drefs)
                dir_sets[drefs] = [by_dir.setdefault(uuids[d], set()) for d in drefs if not reserved[d]]
            table_parts[pid] = new_part(tid, pid, replicas, isr, leader, le, pe, dirs, removing, adding, lrs)
            key = (tid, pid)
            for members in dir_sets[drefs]:
                members.add(key)
            for b in isr:
                members = by_isr.get(b)
                if members is None:
                    members = by_isr[b] = set()
                members.add(key)
            for b in replicas:
                members = by_replica.get(b)
                if members is None:
                    members = by_replica[b] = set()
                members.add(key)
            count += 1
    img.indexes.count = count
