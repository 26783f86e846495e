"""The root of the errors broker_impl raises on purpose (pure: imports nothing, so the pure
``state`` and ``groups.state`` packages may derive from it).

::

    BrokerError                         the broker refuses an input or cannot go on
    ├── storage.errors.StorageError     the storage layer's tree (drawn in storage/errors.py;
    │                                   only KafkaStorageError means "the disk failed")
    ├── storage.batch_crc.CorruptBatchOnDisk   a batch read back fails its CRC (also OSError:
    │                                   EBADMSG, handled as a disk error)
    ├── storage.checkpoint.CheckpointFormatError   a checkpoint file not in Kafka's format
    │                                   (also ValueError)
    ├── api.up_convert.Invalid          a message set that is not valid
    ├── api.down_convert.Unconvertible  a batch that cannot be down-converted
    ├── groups.coordinator_config.GroupConfigError   an unusable group coordinator setting
    │                                   (also ValueError)
    ├── groups.state.records.RecordFormatError   a __consumer_offsets record that does not
    │                                   parse (also ValueError)
    └── runtime.broker.StartupError     the broker cannot start (it exits)

Callers catch the ones marked "also" as that builtin too.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error broker_impl raises on purpose: input the broker refuses, a disk
    it cannot use, or a start-up it cannot finish (the message says which). Catch it to tell
    those from a bug; to handle one kind, catch its class (a failed disk:
    ``storage.errors.KafkaStorageError``)."""
