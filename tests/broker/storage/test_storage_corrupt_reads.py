"""A batch whose bytes changed on the disk is never served or replicated: a read that meets a
CRC mismatch takes the dir offline through the failure channel (errno EBADMSG, op ``read``),
and a recovery after an unclean stop truncates the log at the first corrupt batch."""

from __future__ import annotations

import errno
import os
import uuid

import pytest

from broker_impl.storage import batch_crc
from broker_impl.storage.errors import KafkaStorageError
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from kafka_common import batch_header as bh
from kafka_common.clock import ManualClock
from storage_batches import make_batch

pytestmark = pytest.mark.integration
TOPIC_ID = uuid.UUID(int=0xFEED)


def _log_with(tmp_path, failures, n=5):
    clock = ManualClock()
    channel = DirFailureChannel(failures)
    log = PartitionLog.create(str(tmp_path), "t", 0, TOPIC_ID, LogConfig(), channel, clock.monotonic_ms)
    sizes = []
    for i in range(n):
        batch = make_batch(3, 40, tag=b"%d" % i)
        log.append_as_leader(batch, 0)
        sizes.append(len(batch))
    log.flush()
    return log, channel, sizes, clock


def _flip(path: str, pos: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        b = os.pread(fd, 1, pos)
        os.pwrite(fd, bytes([b[0] ^ 0x10]), pos)
    finally:
        os.close(fd)


def test_a_read_meeting_a_corrupt_batch_takes_the_dir_offline_and_serves_nothing(tmp_path, failures):
    log, channel, sizes, _ = _log_with(tmp_path, failures)
    seg = os.path.join(log.path, "00000000000000000000.log")
    assert log.read(0, 1 << 20)                           # intact: served
    _flip(seg, sizes[0] + sizes[1] + 70)                  # a record byte of the 3rd batch (offsets 6-8)
    assert log.read(0, sizes[0] + sizes[1]), "a read that stops before the corrupt batch is still served"
    with pytest.raises(KafkaStorageError) as exc:
        log.read(0, 1 << 20)
    assert exc.value.errno == errno.EBADMSG and exc.value.op == "read"
    assert failures.calls == [(str(tmp_path), errno.EBADMSG, "read")]
    assert channel.is_offline(str(tmp_path))
    with pytest.raises(KafkaStorageError):                # the dir stays offline: nothing more is read
        log.read(0, 100)


def test_a_corrupt_header_is_caught_too():
    data = bytearray(make_batch(2, 10) + make_batch(2, 10))
    batch_crc.verify_read(bytes(data), "seg.log", 0)
    data[len(data) // 2 + 16] ^= 0xFF                     # the second batch's magic byte
    with pytest.raises(batch_crc.CorruptBatchOnDisk, match="unsupported magic") as exc:
        batch_crc.verify_read(bytes(data), "seg.log", 0)
    assert exc.value.errno == errno.EBADMSG


def test_the_follower_append_checks_the_same_crc(tmp_path, failures):
    log, _channel, _sizes, _ = _log_with(tmp_path, failures, n=1)
    batch = bytearray(make_batch(2, 20, base_offset=3))
    batch[-3] ^= 1
    from broker_impl.storage.errors import InvalidRecordBatch
    with pytest.raises(InvalidRecordBatch, match="CRC"):
        log.append_as_follower(bytes(batch))
    assert failures.calls == [], "bad bytes from a peer do not fail our dir"


def test_recovery_after_an_unclean_stop_truncates_at_the_first_corrupt_batch(tmp_path, failures):
    log, channel, sizes, clock = _log_with(tmp_path, failures)
    seg = os.path.join(log.path, "00000000000000000000.log")
    log.close()                                            # no clean-shutdown marker: an unclean stop
    _flip(seg, sizes[0] + sizes[1] + sizes[2] + 70)        # the 4th batch (offsets 9-11)
    again = PartitionLog.load(str(tmp_path), "t-0", LogConfig(), channel, clock.monotonic_ms, recovery_point=0,
                              high_watermark=0, clean_shutdown=False)
    assert again.log_end_offset == 9 and again.recovery.truncated_bytes == sizes[3] + sizes[4]
    assert "CRC mismatch" in again.recovery.reasons[0]
    assert [h.base_offset for _, h in bh.iter_batches(again.read(0, 1 << 20))] == [0, 3, 6]
    assert failures.calls == []
