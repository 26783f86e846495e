"""The one check that no batch with a bad CRC-32C is appended, served or replicated.

``checked_batches(data)`` — every batch of bytes about to be appended (a producer's, or a
follower's from its leader), header and CRC verified: ``(position, header)`` pairs, or
:class:`~kafka_common.batch_header.CorruptBatch`.

``verify_read(data, path, offset)`` — the batches a read took from a segment file, before
they are served to a consumer or a follower: a CRC that does not match means the disk gave
back other bytes than were written (silent corruption, a bit flip on the medium or on the
way). That is an I/O failure of the dir, raised as :class:`CorruptBatchOnDisk` (an
``OSError`` with ``EBADMSG``) inside the read's ``channel.io`` block, so it takes the path of
every other disk error: the dir goes offline, the broker reports it, leadership moves to a
replica whose copy is intact (KIP-858). Kafka itself does not check on this path (it sends
the file's bytes as they are; its consumers check, librdkafka only with ``check.crcs=true``):
here nothing corrupt leaves the broker. Cost: one CRC-32C pass over the bytes read (the
``crc32c`` C extension, GB/s). A zero-copy send of file bytes would skip this check: a
read path that stops copying bytes through Python must keep calling it on what it sends.
"""

from __future__ import annotations

import errno

from broker_impl.errors import BrokerError
from kafka_common import batch_header as bh


class CorruptBatchOnDisk(BrokerError, OSError):
    """A batch read back from a segment fails its CRC: the dir's data is not what was written."""

    def __init__(self, path: str, offset: int, position: int, reason: str) -> None:
        super().__init__(errno.EBADMSG, f"corrupt batch read back from {path} (fetch offset {offset}, position "
                                        f"{position} of the read): {reason}", path)


def checked_batches(data: bytes | bytearray | memoryview) -> list[tuple[int, bh.BatchHeader]]:
    """(position, header) of every batch in ``data``, each one's CRC-32C verified."""
    return list(bh.iter_batches(data, check_crc=True))


def verify_read(data: bytes | bytearray | memoryview, path: str, offset: int) -> None:
    """Raise :class:`CorruptBatchOnDisk` unless every batch of a read has a matching CRC."""
    pos = 0
    total = len(data)
    while pos < total:
        try:
            header = bh.read_header(data, pos)
        except bh.CorruptBatch as exc:
            raise CorruptBatchOnDisk(path, offset, pos, str(exc)) from None
        if pos + header.size_bytes > total:
            raise CorruptBatchOnDisk(path, offset, pos, "batch longer than the bytes read")
        if not bh.crc_ok(data, pos, header):
            raise CorruptBatchOnDisk(path, offset, pos, f"CRC mismatch in the batch at offset {header.base_offset}")
        pos += header.size_bytes
