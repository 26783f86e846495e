"""The hand-formatted partition_change lines are the lines EventLog.emit writes."""

from __future__ import annotations

import uuid

import pytest

from controller_impl.runtime.change_events import emit_changes, partition_change_lines
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage
from kafka_runtime.events import EventLog, read_events

pytestmark = pytest.mark.integration


def test_partition_change_lines_are_emits_lines(tmp_path):
    image = MetadataImage()
    dirs = [uuid.UUID(int=(0x1000 + i) << 64) for i in range(3)]
    for b in (1, 2, 3):
        image.replay(r.RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=b,
                                            end_points=(), fenced=False, log_dirs=(dirs[b - 1],)),
                     image.last_offset + 1)
    tid = uuid.UUID(int=77 << 100)
    records = [r.TopicRecord(name='t "quoted"', topic_id=tid)]
    records += [r.PartitionRecord(partition_id=p, topic_id=tid, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1,
                                  leader_epoch=0, partition_epoch=0, directories=tuple(dirs)) for p in range(5)]
    for rec in records:
        image.replay(rec, image.last_offset + 1)
    created = image.drain_changes()
    changed = [r.PartitionChangeRecord(partition_id=p, topic_id=tid, isr=(2, 3), leader=2) for p in range(3)]
    for rec in changed:
        image.replay(rec, image.last_offset + 1)
    changes = image.drain_changes()

    for what, recs, chg in (("create", records, created), ("change", changed, changes)):
        by_emit = EventLog(str(tmp_path / f"{what}-emit.jsonl"), 9, "controller")
        emit_changes(by_emit, image, [], "dir_failure", chg)  # emit's own path: reference below
        by_emit.close()
        ref = EventLog(str(tmp_path / f"{what}-ref.jsonl"), 9, "controller")
        for (t, p), (old, new) in chg.partitions.items():
            ref.emit("partition_change", topic=image.topics[t].name, topic_id=t, partition=p, leader=new.leader,
                     isr=list(new.isr), replicas=list(new.replicas), directories=list(new.directories),
                     leader_epoch=new.leader_epoch, partition_epoch=new.partition_epoch,
                     reason="dir_failure" if old is not None else "create_topics")
        ref.close()
        sliced = EventLog(str(tmp_path / f"{what}-sliced.jsonl"), 9, "controller")
        slices = list(partition_change_lines(sliced, image, "dir_failure", chg, slice_size=2))
        assert [len(s) for s in slices][:-1] == [2] * (len(slices) - 1)
        for lines in slices:
            sliced.write_lines(lines)
        assert sliced.count == len(chg.partitions)
        sliced.close()

        def strip(path):
            return [{k: v for k, v in e.items() if k != "ts_ns"} for e in read_events(str(path))]
        expected = strip(tmp_path / f"{what}-ref.jsonl")
        assert len(expected) == len(chg.partitions)
        assert strip(tmp_path / f"{what}-emit.jsonl") == expected
        assert strip(tmp_path / f"{what}-sliced.jsonl") == expected
