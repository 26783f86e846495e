"""Sans-IO framing of the Kafka protocol: 4-byte big-endian size, then the frame.

``FrameDecoder.feed(data)`` returns the complete frames it now holds; a negative or
oversized size raises :class:`FrameTooLarge` and the caller closes the connection
(Kafka's ``socket.request.max.bytes`` rule).
"""

from __future__ import annotations

import struct

DEFAULT_MAX_FRAME_BYTES = 104_857_600
_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
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
        self._buffer += data
        frames: list[bytes] = []
        pos = 0
        buffered = len(self._buffer)
        while buffered - pos >= 4:
            (size,) = _SIZE.unpack_from(self._buffer, pos)
            if size < 0 or size > self.limit:
                raise FrameTooLarge(size, self.limit)
            if buffered - pos - 4 < size:
                break
            frames.append(bytes(self._buffer[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del self._buffer[:pos]
        return frames

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)


def encode_frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
