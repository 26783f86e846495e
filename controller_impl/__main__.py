"""`kraft-controller FILE` / `python -m controller_impl FILE`: run a controller until SIGTERM.

`kraft-controller quorum-status (-c FILE | --bootstrap-controller HOST:PORT[,…])` asks the
controllers (DescribeQuorum, API 55) and prints the quorum the way
`kafka-metadata-quorum describe --status` does; exit 1 if no controller names a leader.

Exit status: 0 after a clean stop (SIGTERM/SIGINT), 1 on a halt (metadata log unwritable,
storage not formatted, …) with a one-line reason on stderr, 2 for a bad config.
"""

from __future__ import annotations

if __name__ == "__main__":
    # kio registers hypothesis strategies for its types whenever it can import hypothesis: in
    # the test venv that was ~0.7 s of every node process's start (1.95 → 1.25 s measured), and
    # a node never uses them (the node image has no hypothesis at all)
    import sys as _sys
    _sys.modules.setdefault("hypothesis", None)

import asyncio
import logging
import signal
import sys

from kafka_runtime.event_loop import loop_kind_or_exit, new_event_loop
from kafka_runtime.loop_watch import LoopWatch
from kafka_runtime.properties import load_or_exit

PROG = "kraft-controller"


async def _serve(cfg) -> int:
    from controller_impl.runtime.controller import ControllerRuntime, FatalError
    runtime = ControllerRuntime(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    LoopWatch(loop).start()  # logs any stall of this loop (a daemon thread; lives as long as the process)
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


def quorum_status(argv: list[str]) -> int:
    import argparse
    from controller_impl.runtime.status import print_status
    parser = argparse.ArgumentParser(prog=f"{PROG} quorum-status")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("-c", "--config", help="a server.properties naming controller.quorum.voters")
    group.add_argument("--bootstrap-controller", help="HOST:PORT[,HOST:PORT…]")
    args = parser.parse_args(argv)
    if args.config:
        cfg = load_or_exit(args.config, PROG)
        targets = [(v.host, v.port) for v in cfg.controller_quorum_voters]
    else:
        targets = []
        for item in args.bootstrap_controller.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                parser.error(f"--bootstrap-controller: {item!r} is not HOST:PORT")
            targets.append((host, int(port)))
    if not targets:
        parser.error("no controllers to ask")
    return asyncio.run(print_status(targets))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "quorum-status":
        return quorum_status(argv[1:])
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"usage: {PROG} server.properties | {PROG} quorum-status (-c FILE | --bootstrap-controller HOST:PORT)",
              file=sys.stderr)
        return 2
    cfg = load_or_exit(argv[0], PROG)
    loop_kind_or_exit(PROG)
    if not cfg.is_controller:
        print(f"{PROG}: {argv[0]}: process.roles={','.join(cfg.process_roles)} has no controller role",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}[{cfg.node_id}] %(levelname)s %(message)s")
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_serve(cfg))


if __name__ == "__main__":
    raise SystemExit(main())
