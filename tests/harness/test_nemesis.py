"""harness.nemesis: one Nemesis per fault class, driven by the executor (fakes of the services
and the lab: no containers)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.nemesis.executor import NEMESES, FaultExecutor
from harness.scenario.faults import FAULT_CLASSES, AdminAction, DiskFault, NetworkFault, ProcessFault

pytestmark = pytest.mark.unit


class FakeLedger:
    def __init__(self) -> None:
        self.events: list = []

    def write(self, event) -> None:
        self.events.append(event.event)

    def action(self, ts_ns, name, node_id, **attrs) -> None:
        self.events.append(name)


class FakeHandle:
    def __init__(self, log: list, what: str) -> None:
        self.log, self.what, self.record = log, what, None

    def inject(self) -> None:
        self.log.append(f"inject {self.what}")

    def heal(self) -> None:
        self.log.append(f"heal {self.what}")


class FakeLab:
    backend = SimpleNamespace(name="fake")

    def __init__(self, log: list) -> None:
        self.log = log

    def partition(self, a, b):
        return FakeHandle(self.log, f"partition {a} {b}")

    def isolate(self, a):
        return FakeHandle(self.log, f"isolate {a}")

    def netem(self, a, **kw):
        return FakeHandle(self.log, f"netem {a} {sorted(kw.items())}")


class FakeServices:
    def __init__(self, log: list) -> None:
        self.log = log
        self.lab = FakeLab(log)
        self.nodes = {1: SimpleNamespace(name="broker-1"), 2: SimpleNamespace(name="broker-2")}

    def pause(self, n):
        self.log.append(f"pause {n}")

    def unpause(self, n):
        self.log.append(f"unpause {n}")

    def kill(self, n, sig):
        self.log.append(f"kill {n} {sig}")

    def start(self, n):
        self.log.append(f"start {n}")


def executor() -> tuple[FaultExecutor, list, FakeLedger]:
    log: list = []
    ledger = FakeLedger()
    return FaultExecutor(FakeServices(log), ledger, seed=1), log, ledger


def test_every_fault_class_has_its_nemesis():
    assert set(NEMESES) == set(FAULT_CLASSES.values())
    for kind in NEMESES.values():
        assert all(callable(getattr(kind, m)) for m in ("inject", "heal", "describe"))


def test_network_partition_inject_and_heal_through_the_handle():
    ex, log, ledger = executor()
    act = ex.inject(0, NetworkFault(at_ms=0, action="partition", node="broker:1", peer="broker:2", duration_ms=5))
    assert (act.node_id, act.healed) == (1, False) and log == ["inject partition broker-1 broker-2"]
    ex.heal(0)
    ex.heal(0)   # once only
    assert log[1:] == ["heal partition broker-1 broker-2"] and ledger.events == ["fault_injected", "fault_healed"]
    loss = NetworkFault(at_ms=0, action="loss", node="broker:2", loss_pct=5.0)
    ex.inject(1, loss)
    assert log[-1] == "inject netem broker-2 [('loss_pct', 5.0)]"
    assert ex.describe(loss) == "loss(5.0%) broker:2"


def test_process_pause_resumes_and_a_timed_kill_starts_again_at_the_heal():
    ex, log, _ = executor()
    ex.inject(0, ProcessFault(at_ms=0, action="pause", node="broker:1", duration_ms=10))
    ex.inject(1, ProcessFault(at_ms=0, action="kill", node="broker:2", duration_ms=10))
    ex.inject(2, ProcessFault(at_ms=0, action="kill", node="broker:1", signal="SIGTERM"))   # until the final heal
    ex.heal_all()
    assert log == ["pause 1", "kill 2 SIGKILL", "kill 1 SIGTERM", "unpause 1", "start 2"]


def test_an_unknown_fault_is_refused_and_not_active():
    ex, _, _ = executor()
    with pytest.raises(ValueError, match="unknown fault"):
        ex.inject(0, object())
    assert ex.active == {}


def test_describe_names_each_kind_as_the_session_lists_it():
    ex, _, _ = executor()
    assert ex.describe(DiskFault(at_ms=0, node="broker:1", dir="d2", mode="error")) == "error broker:1 d2"
    assert ex.describe(ProcessFault(at_ms=0, action="kill", node="broker:1")) == "kill(SIGKILL) broker:1"
    assert ex.describe(AdminAction(at_ms=0, action="delete-topic", topic="t1")) == "delete-topic t1 None"
