"""Chaos-session commands: ``jbodlab up|status|fail-disk|heal|partition|kill|down``.

    jbodlab up [--scenario leader-dir-fails] [--backend auto|dm|fuse] [--results DIR]
    jbodlab status
    jbodlab fail-disk broker-1 d1 [--mode error|error-reads|error-writes|flaky|delay|enospc|remove|
                                          corrupt-reads|corrupt-writes|bad-blocks|lose-unsynced|permission]
    jbodlab fail-disk leader:t1/0 replica:t1/0 --mode corrupt-reads --file t1-0:oldest-segment
    jbodlab partition broker-1 controller-3001
    jbodlab kill broker-2 [--signal SIGKILL|SIGTERM] [--power-cut]
    jbodlab heal
    jbodlab delete-topic t1 [--recreate 12 [--replication-factor 3] [--records 100]]
    jbodlab down          # records the session: results/<run_id>/ (then `jbodlab analyze` it)

One module serves all eight commands (registered once each in ``harness.cli.jbodlab.COMMANDS``); the
command is taken from the parser's ``prog``. See :mod:`harness.run.session` for the server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from harness.scenario.faults import DISK_MODES, P_MODES
from harness.cli.session_call import call_session, failed
from harness.run.session import DEFAULT_DIR, SessionError, format_status, node_ref, request

COMMANDS = ("up", "status", "fail-disk", "heal", "partition", "kill", "delete-topic", "down")


def configure(parser: argparse.ArgumentParser) -> None:
    name = parser.prog.split()[-1]
    parser.set_defaults(session_command=name)
    parser.add_argument("--session-dir", default=str(DEFAULT_DIR), help=argparse.SUPPRESS)
    if name == "up":
        parser.add_argument("--scenario", default="leader-dir-fails",
                            help="topology, configs and workload of this catalog scenario or file (its faults "
                                 "are not applied: you apply faults by hand)")
        parser.add_argument("--backend", default="auto", choices=("auto", "dm", "fuse"))
        parser.add_argument("--results", default="results")
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the cluster")
    elif name == "status":
        parser.add_argument("--json", action="store_true")
    elif name == "fail-disk":
        parser.add_argument("node", help="broker-1, 1, broker:1, leader:t1/0, follower:t1/0")
        parser.add_argument("dir", help="d1..dN, metadata, all, replica:t1/0")
        parser.add_argument("--mode", default="error", choices=DISK_MODES)
        parser.add_argument("--p", type=float, default=None,
                            help="flaky: probability of an error (default 0.05); corrupt-reads/-writes: share of "
                                 "4 KiB blocks with a flipped bit (default 1: every block)")
        parser.add_argument("--delay-ms", type=int, default=50, help="delay: added latency")
        parser.add_argument("--file", default=None,
                            help="only this file's blocks: <topic>-<p>:oldest-segment|active-segment|segments|index|"
                                 "leader-epoch-checkpoint, checkpoint:<name>, metadata-log")
    elif name == "partition":
        parser.add_argument("a")
        parser.add_argument("b")
    elif name == "delete-topic":
        parser.add_argument("topic", help="the topic to delete (DeleteTopics through confluent-kafka's AdminClient)")
        parser.add_argument("--recreate", type=int, default=None, metavar="PARTITIONS",
                            help="create it again right after, with this many partitions (a new topic id)")
        parser.add_argument("--replication-factor", type=int, default=3, help="--recreate: replication factor")
        parser.add_argument("--records", type=int, default=0,
                            help="--recreate: acks=all records to produce to it (checked at `down`)")
    elif name == "kill":
        parser.add_argument("node")
        parser.add_argument("--signal", default="SIGKILL", choices=("SIGKILL", "SIGTERM"))
        parser.add_argument("--power-cut", action="store_true",
                            help="SIGKILL, and every disk of the node loses what it had not made durable "
                                 "(`fail-disk NODE all+metadata --mode lose-unsynced` first for a volatile drive cache)")


def _up(args: argparse.Namespace) -> int:
    from harness.scenario.sections import Expect
    from harness.scenario.fields import ScenarioError
    session_dir = Path(args.session_dir)
    if (session_dir / "session.sock").exists():
        try:
            st = request(session_dir, {"cmd": "status"}, timeout_s=10)
            print(f"jbodlab up: a session is already running ({st.get('status', {}).get('run_id')}); "
                  "`jbodlab down` first", file=sys.stderr)
            return 1
        except SessionError:
            (session_dir / "session.sock").unlink(missing_ok=True)
    from harness.catalog.resolve import resolve
    try:
        base = resolve(args.scenario)
    except ScenarioError as exc:
        for path, msg in exc.problems:
            print(f"jbodlab up: {path}: {msg}", file=sys.stderr)
        return 2
    scenario = replace(base, faults=(), bounce=False, expect=Expect(must_show="chaos session (faults by hand)"))
    session_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("ready", "failed.txt"):
        (session_dir / stale).unlink(missing_ok=True)
    spec = session_dir / "scenario.json"
    spec.write_text(scenario.to_json())
    log = open(session_dir / "server.log", "ab")
    results = os.path.abspath(args.results)
    proc = subprocess.Popen([sys.executable, "-m", "harness.run.session", "serve", str(session_dir), "--scenario-json",
                             str(spec), "--backend", args.backend, "--results", results],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + args.timeout
    print(f"jbodlab up: starting session server (pid {proc.pid}, log {session_dir / 'server.log'})", flush=True)
    while time.monotonic() < deadline:
        if (session_dir / "ready").exists():
            st = request(session_dir, {"cmd": "status"})
            for line in format_status(st["status"]):
                print(line)
            return 0
        if proc.poll() is not None:
            print(f"jbodlab up: the session server failed: {_read(session_dir / 'failed.txt')}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    proc.terminate()
    print(f"jbodlab up: the cluster was not ready within {args.timeout:.0f} s", file=sys.stderr)
    return 1


def _read(path: Path) -> str:
    try:
        return path.read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        return "(no reason recorded)"


def _delete_topic_request(args: argparse.Namespace) -> dict:
    """The ``delete-topic`` request, checked here first (a bad argument never reaches the lab)."""
    from controller_impl.state.topics import topic_name_problem
    if (why := topic_name_problem(args.topic)):
        raise SessionError(f"TOPIC: {why}")
    req: dict = {"cmd": "delete-topic", "topic": args.topic}
    if args.recreate is None:
        if args.records or args.replication_factor != 3:
            raise SessionError("--replication-factor/--records: only with --recreate")
        return req
    if args.recreate < 1:
        raise SessionError(f"--recreate: {args.recreate} partitions; needs at least 1")
    if args.replication_factor < 1:
        raise SessionError(f"--replication-factor: {args.replication_factor}; needs at least 1")
    if args.records < 0:
        raise SessionError(f"--records: {args.records}; cannot be negative")
    return {**req, "recreate": args.recreate, "replication_factor": args.replication_factor, "records": args.records}


def _send(name: str, args: argparse.Namespace, session_dir: Path) -> dict:
    """Check ``name``'s arguments and send its request; the session's answer."""
    if name == "status":
        answer = request(session_dir, {"cmd": "status"})
    elif name == "fail-disk":
        node_ref(args.node)
        req = {"cmd": "fail-disk", "node": args.node, "dir": args.dir, "mode": args.mode}
        if args.mode in P_MODES:
            p = args.p if args.p is not None else (0.05 if args.mode == "flaky" else 1.0)
            if not 0 < p <= 1:
                raise SessionError(f"--p: {p} must be in (0, 1]")
            req["p"] = p
        elif args.p is not None:
            raise SessionError(f"--p: only for modes {', '.join(P_MODES)}")
        if args.file:
            req["file"] = args.file
        if args.mode == "delay":
            if args.delay_ms < 1:
                raise SessionError(f"--delay-ms: {args.delay_ms} must be >= 1")
            req["delay_ms"] = args.delay_ms
        answer = request(session_dir, req)
    elif name == "partition":
        a, b = node_ref(args.a), node_ref(args.b)
        if a == b:
            raise SessionError("B: must differ from A")
        answer = request(session_dir, {"cmd": "partition", "a": args.a, "b": args.b})
    elif name == "kill":
        node_ref(args.node)
        answer = request(session_dir, {"cmd": "kill", "node": args.node, "signal": args.signal,
                                       "power_cut": bool(args.power_cut)})
    elif name == "heal":
        answer = request(session_dir, {"cmd": "heal"})
    elif name == "delete-topic":
        answer = request(session_dir, _delete_topic_request(args))
    elif name == "down":
        answer = request(session_dir, {"cmd": "down"}, timeout_s=300)
    else:
        raise SessionError(f"unknown session command {name!r}")
    return answer


def run(args: argparse.Namespace) -> int:
    name = args.session_command
    session_dir = Path(args.session_dir)
    if name == "up":
        try:
            return _up(args)
        except SessionError as exc:
            return failed(name, exc, 2)
    answer, code = call_session(name, lambda: _send(name, args, session_dir))
    if answer is None:
        return code
    if name == "status":
        if args.json:
            print(json.dumps(answer["status"], indent=1))
        else:
            for line in format_status(answer["status"]):
                print(line)
    elif name == "down":
        print(f"session recorded: {answer['run_dir']}  checks {answer['checks']} -> {answer['valid']}")
        print(f"analyze it: jbodlab analyze {answer['run_dir']}")
    else:
        print(json.dumps({k: v for k, v in answer.items() if k != "ok"}))
    return 0
