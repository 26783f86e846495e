"""Sans-IO framing of the Kafka protocol: 4-byte big-endian size, then the frame.

``FrameDecoder.feed(data)`` returns the complete frames it now holds; a negative or
oversized size raises :class:`FrameTooLarge` and the caller closes the connection
(Kafka's ``socket.request.max.bytes`` rule).
"""

from __future__ import annotations

import struct

from kafka_common.errors import KafkaCommonError

DEFAULT_MAX_FRAME_BYTES = 104_857_600
_SIZE = struct.Struct(">i")


class FrameTooLarge(KafkaCommonError):
    """The peer announced a frame size that is negative or over the limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame size {size} outside 0..{limit}")
        self.size = size
        self.limit = limit


class FrameDecoder:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self.limit = max_frame_bytes  # may change between feeds (e.g. after authentication)

    def feed(self, data: bytes) -> list[bytes]:
        # Frames are cut straight out of ``data`` when nothing is buffered (one copy per
        # frame), else out of the buffer through a memoryview (one copy, not two); only an
        # incomplete tail is buffered. A follower's fetch responses are up to megabytes.
        buf: bytes | bytearray = data
        if self._buffer:
            self._buffer += data
            buf = self._buffer
        frames: list[bytes] = []
        pos = 0
        buffered = len(buf)
        with memoryview(buf) as view:
            while buffered - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > self.limit:
                    raise FrameTooLarge(size, self.limit)
                if buffered - pos - 4 < size:
                    break
                frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            if buf is not self._buffer and pos < buffered:
                self._buffer += view[pos:]
        if buf is self._buffer and pos:
            del self._buffer[:pos]
        return frames

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)


def encode_frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
