"""Checkers and metrics are pure: no I/O imports (design: "harness/ … checkers pure")."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {"asyncio", "socket", "os", "time", "subprocess", "threading", "selectors", "shutil",
             "pathlib", "signal", "docker", "pyroute2", "psutil", "pyarrow", "pandas"}
PURE = sorted((ROOT / "harness" / "checkers").glob("*.py")) + [
    ROOT / "harness" / "metrics.py", ROOT / "harness" / "fields.py", ROOT / "harness" / "faults" / "schedule.py"]


@pytest.mark.unit
@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_no_io(path):
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in FORBIDDEN:
            bad.append(node.module)
    assert not bad, f"{path.name} imports {bad}"
