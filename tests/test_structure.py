"""The project's import structure, read from the source (nothing is imported or run):

1. no import cycle between any two of the project's modules, the imports inside functions
   and ``if TYPE_CHECKING:`` blocks included (a cycle deferred to call time is still two
   modules that each need the other);
2. no import cycle between any two packages, each package and subpackage a node of its own
   (a module belongs to the package it sits in; ``a/b/__init__.py`` is package ``a.b``;
   ``a/__main__.py``, the command line, is a node ``a.__main__`` above package ``a``): two
   packages whose modules need each other are one package in two places, however the modules
   are wired;
3. the pure packages (docs/design.md, "Packages": state machines and values, no I/O) import
   nothing of the project's impure packages, and no I/O module of the standard library or
   of the lab's libraries (sockets, files, processes, containers, dataframes);
4. no product module imports ``testkit`` (test tooling: the product's import graph never
   reaches it; tests, benchmarks and testkit itself may);
5. no product or testkit module is over ``MAX_LINES`` lines: a module that long holds more
   than its name says, and is split along a seam into modules whose names say what they hold;
6. errors: each top-level product package's exception classes derive from one documented
   base in the package's ``errors`` module, and no two exception classes of the product share
   a name (read from the classes' bases through the imports, like the graph).

A module is a ``.py`` file tracked in the repository, named by its path (``tests/x/y.py`` is
``tests.x.y``). ``from a.b import c`` depends on ``a.b.c`` when that is a module, else on
``a.b``. Imports of modules outside the project (the standard library, kio, …) are not
edges. A failure lists every cycle (its files in import order) or every forbidden import.
"""

from __future__ import annotations

import ast
import builtins
import gc
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]

# State machines, values and checkers: functions of their inputs, no sockets, files or
# processes (docs/design.md, "Packages", column "pure?").
PURE = ("kafka_common", "controller_impl.state", "controller_impl.raft", "broker_impl.state", "broker_impl.groups.state",
        "harness.scenario", "harness.generator", "harness.history", "harness.checkers",
        # the error bases (section Errors below): they import nothing, the pure packages derive from them
        "controller_impl.errors", "broker_impl.errors", "harness.errors")
# the product: what pyproject installs, less testkit (and a pytest module, should one sit beside it)
PRODUCT = ("kafka_common", "kafka_runtime", "controller_impl", "broker_impl", "infra", "harness")
MAX_LINES = 400
# modules let over MAX_LINES while a split is under way, each with a ceiling it may not grow
# past (none now: every module is within the limit)
OVERSIZE_CEILINGS: dict[str, int] = {}
IO_MODULES = {"asyncio", "socket", "os", "time", "subprocess", "threading", "selectors", "shutil",
              "pathlib", "signal", "docker", "pyroute2", "psutil", "pyarrow", "pandas"}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def is_pure(module: str) -> bool:
    return any(_in(module, p) for p in PURE)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    found: dict[str, Path] = {}
    for rel in out:
        path = REPO / rel
        if not path.is_file():
            continue
        parts = list(Path(rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(p.isidentifier() for p in parts):
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _targets(node: ast.AST, module: str, path: Path, known: dict[str, Path]) -> list[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = _package_of(module, path)
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            names.append(sub if sub in known else base)
    out = []
    for name in names:
        while name and name not in known:  # `import a.b.c` of a module a.b.c; else its package
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


_COLLECTED: list[bool] = []


@lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module:
    """Parse with the garbage collector held off: a finalizer of an object an earlier test
    leaked (a coroutine of a closed event loop) running inside CPython 3.11's AST conversion
    left it with "AST constructor recursion depth mismatch" (SystemError, seen in CI). The
    finalizers run first, outside the parser."""
    if not _COLLECTED:
        gc.collect()
        _COLLECTED.append(True)
    gc.disable()
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    finally:
        gc.enable()


@lru_cache(maxsize=1)
def graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: line of the first such import}."""
    known = modules()
    edges: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        tree = _parse(path)
        mine: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, module, path, known):
                    mine.setdefault(target, node.lineno)
        edges[module] = mine
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], edges: dict[str, dict[str, int]]) -> str:
    members = set(component)
    ties = [f"    {modules()[a].relative_to(REPO)}:{line} -> {b}"
            for a in component for b, line in sorted(edges[a].items()) if b in members]
    return f"  {len(component)} modules: {', '.join(component)}\n" + "\n".join(ties)


def test_the_reader_sees_a_cycle_and_a_relative_import() -> None:
    """The graph code itself, on a made-up graph: a test that cannot fail proves nothing."""
    edges = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []
    known = {"pkg": Path("pkg/__init__.py"), "pkg.x": Path("pkg/x.py"), "pkg.y": Path("pkg/y.py")}
    node = ast.parse("from . import y\nfrom .y import thing\nimport pkg.x\nimport os").body
    got = [t for n in node for t in _targets(n, "pkg.x", known["pkg.x"], known)]
    assert got == ["pkg.y", "pkg.y"]  # pkg.x importing itself and os are no edges


def package_of(module: str) -> str:
    """The package a module sits in (a package's ``__init__`` is the package itself). A
    package's ``__main__`` (its command line, ``python -m pkg``) is a node of its own above
    the package: it starts the package's runtime, while the package's ``errors`` module sits
    below every subpackage, so counted in the package the two would make every package with
    a command line a cycle."""
    return module if module.endswith(".__main__") else _package_of(module, modules()[module])


def package_graph(edges: dict[str, dict[str, int]], package: Callable[[str], str]) -> dict[str, dict[str, int]]:
    """package -> {imported package: 1} for the modules' edges between different packages;
    modules outside any package (top-level scripts) are left out."""
    out: dict[str, dict[str, int]] = {}
    for module, targets in edges.items():
        a = package(module)
        if not a:
            continue
        mine = out.setdefault(a, {})
        for target in targets:
            b = package(target)
            if b and b != a:
                mine[b] = 1
    return out


def is_product(module: str) -> bool:
    last = module.rpartition(".")[2]
    return any(_in(module, p) for p in PRODUCT) and not (last.startswith("test_") or last == "conftest")


def test_the_package_graph_sees_a_cycle_through_modules_that_have_none() -> None:
    """a.x -> b.y and b.z -> a.w: no two modules need each other, the packages do."""
    edges = {"a.x": {"b.y": 1}, "b.z": {"a.w": 1}, "a.w": {}, "b.y": {}, "a.sub.q": {"a.x": 1}, "top": {"a.x": 1}}
    assert cycles(edges) == []
    package = {"a.x": "a", "a.w": "a", "b.y": "b", "b.z": "b", "a.sub.q": "a.sub", "top": ""}.__getitem__
    graph_ = package_graph(edges, package)
    assert graph_ == {"a": {"b": 1}, "b": {"a": 1}, "a.sub": {"a": 1}}
    assert cycles(graph_) == [["a", "b"]]
    assert is_product("harness.run.runner") and not is_product("harness.catalog.test_x")
    assert not is_product("testkit.cluster") and not is_product("tests.harness.test_history")
    assert package_of("broker_impl.__main__") == "broker_impl.__main__" and package_of("broker_impl.errors") == "broker_impl"


def test_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 100, "the module list came back short: is this a git checkout?"
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, edges) for c in found)


def test_no_package_cycle() -> None:
    edges = graph()
    packages = package_graph(edges, package_of)
    assert len(packages) > 20, "the package list came back short"
    found = cycles(packages)
    lines = []
    for component in found:
        members = set(component)
        lines.append(f"  {len(component)} packages: {', '.join(component)}")
        lines += [f"    {modules()[m].relative_to(REPO)}:{line} -> {t}"
                  for m in sorted(edges) if package_of(m) in members
                  for t, line in sorted(edges[m].items()) if package_of(t) in members - {package_of(m)}]
    assert not found, "package cycles:\n" + "\n".join(lines)


def test_the_product_imports_no_testkit() -> None:
    edges = graph()
    assert any(is_product(m) for m in edges) and any(_in(m, "testkit") for m in edges)
    bad = [f"  {modules()[m].relative_to(REPO)}:{line} imports {target}"
           for m in sorted(edges) if is_product(m)
           for target, line in sorted(edges[m].items()) if _in(target, "testkit")]
    assert not bad, "a product module imports testkit:\n" + "\n".join(bad)


def test_pure_packages_import_only_pure_packages() -> None:
    edges = graph()
    assert any(is_pure(m) for m in edges) and any(not is_pure(m) for m in edges)
    bad = [f"  {modules()[m].relative_to(REPO)}:{line} imports {target}"
           for m in sorted(edges) if is_pure(m)
           for target, line in sorted(edges[m].items()) if not is_pure(target)]
    assert not bad, "a pure package imports an impure one:\n" + "\n".join(bad)


def test_pure_packages_import_no_io() -> None:
    bad = []
    for module, path in sorted(modules().items()):
        if not is_pure(module):
            continue
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            bad += [f"  {path.relative_to(REPO)}:{node.lineno} imports {n}"
                    for n in names if n.split(".")[0] in IO_MODULES]
    assert not bad, "a pure module imports I/O:\n" + "\n".join(bad)


# Errors (docs/design.md, "Errors: one tree per package"): each top-level product package
# that defines an exception class has one documented base in its ``errors.py``; every
# exception class defined in the package derives from it (directly or through a sub-tree),
# and no two exception classes of the product share a name.
ERROR_BASES = {
    "kafka_common": "kafka_common.errors.KafkaCommonError",
    "kafka_runtime": "kafka_runtime.errors.KafkaRuntimeError",
    "controller_impl": "controller_impl.errors.ControllerError",
    "broker_impl": "broker_impl.errors.BrokerError",
    "infra": "infra.errors.InfraError",
    "harness": "harness.errors.HarnessError",
}
# A base from outside the project (not a builtin) counts as an exception when its last name
# ends so (``asyncio.CancelledError``): the check reads the source, it imports nothing.
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning")
_BUILTIN_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))


@dataclass
class ClassInfo:
    """A class of the parsed source: ``key`` is ``module.qualname`` (Python's qualname, so a
    class inside a function is ``m.f.<locals>.C``); ``bases`` are resolved through the
    module's imports: a project class's key, ``builtins.X``, or the dotted name as written."""

    key: str
    module: str
    name: str
    line: int
    bases: list[str]
    doc: str | None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        left = _dotted(node.value)
        return f"{left}.{node.attr}" if left else ""
    return ""  # a base built by a call or a subscript (Generic[T]) is not followed


def _import_table(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """Module-level names bound by imports: local name -> dotted target."""
    table: dict[str, str] = {}
    todo: list[ast.AST] = [tree]
    while todo:  # the module's statements, those of its if/try blocks and classes; no function's
        node = todo.pop()
        todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler))
                 and not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                table[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                table[alias.asname or alias.name] = f"{base}.{alias.name}"
    return table


def exception_classes(trees: dict[str, ast.Module], packages: set[str]) -> dict[str, ClassInfo]:
    """Every class of ``trees`` (module name -> parsed source; ``packages``: the modules that
    are a package's ``__init__``) that derives from a builtin or an external exception,
    followed through the project's classes and the modules' imports and re-exports."""
    tables = {m: _import_table(t, m, m in packages) for m, t in trees.items()}
    classes: dict[str, ClassInfo] = {}
    top: dict[str, dict[str, str]] = {m: {} for m in trees}  # module -> top-level class -> key

    def visit(node: ast.AST, module: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                key = f"{module}.{prefix}{child.name}"
                classes[key] = ClassInfo(key, module, child.name, child.lineno,
                                         [_dotted(b) for b in child.bases], ast.get_docstring(child))
                if not prefix:
                    top[module][child.name] = key
                visit(child, module, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, module, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                visit(child, module, prefix)

    for module, tree in trees.items():
        visit(tree, module, "")

    def absolute(target: str, seen: frozenset[str]) -> str:
        owner, _, name = target.rpartition(".")
        if owner in trees and target not in seen:
            if name in top[owner]:
                return top[owner][name]
            if name in tables[owner]:  # a re-export
                return absolute(tables[owner][name], seen | {target})
        return target

    def resolve(dotted: str, module: str) -> str:
        head, _, rest = dotted.partition(".")
        if not dotted:
            return ""
        if not rest and head in top[module]:
            return top[module][head]
        if head in tables[module]:
            return absolute(tables[module][head] + (f".{rest}" if rest else ""), frozenset())
        if not rest and head in _BUILTIN_EXCEPTIONS:
            return f"builtins.{head}"
        return absolute(dotted, frozenset())

    for c in classes.values():
        c.bases = [resolve(b, c.module) for b in c.bases]

    memo: dict[str, bool] = {}

    def is_exception(key: str) -> bool:
        if key not in memo:
            memo[key] = False  # a cycle of bases (not valid Python) is no exception
            if key in classes:
                memo[key] = any(is_exception(b) for b in classes[key].bases if b)
            elif key.startswith("builtins."):
                memo[key] = key.removeprefix("builtins.") in _BUILTIN_EXCEPTIONS
            else:
                memo[key] = key.rpartition(".")[2].endswith(_EXCEPTION_SUFFIXES)
        return memo[key]

    return {k: c for k, c in classes.items() if is_exception(k)}


def _ancestors(key: str, classes: dict[str, ClassInfo]) -> set[str]:
    out: set[str] = set()
    todo = [key]
    while todo:
        current = classes.get(todo.pop())
        for base in current.bases if current else ():
            if base and base not in out:
                out.add(base)
                todo.append(base)
    return out


def error_tree_problems(trees: dict[str, ast.Module], packages: set[str], bases: dict[str, str]) -> list[str]:
    """What breaks the two rules in ``trees``: (a) an exception class of a top-level package
    of ``bases`` that does not derive from the package's base, a base that is missing or has
    no docstring, an exception class of a package with no base; (b) two exception classes
    of the same name. One line per problem, ``module:line``."""
    found = exception_classes(trees, packages)
    problems: list[str] = []
    for package, base in sorted(bases.items()):
        if base not in found:
            problems.append(f"  {package}: its base {base} is not an exception class of the source")
        elif not (found[base].doc or "").strip():
            problems.append(f"  {base}: the package's base has no docstring")
    for key, c in sorted(found.items()):
        package = c.module.split(".")[0]
        base = bases.get(package)
        if base is None:
            problems.append(f"  {c.module}:{c.line} {c.name}: package {package} has no error base")
        elif key != base and base not in _ancestors(key, found):
            problems.append(f"  {c.module}:{c.line} {c.name} does not derive from {base}")
    by_name: dict[str, list[ClassInfo]] = {}
    for c in found.values():
        by_name.setdefault(c.name, []).append(c)
    for name, same in sorted(by_name.items()):
        if len(same) > 1:
            where = ", ".join(f"{c.module}:{c.line}" for c in sorted(same, key=lambda c: c.key))
            problems.append(f"  {len(same)} exception classes named {name}: {where}")
    return problems


def test_the_error_check_sees_a_stray_class_and_a_shared_name() -> None:
    """The error-tree check on made-up source: a test that cannot fail proves nothing."""
    source = {
        "p.errors": '"""."""\nclass PError(Exception):\n    """What p raises on purpose."""\n',
        "p.sub": "import asyncio\nfrom p.errors import PError\n"
                 "class Good(PError, ValueError):\n    pass\n"
                 "class Stray(ValueError):\n    pass\n"
                 "class Timeout(asyncio.TimeoutError):\n    pass\n"
                 "class NotAnError:\n    pass\n"
                 "def f():\n    class _Close(Exception):\n        pass\n",
        "p.deep": "from .sub import Good\nclass Deeper(Good):\n    pass\nclass Twin(Good):\n    pass\n",
        "p": "from p.sub import Good as Reexported\n",
        "q": '"""."""\nfrom p import Reexported\nclass QError(Reexported):\n    pass\n'
             'class Twin(QError):\n    pass\n',
        "r.errors": "class RError(Exception):\n    pass\n",
    }
    trees = {m: ast.parse(s) for m, s in source.items()}
    found = exception_classes(trees, packages={"p"})
    assert sorted(found) == ["p.deep.Deeper", "p.deep.Twin", "p.errors.PError", "p.sub.Good",
                             "p.sub.Stray", "p.sub.Timeout", "p.sub.f.<locals>._Close",
                             "q.QError", "q.Twin", "r.errors.RError"]
    assert found["q.QError"].bases == ["p.sub.Good"]  # through the re-export of package p
    problems = error_tree_problems(trees, {"p"}, {"p": "p.errors.PError", "q": "q.QError", "r": "r.errors.RError"})
    assert problems == [
        "  q.QError: the package's base has no docstring",
        "  r.errors.RError: the package's base has no docstring",
        "  p.sub:5 Stray does not derive from p.errors.PError",
        "  p.sub:7 Timeout does not derive from p.errors.PError",
        "  p.sub:12 _Close does not derive from p.errors.PError",
        "  2 exception classes named Twin: p.deep:4, q:5",
    ]
    only_p = error_tree_problems(trees, {"p"}, {"p": "p.errors.PError"})
    assert "  q:3 QError: package q has no error base" in only_p and "  r.errors:1 RError: package r has no error base" in only_p
    fixed = dict(source, **{"p.sub": "from p.errors import PError\nclass Good(PError, ValueError):\n    pass\n",
                            "q": '"""."""\nfrom p import Reexported\nclass QError(Reexported):\n    """Q."""\n',
                            "r.errors": 'class RError(Exception):\n    """R."""\n'})
    fixed_trees = {m: ast.parse(s) for m, s in fixed.items()}
    assert error_tree_problems(fixed_trees, {"p"}, {"p": "p.errors.PError", "q": "q.QError", "r": "r.errors.RError"}) == []


def test_one_error_tree_per_package() -> None:
    known = modules()
    product = {m: p for m, p in known.items() if is_product(m)}
    trees = {m: _parse(p) for m, p in product.items()}
    found = exception_classes(trees, {m for m, p in product.items() if p.name == "__init__.py"})
    assert len(found) > 50, "the exception classes came back short"
    assert all(base.startswith(f"{package}.errors.") for package, base in ERROR_BASES.items())
    problems = error_tree_problems(trees, {m for m, p in product.items() if p.name == "__init__.py"}, ERROR_BASES)
    assert not problems, "error trees (docs/design.md, \"Errors: one tree per package\"):\n" + "\n".join(problems)


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them."""
    return path.read_bytes().count(b"\n")


def oversized(sizes: dict[str, int], limit: int, ceilings: dict[str, int]) -> list[str]:
    """The files of ``sizes`` (path -> lines) over ``limit``, or over their own ceiling."""
    return [f"  {rel}: {n} lines (at most {ceilings.get(rel, limit)})"
            for rel, n in sorted(sizes.items()) if n > ceilings.get(rel, limit)]


def test_the_size_check_finds_a_long_module_and_one_grown_past_its_ceiling(tmp_path) -> None:
    sizes = {"a.py": 401, "b.py": 400, "c.py": 453, "d.py": 454, "e.py": 12}
    assert oversized(sizes, 400, {"c.py": 453, "d.py": 453}) == [
        "  a.py: 401 lines (at most 400)", "  d.py: 454 lines (at most 453)"]
    assert oversized({"b.py": 400}, 400, {}) == []
    (tmp_path / "m.py").write_text("x = 1\n" * 3 + "y = 2")   # no newline at the end: 3, as wc -l says
    assert line_count(tmp_path / "m.py") == 3


def test_no_product_or_testkit_module_is_over_the_size_limit() -> None:
    sizes = {str(path.relative_to(REPO)): line_count(path) for module, path in modules().items()
             if is_product(module) or _in(module, "testkit")}
    assert len(sizes) > 100, "the module list came back short"
    assert set(OVERSIZE_CEILINGS) <= set(sizes), "a ceiling names a file that is gone: remove it"
    bad = oversized(sizes, MAX_LINES, OVERSIZE_CEILINGS)
    assert not bad, (f"modules over {MAX_LINES} lines (split each along a seam, into modules whose names say "
                     "what they hold):\n" + "\n".join(bad))


def test_no_native_source_of_the_product_is_over_the_size_limit() -> None:
    """The same rule for the C the product builds (the FUSE fault daemon)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.c", "*.h"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    sizes = {p: line_count(REPO / p) for p in out if not p.startswith(("tests/", "tools/node/"))}
    assert any(p.startswith("infra/faultfs/") for p in sizes), "the native sources came back missing"
    bad = oversized(sizes, MAX_LINES, {})
    assert not bad, f"native sources over {MAX_LINES} lines (split each along a seam):\n" + "\n".join(bad)
