"""Structural rule (design principle 1): pure code imports no I/O."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {"asyncio", "socket", "os", "time", "subprocess", "threading", "selectors",
             "shutil", "pathlib", "signal", "docker", "pyroute2", "psutil"}
PURE_DIRS = ["kafka_common", "controller_impl/state", "controller_impl/raft", "broker_impl/state",
             "broker_impl/groups/state"]


def _pure_modules():
    for rel in PURE_DIRS:
        yield from sorted((ROOT / rel).rglob("*.py"))


@pytest.mark.unit
@pytest.mark.parametrize("path", list(_pure_modules()), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        bad += [n for n in names if n.split(".")[0] in FORBIDDEN]
    assert not bad, f"{path.relative_to(ROOT)} imports I/O modules: {bad}"
