"""One JSON request, one JSON answer, each a line, over a unix socket: how the lab's local
servers are driven (the FUSE daemon's control socket, a chaos session)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


def exchange(path: str | Path, request: Any, timeout_s: float) -> bytes:
    """Send ``request`` as one line, return the answer line (b"" when the server closed the
    connection without one). OSError when the socket does not answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(path))
        sock.sendall((json.dumps(request) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data
