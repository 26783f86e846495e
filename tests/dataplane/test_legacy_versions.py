"""Kafka 3.9's old versions (KIP-896 removed them in 4.0): the hand-derived schemas read and
write Kafka's layouts, ListOffsets v0's offsets are Kafka's ``legacyFetchOffsetsBefore``,
and Fetch v0–3's down-conversion yields message sets another implementation (kafka-python's
record readers) reads back as the same records."""

from __future__ import annotations

import struct

import pytest

from broker_impl.api import down_convert as dc
from broker_impl.api.legacy_versions import clamp_to_high_watermark, offsets_before
from kafka_common import legacy_schemas, wire
from kafka_common.wire import ErrorCode

pytestmark = pytest.mark.unit


def test_every_legacy_version_is_found_through_wire_with_kafkas_layout():
    for key, version in legacy_schemas.VERSIONS:
        req, resp = wire.request_class(key, version), wire.response_class(key, version)
        assert (req.__api_key__, req.__version__, resp.__version__) == (key, version, version)
        assert wire.schema_exists(key, version)
        assert not req.__flexible__ and req.__header_schema__.__module__.endswith("request_header.v1.header")
    assert not wire.schema_exists(2, 12) and not wire.schema_exists(1, 19)


def test_list_offsets_v0_bytes_are_kafkas():
    mod = wire.request_module(2, 0)
    req = mod.ListOffsetsRequest(replica_id=-1, topics=(mod.ListOffsetsTopic(name="t", partitions=(
        mod.ListOffsetsPartition(partition_index=3, timestamp=-1, max_num_offsets=2),)),))
    body = wire.encode(req)
    # replica_id, [topics: name, [partitions: index, timestamp, max_num_offsets]]
    assert body == struct.pack(">ii", -1, 1) + b"\x00\x01t" + struct.pack(">iiqi", 1, 3, -1, 2)
    rmod = wire.response_module(2, 0)
    resp = rmod.ListOffsetsResponse(topics=(rmod.ListOffsetsTopicResponse(name="t", partitions=(
        rmod.ListOffsetsPartitionResponse(partition_index=3, error_code=ErrorCode.none, old_style_offsets=(9, 0)),)),))
    assert wire.encode(resp) == struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">iihiqq", 1, 3, 0, 2, 9, 0)
    assert wire.decode(type(resp), wire.encode(resp))[0] == resp


def test_delete_topics_v0_layout():
    mod = wire.request_module(20, 0)
    from datetime import timedelta
    assert wire.encode(mod.DeleteTopicsRequest(topic_names=("t",), timeout=timedelta(seconds=1))) == \
        struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1000)
    rmod = wire.response_module(20, 0)
    resp = rmod.DeleteTopicsResponse(responses=(rmod.DeletableTopicResult(name="t", error_code=ErrorCode.none),))
    assert wire.encode(resp) == struct.pack(">i", 1) + b"\x00\x01t\x00\x00"   # no throttle time


def test_offset_commit_v1_and_describe_configs_v0_layouts():
    mod = wire.request_module(8, 1)
    req = mod.OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=4, member_id="m", topics=(
        mod.OffsetCommitRequestTopic(name="t", partitions=(mod.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=7, commit_timestamp=123, committed_metadata=None),)),))
    assert wire.encode(req) == (b"\x00\x01g" + struct.pack(">i", 4) + b"\x00\x01m" + struct.pack(">i", 1)
                                + b"\x00\x01t" + struct.pack(">iiqq", 1, 0, 7, 123) + b"\xff\xff")
    dmod = wire.response_module(32, 0)
    entry = dmod.DescribeConfigsResourceResult(name="k", value="v", read_only=False, is_default=True,
                                               is_sensitive=False)
    # name, value, read_only, is_default, is_sensitive (no config source, no synonyms)
    assert wire.encode(entry) == b"\x00\x01k\x00\x01v\x00\x01\x00"


def test_list_offsets_v0_offsets_before_is_kafkas_algorithm():
    marks = [(0, 100, 1000), (50, 100, 2000), (90, 10, 3000)]    # (base, size, mtime)
    args = dict(marks=marks, log_start=20, log_end=95, now_ms=9000)
    assert offsets_before(timestamp=-1, max_num_offsets=1, **args) == [95]
    assert offsets_before(timestamp=-1, max_num_offsets=10, **args) == [95, 90, 50, 20]  # log start, not 0
    assert offsets_before(timestamp=-2, max_num_offsets=3, **args) == [20]
    assert offsets_before(timestamp=2500, max_num_offsets=10, **args) == [50, 20]
    assert offsets_before(timestamp=999, max_num_offsets=10, **args) == []
    empty_tail = [(0, 100, 1000), (90, 0, 3000)]          # newest segment empty: no log-end entry
    assert offsets_before(empty_tail, 0, 90, 9000, -1, 5) == [90, 0]
    assert clamp_to_high_watermark([95, 90, 50], 60) == [60, 50]
    assert clamp_to_high_watermark([50, 20], 60) == [50, 20]


def _batch(codec: int, records, base_offset: int = 0, log_append: bool = False, control: bool = False) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=control,
                                  producer_id=5 if control else -1, producer_epoch=0 if control else -1,
                                  base_sequence=0 if control else -1, batch_size=1 << 20)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base_offset)
    attrs = struct.unpack_from(">h", data, 21)[0] | (0x08 if log_append else 0) | (0x20 if control else 0)
    struct.pack_into(">h", data, 21, attrs)
    import crc32c
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _read_back(message_set: bytes, magic: int):
    from kafka.record.memory_records import MemoryRecords
    out = []
    records = MemoryRecords(message_set)
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        assert batch.magic == magic
        batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.timestamp if magic else None, r.timestamp_type if magic else None, r.key, r.value))


V0, V1 = b"v0" * 200, b"v1" * 200   # large enough that kafka-python's builder compresses
RECS = [(1_700_000_000_001, b"k0", V0, [("h", b"x")]), (1_700_000_000_005, None, V1, []),
        (1_700_000_000_009, b"k2", None, [])]


@pytest.mark.parametrize("codec", [dc.NONE, dc.GZIP, dc.SNAPPY, dc.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_reads_back_as_the_same_records(codec, magic):
    first = _batch(codec, RECS, base_offset=10)
    assert first[22] & 7 == codec
    data = first + _batch(dc.NONE, RECS[:1], base_offset=13, log_append=True)
    got = _read_back(dc.down_convert(data, magic, 11), magic)   # from offset 11: record 10 dropped
    want = [(11, 1_700_000_000_005, 0, None, V1), (12, 1_700_000_000_009, 0, b"k2", None),
            (13, 1_700_000_000_001, 1, b"k0", V0)]   # log-append time: the batch's max timestamp
    assert got == [(o, ts if magic else None, tt if magic else None, k, v) for o, ts, tt, k, v in want]


def test_down_conversion_drops_control_batches_and_refuses_zstd():
    data = _batch(dc.NONE, [(1, b"\x00\x00\x00\x00", b"", [])], base_offset=0, control=True) \
        + _batch(dc.NONE, RECS[1:2], base_offset=1)
    assert [r[0] for r in _read_back(dc.down_convert(data, 1, 0), 1)] == [1]
    with pytest.raises(dc.Unconvertible):
        dc.down_convert(_batch(dc.ZSTD, [(1, None, b"z" * 500, [])] * 4), 1, 0)
    assert dc.magic_for(0) == dc.magic_for(1) == 0 and dc.magic_for(2) == dc.magic_for(3) == 1


def _legacy_set(magic: int, codec: int, records) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder
    b = MemoryRecordsBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for ts, key, value in records:
        b.append(timestamp=ts, key=key, value=value)
    b.close()
    return bytes(b.buffer())


@pytest.mark.parametrize("codec,magic", [(c, m) for m in (0, 1) for c in (dc.NONE, dc.GZIP, dc.SNAPPY, dc.LZ4)
                                         if (c, m) != (dc.LZ4, 0)])   # magic-0 lz4: Kafka 0.8's own framing
def test_up_conversion_is_one_v2_batch_of_the_same_records(codec, magic):
    from broker_impl.api import up_convert as uc
    from kafka.record.default_records import DefaultRecordBatch
    from kafka_common import batch_header as bh
    msgs = [(1_700_000_000_001, b"k0", V0), (1_700_000_000_004, None, V1), (1_700_000_000_002, b"k2", None)]
    legacy = _legacy_set(magic, codec, msgs)
    assert uc.is_legacy(legacy) and legacy[16] == magic and (legacy[17] & 7) == codec
    batch = uc.up_convert(legacy)
    ((_pos, h),) = list(bh.iter_batches(batch))        # one batch, its CRC-32C right
    assert (h.magic, h.record_count, h.producer_id, h.attributes & 7) == (2, 3, -1, 0)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(batch)]
    stamps = [ts for ts, _k, _v in msgs] if magic == 1 else [-1, -1, -1]
    assert got == [(i, stamps[i], k, v, []) for i, (_ts, k, v) in enumerate(msgs)]
    assert h.max_timestamp == max(stamps)


def test_up_conversion_refuses_bad_message_sets():
    from broker_impl.api import up_convert as uc
    legacy = bytearray(_legacy_set(1, dc.NONE, [(5, b"k", b"v")]))
    legacy[-1] ^= 0xFF
    with pytest.raises(uc.Invalid) as bad_crc:
        uc.up_convert(bytes(legacy))
    assert bad_crc.value.error == "corrupt_message"
    with pytest.raises(uc.Invalid) as short:
        uc.up_convert(bytes(legacy[:20]))
    assert short.value.error == "corrupt_message"
    assert not uc.is_legacy(_batch(dc.NONE, RECS)) and not uc.is_legacy(None)


def test_up_conversion_of_any_bytes_is_a_batch_or_invalid():
    """Hostile Produce v0-2 records: every answer is a v2 batch or ``Invalid`` (never another
    exception: the handler maps ``Invalid`` to the partition's error)."""
    import random
    from broker_impl.api import up_convert as uc
    from kafka_common import batch_header as bh
    rng = random.Random(5)
    seeds = [_legacy_set(m, c, [(7, b"k", b"v" * 50)] * 3) for m in (0, 1) for c in (dc.NONE, dc.GZIP)]
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        try:
            out = uc.up_convert(bytes(data))
        except uc.Invalid:
            continue
        assert len(list(bh.iter_batches(out))) == 1


def test_lz4_with_kafka_08s_header_checksum_is_read():
    """Magic-0 lz4 (Kafka 0.8's framing, librdkafka's MsgVer0): the frame's header checksum
    is wrong; lz4's frame reader refuses it, the block reader takes it (as Kafka does)."""
    import lz4.frame
    import random
    data = bytes(b"legacy lz4 "[x % 11] for x in random.Random(3).randbytes(300_000))   # several 64 KiB blocks
    for linked in (True, False):
        frame = bytearray(lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=linked,
                                             content_checksum=True, store_size=linked))
        hc = 6 + (8 if frame[4] & 0x08 else 0)
        frame[hc] ^= 0x5A
        with pytest.raises(RuntimeError):
            lz4.frame.decompress(bytes(frame))
        assert dc._decompress(dc.LZ4, bytes(frame)) == data
