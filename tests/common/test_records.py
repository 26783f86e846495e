"""Metadata records and batches: exact framing, round trips, and rejection of bad bytes."""

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kafka_common import batch_header as bh
from kafka_common.ids import LOST, MIGRATING, UNASSIGNED
from kafka_common.metadata import records as r
from kafka_common.metadata.batches import BatchDecodeError, decode_batches, encode_batch

pytestmark = pytest.mark.unit

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
i16 = st.integers(-(2**15), 2**15 - 1)
i8 = st.integers(-128, 127)
uuids = st.one_of(st.sampled_from([UNASSIGNED, LOST, MIGRATING]),
                  st.integers(0, 2**128 - 1).map(lambda n: uuid.UUID(int=n)))
text = st.text(max_size=20)
ints = st.lists(i32, max_size=6).map(tuple)
uuid_list = st.lists(uuids, max_size=6).map(tuple)

endpoints = st.builds(r.BrokerEndpoint, name=text, host=text, port=st.integers(0, 65535),
                      security_protocol=i16)
features = st.builds(r.BrokerFeature, name=text, min_supported_version=i16, max_supported_version=i16)

RECORDS = st.one_of(
    st.builds(r.RegisterBrokerRecord, broker_id=i32, is_migrating_zk_broker=st.booleans(),
              incarnation_id=uuids, broker_epoch=i64,
              end_points=st.lists(endpoints, max_size=3).map(tuple),
              features=st.lists(features, max_size=3).map(tuple),
              rack=st.none() | text, fenced=st.booleans(), in_controlled_shutdown=st.booleans(),
              log_dirs=uuid_list),
    st.builds(r.UnregisterBrokerRecord, broker_id=i32, broker_epoch=i64),
    st.builds(r.TopicRecord, name=text, topic_id=uuids),
    st.builds(r.PartitionRecord, partition_id=i32, topic_id=uuids, replicas=ints, isr=ints,
              removing_replicas=ints, adding_replicas=ints, leader=i32,
              leader_recovery_state=i8, leader_epoch=i32, partition_epoch=i32,
              directories=uuid_list),
    st.builds(r.PartitionChangeRecord, partition_id=i32, topic_id=uuids,
              isr=st.none() | ints, leader=i32, replicas=st.none() | ints,
              removing_replicas=st.none() | ints, adding_replicas=st.none() | ints,
              leader_recovery_state=i8, directories=st.none() | uuid_list),
    st.builds(r.FenceBrokerRecord, id=i32, epoch=i64),
    st.builds(r.UnfenceBrokerRecord, id=i32, epoch=i64),
    st.builds(r.RemoveTopicRecord, topic_id=uuids),
    st.builds(r.FeatureLevelRecord, name=text, feature_level=i16),
    st.builds(r.ConfigRecord, resource_type=st.sampled_from([2, 4]), resource_name=text, name=text,
              value=st.none() | text),
    st.builds(r.BrokerRegistrationChangeRecord, broker_id=i32, broker_epoch=i64,
              fenced=st.sampled_from([-1, 0, 1]), in_controlled_shutdown=st.sampled_from([0, 1]),
              log_dirs=uuid_list),
    st.just(r.NoOpRecord()),
)


@settings(max_examples=300, deadline=None)
@given(RECORDS)
def test_every_record_round_trips(rec):
    data = r.encode_record(rec)
    assert data[0] == 1  # frame version
    assert r.decode_record(data) == rec


@given(RECORDS, st.binary(min_size=1, max_size=4))
def test_trailing_bytes_are_rejected(rec, extra):
    with pytest.raises(r.RecordDecodeError, match="trailing"):
        r.decode_record(r.encode_record(rec) + extra)


@settings(max_examples=300, deadline=None)
@given(RECORDS, st.data())
def test_truncation_is_a_decode_error(rec, data):
    raw = r.encode_record(rec)
    cut = data.draw(st.integers(0, len(raw) - 1))
    try:
        r.decode_record(raw[:cut])
    except r.RecordDecodeError:
        pass  # the only acceptable failure (a shorter record may still parse when tags end it)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_only_ever_raises_record_decode_error(data):
    try:
        r.decode_record(data)
    except r.RecordDecodeError:
        pass


def test_exact_frame_and_versions():
    assert r.encode_record(r.NoOpRecord()) == b"\x01\x14\x00\x00"
    versions = {cls.__name__: cls.__version__ for cls in r.RECORD_CLASSES.values()}
    assert versions == {"RegisterBrokerRecord": 3, "UnregisterBrokerRecord": 0, "TopicRecord": 0,
                        "PartitionRecord": 1, "PartitionChangeRecord": 1, "FenceBrokerRecord": 0,
                        "UnfenceBrokerRecord": 0, "RemoveTopicRecord": 0, "FeatureLevelRecord": 0,
                        "BrokerRegistrationChangeRecord": 2, "NoOpRecord": 0, "ConfigRecord": 0}
    fence = r.encode_record(r.FenceBrokerRecord(id=1, epoch=2))
    assert fence == b"\x01\x07\x00" + b"\x00\x00\x00\x01" + (2).to_bytes(8, "big") + b"\x00"


def test_partition_change_tags_match_kafka():
    # Directories is tag 8; LOST = (0,1) in 16 big-endian bytes; unset fields are absent.
    tid = uuid.UUID(int=7)
    data = r.encode_record(r.PartitionChangeRecord(partition_id=0, topic_id=tid, directories=(LOST,)))
    body = data[3:]
    assert body[:4] == b"\x00\x00\x00\x00" and body[4:20] == tid.bytes
    assert body[20:] == b"\x01" + b"\x08" + b"\x11" + b"\x02" + LOST.bytes


@pytest.mark.parametrize("data,problem", [
    (b"", "truncated"),
    (b"\x00\x14\x00\x00", "frame version 0"),
    (b"\x02\x14\x00\x00", "frame version 2"),
    (b"\x01\x63\x00", "type 99"),
    (b"\x01\x06\x00\x00", "type 6"),
    (b"\x01\x00\x02", "version 2"),
    (b"\x01\x03\x02", "version 2"),
    (b"\x01\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
])
def test_unknown_frame_type_or_version_named(data, problem):
    with pytest.raises(r.RecordDecodeError, match=problem):
        r.decode_record(data)


def test_zero_uuid_reads_back_as_unassigned_not_none():
    rec = r.PartitionRecord(partition_id=0, topic_id=uuid.UUID(int=5), replicas=(1, 2), isr=(1,),
                            leader=1, leader_epoch=0, partition_epoch=0,
                            directories=(UNASSIGNED, MIGRATING))
    back = r.decode_record(r.encode_record(rec))
    assert back.directories == (UNASSIGNED, MIGRATING)
    assert all(isinstance(d, uuid.UUID) for d in back.directories)


def test_encode_rejects_non_records_and_bad_values():
    with pytest.raises(r.RecordEncodeError):
        r.encode_record(object())
    with pytest.raises(r.RecordEncodeError, match="FenceBrokerRecord"):
        r.encode_record(r.FenceBrokerRecord(id=2**40, epoch=0))


# --- batches ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(RECORDS, min_size=1, max_size=5), min_size=1, max_size=4),
       st.integers(0, 2**40), st.integers(0, 2**41))
def test_batches_round_trip_with_offsets(groups, base, ts_ms):
    data = b""
    offset = base
    for group in groups:
        data += encode_batch(offset, group, leader_epoch=3, timestamp_ms=ts_ms)
        offset += len(group)
    out = decode_batches(data)
    assert [recs for _, recs in out] == groups
    expected = base
    for header, recs in out:
        assert header.base_offset == expected and header.record_count == len(recs)
        assert header.partition_leader_epoch == 3 and header.base_timestamp == ts_ms
        assert header.compression == 0
        expected = header.next_offset


@pytest.mark.parametrize("ts_ms", [0, 1, 999, 1001, 1_700_000_000_123, 1_763_800_000_001, 2**41 - 1])
def test_batch_timestamp_is_exact(ts_ms):
    ((header, _),) = decode_batches(encode_batch(0, [r.NoOpRecord()], timestamp_ms=ts_ms))
    assert header.base_timestamp == ts_ms == header.max_timestamp


def test_batch_crc_and_truncation_detected():
    data = bytearray(encode_batch(0, [r.NoOpRecord(), r.FenceBrokerRecord(id=1, epoch=1)], timestamp_ms=1))
    with pytest.raises(bh.CorruptBatch):
        decode_batches(bytes(data[:-1]))
    data[-2] ^= 0x40
    with pytest.raises(bh.CorruptBatch, match="CRC"):
        decode_batches(bytes(data))


def test_batch_with_undecodable_record_value():
    # A batch carrying a value that is not a framed record: CRC is fine, the record is not.
    import datetime
    import io
    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_batch
    from kio.static.primitive import TZAwareMicros
    ts = TZAwareMicros.parse(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    buf = io.BytesIO()
    write_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0,
                                    records=(Record(attributes=0, timestamp=ts, offset=0, key=None,
                                                    value=b"\x07\x00", headers=()),)))
    with pytest.raises(r.RecordDecodeError, match="frame version 7"):
        decode_batches(buf.getvalue())
    buf2 = io.BytesIO()
    write_batch(buf2, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0,
                                     records=(Record(attributes=0, timestamp=ts, offset=0, key=None,
                                                     value=None, headers=()),)))
    with pytest.raises(BatchDecodeError, match="null value"):
        decode_batches(buf2.getvalue())


def test_empty_batch_refused():
    with pytest.raises(ValueError):
        encode_batch(0, [], timestamp_ms=0)
