"""The hand-written PartitionChangeRecord codec is byte for byte kio's, both ways."""

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kafka_common import wire
from kafka_common.metadata import fast_records
from kafka_common.metadata import records as r

pytestmark = pytest.mark.unit

ints = st.lists(st.integers(min_value=-2**31, max_value=2**31 - 1), max_size=5).map(tuple)
uuids = st.builds(lambda i: uuid.UUID(int=i), st.integers(min_value=0, max_value=2**128 - 1))
changes = st.builds(
    r.PartitionChangeRecord,
    partition_id=st.integers(min_value=-2**31, max_value=2**31 - 1), topic_id=uuids,
    isr=st.none() | ints, leader=st.integers(min_value=-2, max_value=2**31 - 1),
    replicas=st.none() | ints, removing_replicas=st.none() | ints, adding_replicas=st.none() | ints,
    leader_recovery_state=st.integers(min_value=-1, max_value=1),
    directories=st.none() | st.lists(uuids | st.just(uuid.UUID(int=0)), max_size=4).map(tuple))


@settings(max_examples=300, deadline=None)
@given(changes)
def test_same_bytes_as_kio_and_back(rec):
    fast = fast_records.encode_partition_change(rec)
    assert fast == wire.encode(rec)
    framed = r.encode_record(rec)
    assert r.decode_record(framed) == rec
    assert fast_records.decode_partition_change(r.PartitionChangeRecord, fast, 0) == rec


def test_garbage_still_raises_the_records_error():
    rec = r.PartitionChangeRecord(partition_id=1, topic_id=uuid.uuid4(), isr=(1, 2))
    framed = r.encode_record(rec)
    for cut in range(1, len(framed)):
        with pytest.raises(r.RecordDecodeError):
            r.decode_record(framed[:cut])
    with pytest.raises(r.RecordDecodeError):
        r.decode_record(framed + b"\x00")


@settings(max_examples=100, deadline=None)
@given(st.lists(changes, min_size=1, max_size=40), st.integers(min_value=0, max_value=2**40),
       st.integers(min_value=-1, max_value=2**31 - 1), st.integers(min_value=0, max_value=2**42))
def test_hand_written_batch_is_kios(recs, base, epoch, ts):
    from kafka_common.metadata.batches import decode_batches, encode_batch, encode_batch_kio
    fast = encode_batch(base, recs, leader_epoch=epoch, timestamp_ms=ts)
    assert fast == encode_batch_kio(base, recs, leader_epoch=epoch, timestamp_ms=ts)
    [(header, back)] = decode_batches(fast)
    assert back == recs and header.base_offset == base


@settings(max_examples=60, deadline=None)
@given(st.lists(changes, min_size=1, max_size=30))
def test_hand_parsed_batches_match_kios_reader(recs):
    from kio.records.readers import read_batch
    from kafka_common.metadata.batches import _fast_values, decode_batches, encode_batch_kio
    from kafka_common.batch_header import read_header
    data = encode_batch_kio(7, recs, leader_epoch=3, timestamp_ms=123)
    header = read_header(data, 0)
    batch, _ = read_batch(data, 0)
    assert _fast_values(data, 0, header) == [r_.value for r_ in batch.records]
    assert decode_batches(data)[0][1] == recs
