"""``jbodlab scenario``: list the catalog, show a scenario value, validate scenario files.

    jbodlab scenario list
    jbodlab scenario show --scenario leader-dir-fails --bounce --set workload.rate_per_s=500
    jbodlab scenario validate my.toml other.json
"""

from __future__ import annotations

import argparse
import sys

from harness.scenario.fields import ScenarioError
from harness.scenario.model import Scenario
from harness.catalog.resolve import load_scenario, resolve


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, metavar="NAME|FILE",
                        help="a catalog name (e.g. leader-dir-fails, leader-dir-fails-bounce) or a .json/.toml file")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="override one field, e.g. workload.rate_per_s=500 or faults[0].mode=delay")
    parser.add_argument("--seed", type=int, default=None, help="the seed (default: the scenario's)")
    parser.add_argument("--bounce", action="store_true", default=None,
                        help="the bounce variant of a catalog scenario")


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The scenario named by parsed CLI arguments, overrides applied, then validated."""
    return resolve(args.scenario, overrides=args.overrides or [], seed=args.seed, bounce=bool(args.bounce))


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="every catalog scenario (the full bounce matrix)")
    show = sub.add_parser("show", help="print a scenario value as JSON (the run.json 'scenario_value')")
    add_scenario_arguments(show)
    check = sub.add_parser("validate", help="validate scenario files (.json/.toml); exit 1 on any problem")
    check.add_argument("files", nargs="+")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        from harness.catalog.catalog import all_scenarios
        for s in all_scenarios():
            print(f"{s.id:4} {s.variant:34} {s.expect.must_show}")
        return 0
    if args.action == "show":
        try:
            print(scenario_from_args(args).to_json())
        except ScenarioError as exc:
            print(f"jbodlab scenario: {exc}", file=sys.stderr)
            return 1
        return 0
    status = 0
    for path in args.files:
        try:
            s = load_scenario(path)
            print(f"{path}: ok ({s.variant}, {len(s.faults)} faults, checks {', '.join(s.checks)})")
        except ScenarioError as exc:
            status = 1
            for field_path, message in exc.problems:
                print(f"{path}: {field_path}: {message}", file=sys.stderr)
    return status
