"""What the benchmarks share for their output (not a benchmark: ``jbodlab bench`` lists
``*_bench.py`` only)."""

from __future__ import annotations

import json
import os


def write_result(out: str, result: dict) -> None:
    """Write ``result`` as JSON to ``out`` (its dir made) and say where."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out}")
