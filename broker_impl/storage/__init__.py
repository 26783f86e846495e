"""Broker storage: partition logs on JBOD log dirs, recovery, checkpoints, start-up rules,
health probe, and the single failure path for every OSError on a dir.

Modules (each documents its part of the API):

* :mod:`.startup` — ``load_log_dirs(...) -> LogDirSet`` (meta.properties rules)
* :mod:`.log_manager` — ``LogManager`` (all logs, placement, offline dirs, checkpoints, probe)
* :mod:`.partition_log` — ``PartitionLog`` (append/read/truncate/flush of one partition),
  ``LogConfig``
* :mod:`.failure` — ``DirFailureChannel``: ``on_failure(dir_path, errno, op)`` once per dir;
  ``failure_callback_by_id`` turns it into ``DirFailure`` values (by dir id)
* :mod:`.probe` — ``probe(dir_path)`` (O_DIRECT write + fsync)
* :mod:`.segment`, :mod:`.epoch_cache`, :mod:`.checkpoint` — on-disk formats (Kafka's)
* :mod:`.errors` — ``KafkaStorageError`` (56), ``LogDirStartupError``, ``InvalidRecordBatch``,
  ``OffsetOutOfRange``, ``LogNotFound``
"""

from broker_impl.storage.errors import (InconsistentTopicId, InvalidRecordBatch, KafkaStorageError, LogDirStartupError, LogNotFound,
                                        OffsetOutOfRange, StorageError)
from broker_impl.storage.failure import DirFailureChannel
from broker_impl.storage.failure import DirFailure, failure_callback_by_id
from broker_impl.storage.log_manager import LogManager
from broker_impl.storage.log_config import LogConfig
from broker_impl.storage.partition_log import PartitionLog
from broker_impl.storage.probe import probe
from broker_impl.storage.startup import LogDirInfo, LogDirSet, load_log_dirs

__all__ = ["DirFailure", "DirFailureChannel", "InconsistentTopicId", "InvalidRecordBatch", "KafkaStorageError", "LogConfig",
           "LogDirInfo", "LogDirSet", "LogDirStartupError", "LogManager", "LogNotFound", "OffsetOutOfRange",
           "PartitionLog", "StorageError", "failure_callback_by_id", "load_log_dirs", "probe"]
