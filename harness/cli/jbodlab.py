"""`jbodlab`: one entry point, subcommands implemented in their own modules.

Each subcommand module exposes ``configure(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int``. Modules are imported only when their command runs,
so ``jbodlab --help`` stays fast and one broken area does not take the others down.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "setup": ("infra.cli_setup", "install host packages, start dockerd, build the node image (idempotent)"),
    "cleanup": ("infra.cli_cleanup", "remove every lab leftover: containers, mounts, loop/dm devices, FUSE, netns"),
    "demo": ("harness.cli.demo", "controller-only demo over TCP (no containers): registration, dir failure, Fetch"),
    "run": ("harness.cli.run", "run scenarios (S1…S15, --all, or files) in containers on loop devices; more than one run is a campaign"),
    "scenario": ("harness.cli.scenario", "list the scenario catalog, show a scenario value, validate scenario files"),
    "up": ("harness.cli.session", "chaos session: start a lab cluster with a running producer"),
    "status": ("harness.cli.session", "chaos session: brokers fenced/unfenced, dirs online/offline, partitions"),
    "fail-disk": ("harness.cli.session", "chaos session: fail a broker's dir at the block layer (NODE DIR --mode)"),
    "partition": ("harness.cli.session", "chaos session: cut the network between two nodes (A B)"),
    "kill": ("harness.cli.session", "chaos session: kill a node's process"),
    "heal": ("harness.cli.session", "chaos session: heal every open fault"),
    "delete-topic": ("harness.cli.session", "chaos session: delete a topic through an admin client (TOPIC [--recreate N])"),
    "reassign": ("harness.cli.operator", "chaos session: move every replica of a broker to the others (NODE [--topic T])"),
    "elect": ("harness.cli.operator", "chaos session: ElectLeaders PREFERRED (or --unclean) [--topic T]"),
    "down": ("harness.cli.session", "chaos session: heal, drain, record the session as a run, tear down"),
    "bench": ("harness.cli.bench", "run the benchmarks under bench/ (figures printed and written to results/bench/)"),
    "analyze": ("harness.analysis.cli", "Spark (or pandas) analysis of any number of result runs"),
}


def _load(name: str):
    module_name, _ = COMMANDS[name]
    return importlib.import_module(module_name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="jbodlab", description="KIP-858 JBOD disk-failure lab")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        parser.error(f"unknown command {name!r} (choose from {', '.join(COMMANDS)})")
    try:
        module = _load(name)
    except ImportError as exc:
        print(f"jbodlab {name}: not available in this build ({exc})", file=sys.stderr)
        return 2
    cmd_parser = argparse.ArgumentParser(prog=f"jbodlab {name}", description=COMMANDS[name][1])
    module.configure(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"jbodlab {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
