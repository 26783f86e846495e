"""What a run does and when, as a value (Jepsen's generator): :func:`plan_of` turns a scenario
into a :class:`Plan`, the timed operations of its schedule, in the order they are done.

Operations, each with ``at_ms`` (from the workload's start) and a ``kind`` (the word the
runner's log and ``harness_errors.txt`` use for it):

- :class:`Inject` (``inject``): fault ``index`` of ``scenario.faults`` starts;
- :class:`Heal` (``heal``): it ends, at ``at_ms + duration_ms`` (faults without a duration
  end at the final heal, which the runner always does, so they have no :class:`Heal`);
- :class:`CreateTopic` (``topic``): a workload topic with ``create_at_ms`` is created and
  joins the producers;
- :class:`StartReader` (``reader``): lagging reader ``index`` of ``workload.readers`` starts.

Operations due at the same millisecond keep the scenario's order: each fault's inject then
its heal, fault by fault; then the topics; then the readers. The plan says nothing of how an
operation is done: the runner (:mod:`harness.run.runner`) interprets it, the nemesis injects
and heals. Pure: ``plan.due(now_ms)`` returns the operations due and the plan that remains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

from harness.scenario.faults import Fault, end_ms
from harness.scenario.model import Scenario
from harness.scenario.sections import ReaderSpec, TopicSpec

__all__ = ["Inject", "Heal", "CreateTopic", "StartReader", "Operation", "Plan", "plan_of"]


@dataclass(frozen=True, slots=True)
class Inject:
    kind: ClassVar[str] = "inject"
    at_ms: int
    index: int
    fault: Fault


@dataclass(frozen=True, slots=True)
class Heal:
    kind: ClassVar[str] = "heal"
    at_ms: int
    index: int


@dataclass(frozen=True, slots=True)
class CreateTopic:
    kind: ClassVar[str] = "topic"
    at_ms: int
    topic: TopicSpec


@dataclass(frozen=True, slots=True)
class StartReader:
    kind: ClassVar[str] = "reader"
    at_ms: int
    index: int
    reader: ReaderSpec


Operation = Union[Inject, Heal, CreateTopic, StartReader]


@dataclass(frozen=True, slots=True)
class Plan:
    """The operations still to do, in order (by ``at_ms``, then the scenario's order)."""

    operations: tuple[Operation, ...] = ()

    def due(self, now_ms: float) -> tuple[tuple[Operation, ...], Plan]:
        """The operations due at ``now_ms`` (``at_ms <= now_ms``) and the plan after them."""
        n = 0
        while n < len(self.operations) and self.operations[n].at_ms <= now_ms:
            n += 1
        return self.operations[:n], Plan(self.operations[n:])

    def __len__(self) -> int:
        return len(self.operations)


def plan_of(scenario: Scenario) -> Plan:
    ops: list[Operation] = []
    for i, f in enumerate(scenario.faults):
        ops.append(Inject(f.at_ms, i, f))
        if (end := end_ms(f)) is not None:
            ops.append(Heal(end, i))
    ops += [CreateTopic(t.create_at_ms, t) for t in scenario.workload.topics if t.create_at_ms is not None]
    ops += [StartReader(r.start_at_ms, i, r) for i, r in enumerate(scenario.workload.readers)]
    return Plan(tuple(sorted(ops, key=lambda op: op.at_ms)))   # stable: same-ms operations keep this order
