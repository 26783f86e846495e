"""The broker's core loop (``broker_impl.runtime.core_loop``): the real pure core fed in
order, storage errors through the one inlet, effects routed to their executors."""

from __future__ import annotations

import random

import pytest

from broker_impl.runtime.core_loop import CoreLoop, EffectSinks
from broker_impl.state import effects as fx
from broker_impl.state.core import BrokerCore, CoreConfig
from broker_impl.state.log_dirs import LogDirInfo
from broker_impl.storage import DirFailure
from kafka_common.ids import uuid_of
from kafka_runtime.events import EventLog

pytestmark = pytest.mark.unit
D1, D2 = uuid_of(0x1111, 1), uuid_of(0x2222, 2)


class Routed:
    """Where each effect went, in order (the sinks the runtime wires to its executors)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def sinks(self) -> EffectSinks:
        return EffectSinks(controller=lambda e: self.log.append(("controller", e)),
                           storage=lambda e: self.log.append(("storage", e)),
                           role=lambda e: self.log.append(("role", e)),
                           halt=lambda reason: self.log.append(("halt", reason)),
                           finish=lambda code, reason: self.log.append(("finish", (code, reason))))


def loop_with_core(tmp_path) -> tuple[CoreLoop, BrokerCore, Routed, list[str]]:
    halts: list[str] = []
    events = EventLog(str(tmp_path / "events.jsonl"), 1, "broker")
    core_loop = CoreLoop(events, lambda: 1000, halts.append)
    core = BrokerCore(CoreConfig(broker_id=1), [LogDirInfo(D1, "/d1"), LogDirInfo(D2, "/d2")], D1,
                      random.Random(7))
    routed = Routed()
    return core_loop, core, routed, halts


def test_storage_errors_before_the_core_wait_for_it_then_take_the_core_path(tmp_path):
    core_loop, core, routed, halts = loop_with_core(tmp_path)
    core_loop.report_storage_error(DirFailure(D2, "/d2", 5, "load"))   # while the logs load
    assert routed.log == [] and core.log_dirs.is_online(D2)
    core_loop.attach(core, routed.sinks())
    core_loop.feed(core.start(1000))
    assert not core.log_dirs.is_online(D2)
    storage = [e for kind, e in routed.log if kind == "storage"]
    assert storage == [fx.MarkDirOffline(D2)]     # by id: no path past the storage edge
    assert halts == []


def test_an_error_reported_while_effects_run_is_fed_after_the_current_effect(tmp_path):
    core_loop, core, routed, _halts = loop_with_core(tmp_path)
    order: list[str] = []

    def storage(e: object) -> None:
        order.append(type(e).__name__)
        if isinstance(e, fx.MarkDirOffline):
            return
        core_loop.report_storage_error(DirFailure(D2, "/d2", 5, "append"))  # re-entrant: only queued
        order.append("after report")

    sinks = routed.sinks()
    core_loop.attach(core, EffectSinks(controller=sinks.controller, storage=storage, role=sinks.role,
                                       halt=sinks.halt, finish=sinks.finish))
    core_loop.feed([fx.CreateLog(fx.TopicPartition("t", 0), uuid_of(0xAAAA, 1), D1)])
    assert order == ["CreateLog", "after report", "MarkDirOffline"]
    assert not core.log_dirs.is_online(D2)


def test_a_dir_without_an_id_halts(tmp_path):
    core_loop, core, routed, halts = loop_with_core(tmp_path)
    core_loop.attach(core, routed.sinks())
    core_loop.report_storage_error(DirFailure(None, "/meta", 5, "probe"))
    assert len(halts) == 1 and "/meta" in halts[0] and "no directory id" in halts[0]


def test_effects_go_to_their_executors_and_unknown_ones_are_a_bug(tmp_path):
    core_loop, core, routed, _halts = loop_with_core(tmp_path)
    core_loop.attach(core, routed.sinks())
    tp = fx.TopicPartition("t", 0)
    core_loop.feed([fx.StopFetcher((tp,)), fx.Shutdown("requested", clean=True)])
    assert routed.log == [("role", fx.StopFetcher((tp,))), ("finish", (0, "requested"))]
    with pytest.raises(TypeError):
        core_loop.feed([object()])
