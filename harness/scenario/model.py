"""A test is a value (design principles 5–7): the frozen :class:`Scenario`.

A scenario says everything a run needs and nothing about how to run it: the topology, the
server configs (timings shrunk so faults resolve in seconds), the workload (a real Kafka
client, acks=all, unique values), the fault schedule (:mod:`harness.scenario.faults`), the
checks to run with the expected outcome, the seed and the bounce flag.

Round trip: ``Scenario.from_dict(s.to_dict()) == s``. ``to_dict()`` is the ``scenario`` object
of ``run.json``. Text: :mod:`harness.scenario.text` reads JSON or TOML (files by suffix: :mod:`harness.catalog.resolve`) and
applies ``PATH=VALUE`` overrides (catalog names and files are resolved by
:mod:`harness.catalog.resolve`, above this module and the catalog). Every problem raises
:class:`~harness.scenario.fields.ScenarioError` naming the field path, e.g.
``faults[1].mode: 'eror' is not one of error, error-reads, … (did you mean 'error'?)``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from harness.scenario.faults import Fault, ProcessFault, fault_to_dict
from harness.scenario.fault_tables import TargetCheck, fault_from_dict
from harness.scenario.fields import Fields, Problems, join, one_of
from harness.scenario.sections import (OFFSETS_TOPIC, Expect, ServerConfigs, Topology, Workload, offsets_partitions,
                                       parse_configs, parse_expect, parse_topology, parse_workload, plain_fields)

__all__ = ["CHECK_NAMES", "OPTIONAL_CHECK_NAMES", "Scenario"]

CHECK_NAMES = ("durability", "failover", "liveness", "timeout_accuracy", "fencing", "metadata_invariants",
               "quorum_logs", "service")
# named by scenarios that need them (not run by default)
OPTIONAL_CHECK_NAMES = ("group_consumption", "no_corrupt_consumed", "topic_admin", "reassignment_complete",
                        "preferred_leaders")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    id: str
    name: str
    topology: Topology = Topology()
    configs: ServerConfigs = ServerConfigs()
    workload: Workload = Workload()
    faults: tuple[Fault, ...] = ()
    checks: tuple[str, ...] = CHECK_NAMES
    expect: Expect = Expect()
    seed: int = 0
    bounce: bool = False
    description: str = ""

    @property
    def variant(self) -> str:
        """The name runs are filed under: ``name`` or ``name-bounce``."""
        return f"{self.name}-bounce" if self.bounce else self.name

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able ``scenario`` object of run.json (no field left out)."""
        return {
            "id": self.id, "name": self.name, "variant": self.variant, "description": self.description,
            "seed": self.seed, "bounce": self.bounce,
            "topology": plain_fields(self.topology),
            "configs": {**plain_fields(self.configs), "broker_overrides": dict(self.configs.broker_overrides),
                        "controller_overrides": dict(self.configs.controller_overrides)},
            "workload": {**plain_fields(self.workload), "topics": [plain_fields(t) for t in self.workload.topics],
                         "readers": [plain_fields(r) for r in self.workload.readers]},
            "faults": [fault_to_dict(f) for f in self.faults],
            "checks": list(self.checks),
            "expect": {**plain_fields(self.expect), "outcomes": dict(self.expect.outcomes)},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> "Scenario":
        """Validate plain data; raise :class:`ScenarioError` listing every problem by path."""
        problems = Problems()
        value = _scenario(data, problems)
        problems.raise_if_any()
        assert value is not None
        return value


def _scenario(data: Any, problems: Problems) -> Scenario | None:
    f = Fields(data, "", problems)
    topology = parse_topology(f.table("topology", {}), problems)
    configs = parse_configs(f.table("configs", {}), problems)
    workload = parse_workload(f.table("workload", {}), problems, topology)
    known_topics = {t.name: t.partitions for t in workload.topics if isinstance(t.partitions, int)}
    if isinstance(workload.group_consumers, int) and workload.group_consumers > 0:
        # the group's offsets topic (created by its first FindCoordinator) may be a fault target
        known_topics[OFFSETS_TOPIC] = offsets_partitions(configs)
    for item in data.get("faults", ()) if isinstance(data, dict) else ():
        # a topic an admin action creates may be a later fault's target
        if isinstance(item, dict) and item.get("kind") == "admin" and item.get("action") == "create-topic" \
                and isinstance(item.get("topic"), str) and isinstance(item.get("partitions"), int):
            known_topics.setdefault(item["topic"], item["partitions"])
    targets = TargetCheck(set(topology.broker_ids()), set(topology.controller_ids()),
                          topology.dirs_per_broker or 1, known_topics)
    faults = []
    for path, item in f.list("faults", []):
        fault = fault_from_dict(item, path, problems, targets)
        if fault is not None:
            faults.append(fault)
            if isinstance(fault.at_ms, int) and isinstance(workload.duration_ms, int) \
                    and fault.at_ms >= workload.duration_ms:
                problems.add(join(path, "at_ms"),
                             f"{fault.at_ms} is not before the end of the workload ({workload.duration_ms} ms)")
    created = {t.name: t.create_at_ms for t in workload.topics if isinstance(t.create_at_ms, int)}
    for i, fault in enumerate(faults):
        for field_name in ("node", "peer", "dir", "to_dir", "topic"):
            ref = getattr(fault, field_name, None)
            if not isinstance(ref, str):
                continue
            topic = ref.split(":", 1)[1].split("/", 1)[0] if ":" in ref else ref
            if topic in created and isinstance(fault.at_ms, int) and fault.at_ms < created[topic]:
                problems.add(join(join("faults", i), field_name),
                             f"topic {topic!r} is only created at {created[topic]} ms (workload.topics)")
    checks = []
    for path, item in f.list("checks", list(CHECK_NAMES)):
        if item not in CHECK_NAMES + OPTIONAL_CHECK_NAMES:
            problems.add(path, one_of(item, CHECK_NAMES + OPTIONAL_CHECK_NAMES))
        elif item in checks:
            problems.add(path, f"duplicate check {item!r}")
        checks.append(item)
    expect = parse_expect(f.table("expect", {}), problems, targets)
    seed = f.int("seed", 0, lo=0, hi=2**63 - 1)
    bounce = f.bool("bounce", False)
    value = Scenario(id=f.str("id"), name=f.str("name"), topology=topology, configs=configs, workload=workload,
                     faults=tuple(faults), checks=tuple(checks), expect=expect, seed=seed, bounce=bounce,
                     description=f.str("description", ""))
    f.raw("variant", None)  # derived; accepted so run.json's scenario object reads back
    if isinstance(value.name, str) and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", value.name):
        problems.add("name", f"{value.name!r}: lower-case letters, digits and '-' only")
    if "durability" in checks and workload.acks != "all":
        problems.add("checks", f"'durability' needs workload.acks='all', not {workload.acks!r}")
    if bounce and not any(isinstance(x, ProcessFault) and x.action == "restart" for x in faults):
        problems.add("bounce", "true but the schedule has no process restart (add one, as harness.catalog.catalog does)")
    f.finish()
    return value
