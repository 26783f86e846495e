"""The runtimes are composed, not layered by inheritance: no class of ``kafka_common``,
``kafka_runtime``, ``controller_impl`` or ``broker_impl`` inherits a class of the project,
except exceptions (their families are the errors rule) and ``typing.Protocol`` hosts. A part
of a larger object is a class of its own that gets its host (a small protocol) and works
through it, as ``RaftState.roles``, ``Groups.membership``, ``GroupCoordinator.ownership``,
``MetadataImage.indexes`` do. Classes deriving from kio's schema classes are not the
project's own bases and are fine."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

pytestmark = pytest.mark.unit
RUNTIMES = ("kafka_common", "kafka_runtime", "controller_impl", "broker_impl")
PROJECT = RUNTIMES + ("infra", "harness", "testkit")
# (class, base) pairs that stay, each with why
ALLOWED = {
    # the runtime's view is the complete storage view (what the tests mount) plus the
    # runtime's own status and ISR bookkeeping, overriding a few of its answers
    ("broker_impl.runtime.runtime_view.RuntimeView", "broker_impl.api.storage_view.LogManagerView"),
}


def _modules() -> list:
    out = []
    for name in RUNTIMES:
        pkg = importlib.import_module(name)
        out.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, name + "."):
            if not info.name.endswith("__main__"):
                out.append(importlib.import_module(info.name))
    return out


def _inherited(modules: list) -> set[tuple[str, str]]:
    found = set()
    for module in modules:
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            for base in cls.__bases__:
                own = base.__module__.split(".")[0] in PROJECT
                if own and not issubclass(base, BaseException) and not getattr(base, "_is_protocol", False):
                    found.add((f"{cls.__module__}.{cls.__qualname__}", f"{base.__module__}.{base.__qualname__}"))
    return found


def test_no_runtime_class_inherits_a_project_class():
    found = _inherited(_modules())
    assert found - ALLOWED == set(), sorted(found - ALLOWED)
    assert ALLOWED <= found, f"an allowed pair is gone: remove it from ALLOWED: {sorted(ALLOWED - found)}"


def test_the_check_sees_a_mixin():
    import types

    module = types.ModuleType("broker_impl.fake")

    class Slice:
        pass

    class Whole(Slice):
        pass

    class Failure(ValueError):
        pass

    for cls in (Slice, Whole, Failure):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    assert _inherited([module]) == {(f"broker_impl.fake.{Whole.__qualname__}", f"broker_impl.fake.{Slice.__qualname__}")}
