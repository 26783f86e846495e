"""`kraft-broker FILE` / `python -m broker_impl FILE`: run a broker until SIGTERM.

Exit status: 0 after a clean (controlled) stop, 1 on a halt (last / metadata / only log dir
failed, storage start-up rules) or the log.dir.failure.timeout.ms shutdown, with a one-line
reason on stderr; 2 for a bad config.
"""

from __future__ import annotations

if __name__ == "__main__":
    # kio registers hypothesis strategies for its types whenever it can import hypothesis: in
    # the test venv that was ~0.7 s of every node process's start (1.95 → 1.25 s measured), and
    # a node never uses them (the node image has no hypothesis at all)
    import sys as _sys
    _sys.modules.setdefault("hypothesis", None)

import asyncio
import faulthandler
import logging
import os
import signal
import sys

from kafka_runtime.event_loop import loop_kind_or_exit, new_event_loop
from kafka_runtime.loop_watch import LoopWatch
from kafka_runtime.properties import load_or_exit

PROG = "kraft-broker"
TEARDOWN_S = 0.5


async def _serve(cfg) -> int:
    from broker_impl.runtime.broker import BrokerRuntime, StartupError
    runtime = BrokerRuntime(cfg)
    loop = asyncio.get_running_loop()
    LoopWatch(loop).start()  # logs any stall of this loop (a daemon thread; lives as long as the process)
    try:
        await runtime.start()
    except (StartupError, ValueError, OSError) as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr, flush=True)
        runtime.events.emit("halt", reason=f"cannot start: {exc}")
        await runtime.stop()
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runtime.request_shutdown)
    assert runtime.exit_code is not None
    code, reason = await runtime.exit_code
    await runtime.stop()
    print(f"{PROG}: {'stopped' if code == 0 else 'shut down'}: {reason}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"usage: {PROG} server.properties", file=sys.stderr)
        return 2
    cfg = load_or_exit(argv[0], PROG)
    loop_kind_or_exit(PROG)
    if not cfg.is_broker:
        print(f"{PROG}: {argv[0]}: process.roles={','.join(cfg.process_roles)} has no broker role", file=sys.stderr)
        return 2
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand (debugging a stuck broker)
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}[{cfg.node_id}] %(levelname)s %(message)s")
    code = _run(cfg)
    # The runtime has stopped (bounded, logs closed). Leave without the interpreter's exit
    # joins: a thread still in a hung dir's I/O, or the default executor, must not keep a
    # stopped broker's process alive.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(cfg) -> int:
    """``asyncio.run`` with a bounded teardown: tasks still alive after the stop are
    cancelled and given ``TEARDOWN_S`` (3.11's ``wait_for`` may swallow a cancel, and
    ``asyncio.run`` would wait for such a task forever)."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        code = loop.run_until_complete(_serve(cfg))
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=TEARDOWN_S))
        return code
    finally:
        asyncio.set_event_loop(None)


if __name__ == "__main__":
    raise SystemExit(main())
