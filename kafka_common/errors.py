"""The root of the errors kafka_common raises on purpose (pure: imports nothing).

::

    KafkaCommonError                    input the shared codecs and parsers refuse
    ├── batch_header.CorruptBatch       not a valid v2 record batch (magic, length, CRC)
    │   └── metadata.batches.BatchDecodeError   header and CRC fine, records do not parse
    ├── config.ConfigError              a server.properties value that cannot be used
    ├── framing.FrameTooLarge           a frame size negative or over the limit
    ├── ids.InvalidUuid                 text that is not a Kafka Uuid
    ├── meta_properties.MetaPropertiesError   a meta.properties file that cannot be used
    ├── metadata.fast_records.Unsupported     a record shape the fast codec leaves to kio
    ├── metadata.image_changes.ImageError     a record the metadata image cannot apply
    ├── metadata.records.RecordDecodeError / RecordEncodeError   a metadata record's bytes / value
    ├── metadata.snapshot.SnapshotError not a snapshot, unknown format, CRC mismatch
    ├── topic_config.ConfigProblem      a topic config refused (INVALID_CONFIG)
    ├── wire.DecodeError                bytes that do not decode as the expected entity
    │   └── wire.UnknownApi             an api key / version kio has no schema for
    └── wire_guard.FrameError           bytes kio must not be given

All but ``FrameTooLarge`` and ``Unsupported`` are also ``ValueError`` (the input is at
fault), and callers catch them as that or by their own class.
"""

from __future__ import annotations


class KafkaCommonError(Exception):
    """Base of every error kafka_common raises on purpose: bytes, text or values the shared
    codecs and parsers refuse (the message says which and why). Catch it to tell a refusal
    of the shared code from a bug (any other exception); to handle one kind, catch its
    class."""
