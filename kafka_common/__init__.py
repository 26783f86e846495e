"""Pure shared model of the KRaft broker and controller.

Nothing in this package performs I/O: no sockets, files, clocks or event loops
(a structural test enforces it). Modules:

- ``ids``           Kafka Uuids, their base64 text form, reserved directory ids (decision D1)
- ``clock``         the Clock protocol and a manual clock for tests
- ``framing``       sans-IO size-prefixed frame decoder
- ``batch_header``  opaque v2 record-batch header view: CRC check, offset rewrite
- ``errors``        ``KafkaCommonError``, the base of every error the package raises
"""
