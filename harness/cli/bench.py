"""`jbodlab bench [NAME …]`: run the benchmark scripts under bench/ (never part of the tests).

Each script prints its figures and writes results/bench/<name>.json. With no NAME, lists them.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

BENCH_DIR = pathlib.Path(__file__).resolve().parents[1] / "bench"


def _available() -> dict[str, pathlib.Path]:
    return {p.stem.removesuffix("_bench"): p for p in sorted(BENCH_DIR.glob("*_bench.py"))}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: list them)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="arguments after -- go to the script")


def split_names(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Benchmark names and the script's arguments. argparse drops a "--" and hands what
    follows it to NAME too, so the names end at the first option."""
    cut = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    return tokens[:cut], [t for t in tokens[cut:] if t != "--"]


def run(args: argparse.Namespace) -> int:
    available = _available()
    names, extra = split_names([*args.names, *args.rest])
    if not names:
        for name, path in available.items():
            doc = (path.read_text().split('"""')[1].strip().splitlines() or [""])[0] if '"""' in path.read_text() else ""
            print(f"{name:12s} {doc}")
        return 0
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"jbodlab bench: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(available)}",
              file=sys.stderr)
        return 2
    rc = 0
    for name in names:
        print(f"== bench {name}", flush=True)
        rc = max(rc, subprocess.call([sys.executable, str(available[name]), *extra]))
    return rc
