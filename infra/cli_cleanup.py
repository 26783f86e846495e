"""`jbodlab cleanup`: remove every lab leftover (containers, network, mounts, loop/dm devices, FUSE)."""

from __future__ import annotations

import argparse
import os

from infra.cleanup import cleanup, survey


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="also remove labs whose owner process still runs")
    parser.add_argument("--lab", action="append", metavar="ID", help="only this lab (repeatable; live or not)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")


def run(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"[cleanup] {msg}", flush=True)

    if os.geteuid() != 0:
        say("needs root (mounts, loop devices, docker)")
        return 1
    unchecked: list[str] = []
    chosen = cleanup(lab_ids=args.lab, include_live=args.all, dry_run=args.dry_run, say=say, unchecked=unchecked)
    if args.dry_run:
        return 0
    remaining = {k: v for k, v in survey().items() if k in {c.lab_id for c in chosen} and not v.empty()}
    for lab_id, found in remaining.items():
        say(f"lab {lab_id}: STILL PRESENT: {found.summary()}")
    if unchecked:
        # "nothing left" would be a guess: a stopped dockerd keeps the lab's containers
        say(f"{'removed ' + str(len(chosen)) + ' lab(s) but ' if chosen else ''}could not check "
            f"{'; '.join(unchecked)} — start dockerd (`jbodlab setup` does) and run `jbodlab cleanup` again")
        return 1
    if not chosen:
        say("nothing to clean")
    elif not remaining:
        say(f"removed {len(chosen)} lab(s); nothing left")
    return 1 if remaining else 0
