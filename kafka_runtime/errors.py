"""The root of the errors kafka_runtime raises on purpose (pure: imports nothing).

::

    KafkaRuntimeError                   an I/O edge shared by broker and controller gave up
    ├── client.ClientError              a client connection failed or got an unusable answer
    │   └── client.ConnectionClosed     the peer closed the connection
    ├── connection._Close               close this server connection (control flow, never escapes
    │                                   the connection's loop)
    ├── properties.ConfigLoadError      the node's config file cannot be used
    └── storage_tool.StorageToolError   a dir ``kraft-storage`` cannot format or read
"""

from __future__ import annotations


class KafkaRuntimeError(Exception):
    """Base of every error kafka_runtime raises on purpose: a connection, config file or
    storage dir the shared I/O edges cannot use (the message names it). Catch it to tell
    such a refusal from a bug; to handle one kind, catch its class."""
