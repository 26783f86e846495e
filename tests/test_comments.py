"""Comments and docstrings of the product (and of testkit) stand alone: a rule is stated where
it is used, not cited by the work item or the working session that brought it, and a reference
points inside the repository.

Refused in a comment or a docstring (string literals that are data, such as a path written into
a generated Dockerfile, are not read):

* a work item or a session by number — ``issue 36``, ``stop 24``, ``round 3`` (their numbers
  mean nothing to a reader of the code; the measured facts live in ``docs/status.md``);
* a path outside the repository — ``/work/…``, ``../shared/…``, a scratch ``/tmp/wt…`` tree.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("kafka_common", "kafka_runtime", "controller_impl", "broker_impl", "infra", "harness", "testkit")
CITATION = re.compile(r"\b(?:issues?|stops?|rounds?)[ \t]+#?\d+\b|/work/|\.\./shared/|/tmp/wt", re.IGNORECASE)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring of ``source``."""
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def citations(source: str) -> list[tuple[int, str]]:
    return [(line, m.group(0)) for line, text in prose(source) for m in CITATION.finditer(text)]


def test_the_reader_finds_citations_in_comments_and_docstrings_only() -> None:
    src = ('"""Module (issue 36)."""\n'
           'X = "/work/data"  # a value, not prose\n'
           'def f():\n'
           '    """Since stop 24."""\n'
           '    return 1  # see ../shared/spec/x.md\n'
           'Y = "issue 7"\n')
    assert sorted(c for _, c in citations(src)) == sorted(["issue 36", "stop 24", "../shared/"])


def test_no_comment_cites_an_issue_a_session_or_a_path_outside_the_repo() -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *[f"{p}/*.py" for p in CHECKED]],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert files
    found = [f"{rel}:{line}: {cited!r}" for rel in files if (REPO / rel).exists()
             for line, cited in citations((REPO / rel).read_text())]
    assert not found, "state the rule where it is used instead of citing:\n" + "\n".join(found)
