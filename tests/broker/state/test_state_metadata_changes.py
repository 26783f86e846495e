"""Image changes → replica-manager input, using the real MetadataImage and records."""
import pytest

from broker_impl.state.metadata_changes import partition_changes
from broker_state_helpers import D1, ME, T1, T2
from kafka_common.ids import UNASSIGNED
from kafka_common.metadata import records as r
from kafka_common.metadata.image import MetadataImage

pytestmark = pytest.mark.unit


def name_of(image):
    return lambda t: image.topics[t].name if t in image.topics else None


def part(tid, pid, replicas, dirs):
    return r.PartitionRecord(partition_id=pid, topic_id=tid, replicas=replicas, isr=replicas, removing_replicas=(),
                             adding_replicas=(), leader=replicas[0], leader_recovery_state=0, leader_epoch=0,
                             partition_epoch=0, directories=dirs)


def test_only_my_partitions_removals_first():
    img = MetadataImage()
    img.replay(r.TopicRecord(name="a", topic_id=T1), 0)
    img.replay(part(T1, 0, (ME, 2), (UNASSIGNED, D1)), 1)
    img.replay(part(T1, 1, (2, 3), (D1, D1)), 2)
    img.drain_changes()
    img.replay(r.RemoveTopicRecord(topic_id=T1), 3)
    img.replay(r.TopicRecord(name="a", topic_id=T2), 4)
    img.replay(part(T2, 0, (ME,), (UNASSIGNED,)), 5)
    chs = partition_changes(img.drain_changes(), ME, name_of(img))
    assert [(c.topic, c.partition, c.old is not None, c.new is not None) for c in chs] == \
        [("a", 0, True, False), ("a", 0, False, True)]
    assert chs[0].old.topic_id == T1 and chs[1].new.topic_id == T2
