"""I/O edges shared by the broker and controller processes: files, sockets, event log.

- ``fsutil``        atomic durable file writes
- ``properties``    reading server.properties into a validated ServerConfig
- ``errors``        ``KafkaRuntimeError``, the base of every error the package raises
"""
