"""Errors of the broker's storage layer.

::

    StorageError                      base of everything raised here
    ├── KafkaStorageError             an OSError on a log dir, or the dir is already offline
    │                                 (answer KAFKA_STORAGE_ERROR = 56); carries dir, errno, op
    ├── LogDirStartupError            fatal start-up problem with the log dir set:
    │                                 the broker must exit non-zero with this message
    ├── InvalidRecordBatch            bytes from a client/leader that are not valid v2 batches
    │                                 (error_code CORRUPT_MESSAGE = 2, or MESSAGE_TOO_LARGE = 10)
    ├── ProducerSequenceError         an idempotent producer's batch refused by the leader's
    │                                 producer state (OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    │                                 INVALID_PRODUCER_EPOCH = 47)
    ├── OffsetOutOfRange              fetch offset outside [log_start_offset, log_end_offset]
    │                                 (OFFSET_OUT_OF_RANGE = 1)
    ├── LogNotFound                   no log for that partition / a path not in log.dirs
    │   └── LogClosed                 the log was closed while an operation waited for it
    │                                 (deleted, moved away): NOT_LEADER_OR_FOLLOWER = 6
    └── InconsistentTopicId           the log on disk has another topic id than metadata
                                      (INCONSISTENT_TOPIC_ID = 103)

Only :class:`KafkaStorageError` means "the disk failed"; the others are caller errors and
never take a dir offline.
"""

from __future__ import annotations

from broker_impl.errors import BrokerError
from kafka_common.wire import ErrorCode

# the wire codes these errors carry (``error_code``), by kio's names
KAFKA_STORAGE_ERROR = ErrorCode.kafka_storage_error
OFFSET_OUT_OF_RANGE = ErrorCode.offset_out_of_range
CORRUPT_MESSAGE = ErrorCode.corrupt_message
MESSAGE_TOO_LARGE = ErrorCode.message_too_large
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.out_of_order_sequence_number
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch


class StorageError(BrokerError):
    """Base of the storage errors."""


class KafkaStorageError(StorageError):
    """An I/O failure on ``dir_path`` during ``op`` (or the dir was already offline).

    ``errno`` is the OSError's errno (``None`` when the dir was already offline and the
    operation did not touch the disk)."""

    error_code = KAFKA_STORAGE_ERROR

    def __init__(self, dir_path: str, errno: int | None, op: str, detail: str = "") -> None:
        self.dir_path = dir_path
        self.errno = errno
        self.op = op
        if errno is None:
            msg = f"log dir {dir_path} is offline (op {op} not attempted)"
        else:
            msg = f"I/O error in log dir {dir_path} during {op}: errno {errno}"
        super().__init__(msg + (f": {detail}" if detail else ""))


class LogDirStartupError(StorageError):
    """The log dir set cannot be used; start-up must stop with this message."""


class InvalidRecordBatch(StorageError):
    """Input bytes that are not acceptable record batches; the dir stays online."""

    def __init__(self, message: str, error_code: int = CORRUPT_MESSAGE) -> None:
        super().__init__(message)
        self.error_code = error_code


class ProducerSequenceError(StorageError):
    """The producer state refused a batch (bad sequence or fenced epoch); nothing appended."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


class OffsetOutOfRange(StorageError):
    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogNotFound(StorageError):
    """No such partition log in this log manager."""


class LogClosed(LogNotFound):
    """The log was closed (deleted, or moved away) while an append, read or trim waited for
    it: the replica is gone, the client asks the metadata again. Never a disk failure."""
    error_code = ErrorCode.not_leader_or_follower


class InconsistentTopicId(StorageError):
    """The log on disk belongs to another incarnation of the topic (different topic id)."""

    error_code = ErrorCode.inconsistent_topic_id
