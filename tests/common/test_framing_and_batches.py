import io
import datetime
import struct

import pytest
from hypothesis import given, strategies as st
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros

from kafka_common import batch_header as bh
from kafka_common.framing import FrameDecoder, FrameTooLarge, encode_frame

pytestmark = pytest.mark.unit


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=50))
def test_frames_survive_any_chunking(payloads, chunk):
    wire = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    out = []
    for i in range(0, len(wire), chunk):
        out += dec.feed(wire[i:i + chunk])
    assert out == payloads
    assert dec.buffered_bytes == 0


@pytest.mark.parametrize("size", [-1, 101])
def test_bad_frame_sizes_raise(size):
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_bytes=100).feed(struct.pack(">i", size))


def _batch(n, base=0):
    ts = TZAwareMicros.parse(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    recs = tuple(Record(attributes=0, timestamp=ts, offset=base + i, key=b"k", value=b"v%d" % i, headers=())
                 for i in range(n))
    buf = io.BytesIO()
    write_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, records=recs, attributes=0))
    return buf.getvalue()


def test_header_crc_and_offset_rewrite():
    raw = bytearray(_batch(3) + _batch(2))
    found = list(bh.iter_batches(raw))
    assert [h.record_count for _, h in found] == [3, 2]
    pos, h = found[1]
    bh.set_base_offset(raw, pos, 3)
    bh.set_partition_leader_epoch(raw, pos, 9)
    h2 = bh.read_header(raw, pos)
    assert (h2.base_offset, h2.last_offset, h2.partition_leader_epoch) == (3, 4, 9)
    assert bh.crc_ok(raw, pos, h2)


def test_corruption_is_detected():
    raw = bytearray(_batch(3))
    raw[-1] ^= 0xFF
    with pytest.raises(bh.CorruptBatch):
        list(bh.iter_batches(raw))
    with pytest.raises(bh.CorruptBatch):
        list(bh.iter_batches(_batch(3)[:-5]))
