"""`kraft-controller FILE` / `python -m controller_impl FILE`: run a controller until SIGTERM.

Exit status: 0 after a clean stop (SIGTERM/SIGINT), 1 on a halt (metadata log unwritable,
storage not formatted, …) with a one-line reason on stderr, 2 for a bad config.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from kafka_runtime.properties import load_or_exit

PROG = "kraft-controller"


async def _serve(cfg) -> int:
    from controller_impl.runtime.controller import ControllerRuntime, FatalError
    runtime = ControllerRuntime(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runtime.start()
    except (FatalError, OSError) as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr, flush=True)
        runtime.events.emit("halt", reason=str(exc))
        return 1
    except Exception as exc:  # e.g. a committed record the image cannot apply
        reason = f"{type(exc).__name__}: {exc}"
        print(f"{PROG}: cannot start: {reason}", file=sys.stderr, flush=True)
        runtime.events.emit("halt", reason=reason)
        return 1
    stopper = asyncio.ensure_future(stop.wait())
    assert runtime.fatal is not None
    done, _ = await asyncio.wait({stopper, runtime.fatal}, return_when=asyncio.FIRST_COMPLETED)
    halted = runtime.fatal.done()
    stopper.cancel()
    await runtime.stop()
    if halted:
        print(f"{PROG}: halted: {runtime.fatal.result()}", file=sys.stderr, flush=True)
        return 1
    print(f"{PROG}: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"usage: {PROG} server.properties", file=sys.stderr)
        return 2
    cfg = load_or_exit(argv[0], PROG)
    if not cfg.is_controller:
        print(f"{PROG}: {argv[0]}: process.roles={','.join(cfg.process_roles)} has no controller role",
              file=sys.stderr)
        return 2
    return asyncio.run(_serve(cfg))


if __name__ == "__main__":
    raise SystemExit(main())
