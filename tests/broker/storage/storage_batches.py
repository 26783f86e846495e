"""Real Kafka v2 record batches for the storage tests and the bench (built with kio)."""

from __future__ import annotations

import datetime
import io

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros

from kafka_common import batch_header as bh

_TS = TZAwareMicros.parse(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))


def make_batch(n_records: int = 1, value_size: int = 10, *, base_offset: int = 0, epoch: int = 0,
               tag: bytes = b"v") -> bytes:
    """One v2 batch of ``n_records`` records, offsets ``base_offset..``, leader epoch ``epoch``."""
    value = (tag * value_size)[:value_size]
    recs = tuple(Record(attributes=0, timestamp=_TS, offset=i, key=b"k%d" % i, value=value, headers=())
                 for i in range(n_records))
    buf = io.BytesIO()
    write_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, records=recs, attributes=0))
    out = bytearray(buf.getvalue())
    bh.set_base_offset(out, 0, base_offset)
    bh.set_partition_leader_epoch(out, 0, epoch)
    return bytes(out)


def headers(data: bytes) -> list[bh.BatchHeader]:
    return [h for _, h in bh.iter_batches(data)]
