"""Chaos-session commands of the operator's tools: ``jbodlab reassign`` and
``jbodlab elect``, run by the session server through a real admin client (kafka-python's
KafkaAdminClient, :mod:`harness.nemesis.operator`) and recorded in the session's history as
``admin`` actions, as the schedule's are.

    jbodlab reassign broker-1 [--topic t1] [--wait 120]   # every replica of broker 1 to the others
    jbodlab reassign broker-1 --no-wait                   # submit only
    jbodlab elect [--unclean] [--topic t1]                # PREFERRED (default) or UNCLEAN

``reassign`` prints the plan (partition → target replicas), then the partitions still moving
every second until none is left or ``--wait`` seconds pass (exit 1 then, naming them).
``elect`` prints each partition's result (NONE = elected, ELECTION_NOT_NEEDED, ...).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.cli.session_call import call_session
from harness.run.session import DEFAULT_DIR, SessionError, node_ref, request


def configure(parser: argparse.ArgumentParser) -> None:
    name = parser.prog.split()[-1]
    parser.set_defaults(operator_command=name)
    parser.add_argument("--session-dir", default=str(DEFAULT_DIR), help=argparse.SUPPRESS)
    if name == "reassign":
        parser.add_argument("node", help="the broker whose replicas move off: broker-1, 1, broker:1, leader:t1/0")
        parser.add_argument("--wait", type=float, default=120.0, help="seconds to follow the moves (default 120)")
        parser.add_argument("--no-wait", action="store_true", help="submit the moves and return")
    else:
        parser.add_argument("--unclean", action="store_true",
                            help="UNCLEAN: elect a live replica outside the ISR where no ISR member can lead")
    parser.add_argument("--topic", default=None, help="only this topic's partitions (default: every topic)")


def run(args: argparse.Namespace) -> int:
    name = args.operator_command
    session_dir = Path(args.session_dir)
    answer, code = call_session(name, lambda: request(session_dir, _request(name, args), timeout_s=60))
    if answer is None:
        return code
    if name == "elect":
        return _print_election(answer)
    return _follow_moves(session_dir, answer, args)


def _request(name: str, args: argparse.Namespace) -> dict:
    if name == "reassign":
        if args.wait <= 0 and not args.no_wait:
            raise SessionError(f"--wait: {args.wait} must be > 0 (or --no-wait)")
        req = {"cmd": "admin", "action": "reassign", "node": node_ref(args.node)}
    else:
        req = {"cmd": "admin", "action": "elect", "election": "unclean" if args.unclean else "preferred"}
    if args.topic:
        req["topic"] = args.topic
    return req


def _print_election(answer: dict) -> int:
    result = answer.get("result")
    if not isinstance(result, dict):
        print(f"jbodlab elect: {result}", file=sys.stderr)
        return 1
    for key in sorted(result):
        print(f"{key}: {result[key]}")
    elected = sum(v == "NONE" for v in result.values())
    print(f"{elected} leader(s) elected, {sum(v == 'ELECTION_NOT_NEEDED' for v in result.values())} not needed, "
          f"{len(result) - elected - sum(v == 'ELECTION_NOT_NEEDED' for v in result.values())} refused "
          f"({answer.get('fault')})")
    return 0


def _follow_moves(session_dir: Path, answer: dict, args: argparse.Namespace) -> int:
    plan, result = answer.get("plan") or {}, answer.get("result")
    if not plan:
        print(f"jbodlab reassign: nothing to move ({answer.get('result')})")
        return 0 if result in (None, "none", {}) else 1
    for key in sorted(plan):
        print(f"{key} -> {plan[key]}")
    if result not in (None, "none", {}):
        print(f"jbodlab reassign: refused: {result}", file=sys.stderr)
        return 1
    print(f"{len(plan)} partition(s) reassigned ({answer.get('fault')})", flush=True)
    if args.no_wait:
        return 0
    deadline = time.monotonic() + args.wait
    last = None
    while True:
        try:
            left = request(session_dir, {"cmd": "reassignments"}, timeout_s=60).get("in_progress", [])
        except SessionError as exc:
            print(f"jbodlab reassign: {exc}", file=sys.stderr)
            return 2
        if left != last:
            print(f"in progress: {len(left)}" + (f" ({', '.join(left[:8])}{' …' if len(left) > 8 else ''})"
                                                 if left else ""), flush=True)
            last = left
        if not left:
            print("every move completed: the targets joined the ISRs, the old replicas left")
            return 0
        if time.monotonic() >= deadline:
            print(f"jbodlab reassign: still moving after {args.wait:.0f} s: {', '.join(left)}", file=sys.stderr)
            return 1
        time.sleep(1.0)
