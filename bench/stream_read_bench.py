"""How many reads, and how long, a 10 MiB answer takes through an asyncio stream when the
loop has other work (not a test): a server thread writes 10 MiB per request; the reading
loop runs a busy task beside the reader (2 ms of work per slice, as a broker's loop serving
producers does). asyncio's default stream buffer (64 KiB) pauses the transport every
128 KiB; ``kafka_runtime.client.READ_BUFFER_BYTES`` (8 MiB) does not; a BufferedProtocol
reading into one 8 MiB buffer for comparison. Under asyncio's loop and uvloop (the brokers').

    python bench/stream_read_bench.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafka_runtime.client import READ_BUFFER_BYTES  # noqa: E402

N = 10 << 20


def _server(port_box: list, ready: threading.Event) -> None:
    async def run() -> None:
        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while await r.read(4):
                w.write(b"x" * N)
                await w.drain()
        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port_box.append(srv.sockets[0].getsockname()[1])
        ready.set()
        await asyncio.sleep(3600)
    asyncio.run(run())


class _Buffered(asyncio.BufferedProtocol):
    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self.got = self.calls = 0
        self.done: asyncio.Future | None = None

    def get_buffer(self, hint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, n: int) -> None:
        self.got += n
        self.calls += 1
        if self.got >= N and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def _one(port: int, kind: str, rounds: int = 3) -> list[tuple[int, int]]:
    stop = False

    async def busy() -> None:
        while not stop:
            time.sleep(0.002)
            await asyncio.sleep(0)
    b = asyncio.ensure_future(busy())
    loop = asyncio.get_running_loop()
    res = []
    if kind == "buffered":
        t, p = await loop.create_connection(lambda: _Buffered(8 << 20), "127.0.0.1", port)
        for _ in range(rounds):
            p.got = p.calls = 0
            p.done = loop.create_future()
            s = time.perf_counter()
            t.write(b"go!!")
            await p.done
            res.append((p.calls, round((time.perf_counter() - s) * 1000)))
        t.close()
    else:
        kw = {"limit": READ_BUFFER_BYTES} if kind == "client" else {}
        r, w = await asyncio.open_connection("127.0.0.1", port, **kw)
        for _ in range(rounds):
            s = time.perf_counter()
            w.write(b"go!!")
            n = got = 0
            while got < N:
                got += len(await r.read(1 << 20))
                n += 1
            res.append((n, round((time.perf_counter() - s) * 1000)))
        w.close()
    stop = True
    await b
    return res


def main() -> int:
    import uvloop
    box: list = []
    ready = threading.Event()
    threading.Thread(target=_server, args=(box, ready), daemon=True).start()
    ready.wait()
    for name, runner in (("asyncio", asyncio.run), ("uvloop", uvloop.run)):
        for kind in ("default", "client", "buffered"):
            got = runner(_one(box[0], kind))
            print(f"{name:8} {kind:9} (reads, ms) per 10 MiB answer: {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
