"""``__consumer_offsets`` record formats and the group → partition hash (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker_impl.groups.coordinator_config import CoordinatorConfig
from broker_impl.groups.state import records as R
from broker_impl.groups.state.group import Member, OffsetEntry
from kafka_common import batch_header as bh
from kafka_common.config import GROUP_COORDINATOR_KEYS

pytestmark = pytest.mark.unit


def _java_hash(text: str) -> int:
    h = 0
    units = text.encode("utf-16-be")
    for k in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[k:k + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_partition_for_matches_java_string_hashcode():
    # well-known Java values: "ab" → 3105, "Aa" and "BB" → 2112, "polygenelubricants" → Integer.MIN_VALUE
    assert R.partition_for("", 50) == 0
    assert R.partition_for("ab", 50) == 3105 % 50
    assert R.partition_for("Aa", 1000) == R.partition_for("BB", 1000) == 2112 % 1000
    assert _java_hash("polygenelubricants") == -(1 << 31) and R.partition_for("polygenelubricants", 50) == 0
    negative = next(f"group-{i}" for i in range(1000) if _java_hash(f"group-{i}") < 0)
    assert R.partition_for(negative, 50) == abs(_java_hash(negative)) % 50      # Utils.abs, not & 0x7fffffff
    assert R.partition_for("é😀", 7) == abs(_java_hash("é😀")) % 7                # surrogate pairs: two units


def test_offset_key_and_value_kafka_bytes():
    key = R.encode_key(R.OffsetKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = R.encode_offset(OffsetEntry(42, 5, "m", 1000))
    assert value == (b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00\x01m"
                     + (1000).to_bytes(8, "big"))
    assert R.decode_key(key) == R.OffsetKey("g", "t", 3)
    assert R.decode_offset(value) == OffsetEntry(42, 5, "m", 1000)
    # version 1 (Kafka 2.0's): offset, metadata, commit ts, expire ts
    v1 = b"\x00\x01" + (7).to_bytes(8, "big") + b"\x00\x00" + (9).to_bytes(8, "big") + (10).to_bytes(8, "big")
    assert R.decode_offset(v1) == OffsetEntry(7, -1, "", 9)


names = st.text(max_size=12)


@given(group=names, protocol_type=names, generation=st.integers(0, 2**31 - 1),
       members=st.lists(st.tuples(names, st.none() | names, names, st.binary(max_size=20), st.binary(max_size=20)),
                        max_size=4))
def test_group_value_round_trip(group, protocol_type, generation, members):
    ms = tuple(Member(mid, inst, cid, "/h", 30000, 10000, protocol_type, (("range", sub),), assignment=asg)
               for mid, inst, cid, sub, asg in members)
    value = R.GroupValue(protocol_type, generation, "range", ms[0].member_id if ms else None, 123, ms)
    back = R.decode_group(R.encode_group(value))
    assert back == value
    assert R.decode_key(R.encode_key(R.GroupKey(group))) == R.GroupKey(group)


def test_batch_round_trip_with_tombstones_and_valid_crc():
    recs = [(R.encode_key(R.GroupKey("g")), b"v"), (R.encode_key(R.OffsetKey("g", "t", 0)), None)]
    batch = R.encode_batch(recs, 1234)
    ((_pos, header),) = list(bh.iter_batches(batch))          # CRC-32C checked by the shared reader
    assert header.record_count == 2 and header.producer_id == -1
    assert [(o, k, v) for o, k, v in R.decode_batches(batch)] == [(0, recs[0][0], b"v"), (1, recs[1][0], None)]
    broken = bytearray(batch)
    broken[-2] ^= 1
    with pytest.raises(R.RecordFormatError):
        list(R.decode_batches(bytes(broken)))


def test_coordinator_config_keys_are_known_to_the_server_config():
    assert set(CoordinatorConfig.KEYS) == GROUP_COORDINATOR_KEYS
    cfg = CoordinatorConfig.from_properties({"offsets.topic.num.partitions": "5",
                                             "group.initial.rebalance.delay.ms": "0"})
    assert cfg.offsets_partitions == 5 and cfg.groups.initial_rebalance_delay_ms == 0
    with pytest.raises(ValueError, match="offsets.topic.replication.factor"):
        CoordinatorConfig.from_properties({"offsets.topic.replication.factor": "0"})
