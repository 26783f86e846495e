"""Validation of fault tables (scenario files, the session's ``fault`` command) into the fault
values of :mod:`harness.scenario.faults`, against the topology and the workload's topics. Pure."""

from __future__ import annotations

from typing import Any

from harness.scenario.faults import (ACTIVE_CONTROLLER, ADMIN_ACTIONS, ELECTIONS, OPERATOR_ACTIONS, DISK_MODES, FAULT_CLASSES, FAULT_KINDS, FILE_MODES,
                                     FILE_TARGET_KINDS, NETWORK_ACTIONS, P_MODES, PROCESS_ACTIONS, SIGNALS, DiskFault,
                                     AdminAction, Fault, MoveReplica, NetworkFault, ProcessFault, ReplaceDisk, parse_dir_ref,
                                     parse_file_target, parse_node_ref)
from harness.scenario.fields import Fields, Problems, join, one_of

__all__ = ["TargetCheck", "fault_from_dict"]


class TargetCheck:
    """What a fault may refer to: node ids, dirs per broker, topic partitions."""

    def __init__(self, broker_ids: set[int], controller_ids: set[int], dirs_per_broker: int,
                 partitions: dict[str, int]) -> None:
        self.broker_ids = broker_ids
        self.controller_ids = controller_ids
        self.dirs_per_broker = dirs_per_broker
        self.partitions = partitions

    def topic_partition(self, topic: str, partition: int, path: str, problems: Problems) -> None:
        if topic not in self.partitions:
            problems.add(path, one_of(topic, sorted(self.partitions)) + " (topics of the workload)"
                         if self.partitions else f"no topic {topic!r}: the workload has no valid topics")
        elif not 0 <= partition < self.partitions[topic]:
            problems.add(path, f"topic {topic!r} has partitions 0..{self.partitions[topic] - 1}, not {partition}")

    def node(self, text: Any, path: str, problems: Problems, *, broker_only: bool = False) -> None:
        if text is None:
            return
        ref = parse_node_ref(text)
        if ref is None:
            problems.add(path, f"{text!r} is not a node ref (broker:<id>, controller:<id>, controller:active, "
                               "leader:<topic>/<p>, follower:<topic>/<p>)")
            return
        if ref.kind == "broker" and ref.node_id not in self.broker_ids:
            problems.add(path, f"no broker {ref.node_id} (brokers are {sorted(self.broker_ids)})")
        elif ref.kind in ("controller", ACTIVE_CONTROLLER):
            if broker_only:
                problems.add(path, "must name a broker, not a controller")
            elif ref.kind == "controller" and ref.node_id not in self.controller_ids:
                problems.add(path, f"no controller {ref.node_id} (controllers are {sorted(self.controller_ids)})")
        elif ref.topic is not None:
            self.topic_partition(ref.topic, ref.partition or 0, path, problems)

    def dir(self, text: Any, path: str, problems: Problems, *, single: bool = False) -> None:
        if text is None:
            return
        ref = parse_dir_ref(text)
        if ref is None:
            problems.add(path, f"{text!r} is not a dir ref (d1..d{self.dirs_per_broker}, metadata, all, all+metadata, "
                               "replica:<topic>/<p>, spare:<topic>/<p>)")
        elif ref[0] == "index" and ref[1] > self.dirs_per_broker:
            problems.add(path, f"{text!r}: brokers have {self.dirs_per_broker} data dirs (d1..d{self.dirs_per_broker})")
        elif ref[0] in ("all", "all+metadata") and single:
            problems.add(path, f"{ref[0]!r} is not allowed here: name one dir")
        elif ref[0] in ("replica", "spare"):
            self.topic_partition(ref[1][0], ref[1][1], path, problems)

    def file(self, text: Any, dir_text: Any, mode: Any, path: str, problems: Problems) -> None:
        """A file target: well-formed, for a mode that can target a file, in a dir that can hold it."""
        target = parse_file_target(text)
        if target is None:
            problems.add(path, f"{text!r} is not a file target (<topic>-<p>:{{{','.join(FILE_TARGET_KINDS)}}}, "
                               "checkpoint:<name>, metadata-log)")
            return
        if mode not in FILE_MODES:
            problems.add(path, f"mode {mode!r} acts on a whole dir, not on a file (file modes: {', '.join(FILE_MODES)})")
        ref = parse_dir_ref(dir_text) if isinstance(dir_text, str) else None
        if ref is not None and ref[0] in ("all", "all+metadata"):
            problems.add(path, f"a file lies in one dir: name it (not {dir_text!r})")
        elif target.kind == "metadata-log" and ref is not None and ref[0] != "metadata":
            problems.add(path, f"the metadata log is in the metadata dir, not {dir_text!r}")
        elif target.topic is not None:
            if ref is not None and ref[0] == "metadata":
                problems.add(path, f"{target.topic}-{target.partition} is a data partition: not in the metadata dir")
            self.topic_partition(target.topic, target.partition or 0, path, problems)


def fault_from_dict(data: Any, path: str, problems: Problems, targets: TargetCheck) -> Fault | None:
    """Validate one fault table; problems are recorded with ``path``-prefixed field names."""
    f = Fields(data, path, problems)
    kind = f.str("kind", choices=FAULT_KINDS)
    if kind not in FAULT_CLASSES:
        return None
    at_ms = f.int("at_ms", lo=0)
    if kind == "admin":
        value = _admin_action(f, at_ms, path, problems, targets)
        f.finish()
        return value
    node = f.str("node")
    value: Fault | None = None
    if kind == "disk":
        mode = f.str("mode", "error", choices=DISK_MODES)
        dir_ = f.str("dir")
        p = f.float("p", None, lo=0.0, hi=1.0)
        delay_ms = f.int("delay_ms", None, lo=1)
        duration = f.int("duration_ms", None, lo=1)
        file = f.str("file", None)
        if file is not None:
            targets.file(file, dir_, mode, join(path, "file"), problems)
        elif mode == "bad-blocks":
            problems.add(join(path, "file"), "mode 'bad-blocks' needs file (whose blocks go bad)")
        if mode in ("corrupt-reads", "corrupt-writes") and p is not None and p <= 0:
            problems.add(join(path, "p"), f"mode {mode!r}: p is the share of blocks flipped, within (0, 1]")
        # a controller has one disk: its metadata dir
        on_controller = isinstance(node, str) and node.startswith("controller:")
        targets.node(node, join(path, "node"), problems, broker_only=not on_controller)
        if on_controller and dir_ != "metadata":
            problems.add(join(path, "dir"), f"a controller has only its metadata dir, not {dir_!r}")
        targets.dir(dir_, join(path, "dir"), problems)
        if mode == "flaky" and p is None:
            problems.add(join(path, "p"), "mode 'flaky' needs p (probability 0..1)")
        if mode == "delay" and delay_ms is None:
            problems.add(join(path, "delay_ms"), "mode 'delay' needs delay_ms")
        if p is not None and mode not in P_MODES:
            problems.add(join(path, "p"), f"only for modes {', '.join(P_MODES)}, not {mode!r}")
        if delay_ms is not None and mode != "delay":
            problems.add(join(path, "delay_ms"), f"only for mode 'delay', not {mode!r}")
        value = DiskFault(at_ms=at_ms, node=node, dir=dir_, mode=mode, p=p, delay_ms=delay_ms, duration_ms=duration,
                          file=file)
    elif kind == "network":
        action = f.str("action", choices=NETWORK_ACTIONS)
        peer = f.str("peer", None)
        delay_ms = f.int("delay_ms", None, lo=1)
        jitter_ms = f.int("jitter_ms", None, lo=0)
        loss_pct = f.float("loss_pct", None, lo=0.0, hi=100.0)
        duration = f.int("duration_ms", None, lo=1)
        targets.node(node, join(path, "node"), problems)
        targets.node(peer, join(path, "peer"), problems)
        if action == "partition" and peer is None:
            problems.add(join(path, "peer"), "action 'partition' needs peer (the other side)")
        if action != "partition" and peer is not None:
            problems.add(join(path, "peer"), f"only for action 'partition', not {action!r}")
        if action == "partition" and peer is not None and peer == node:
            problems.add(join(path, "peer"), "must differ from node")
        if action == "delay" and delay_ms is None:
            problems.add(join(path, "delay_ms"), "action 'delay' needs delay_ms")
        if action == "loss" and loss_pct is None:
            problems.add(join(path, "loss_pct"), "action 'loss' needs loss_pct")
        value = NetworkFault(at_ms=at_ms, action=action, node=node, peer=peer, delay_ms=delay_ms,
                             jitter_ms=jitter_ms, loss_pct=loss_pct, duration_ms=duration)
    elif kind == "process":
        action = f.str("action", choices=PROCESS_ACTIONS)
        signal = f.str("signal", "SIGKILL", choices=SIGNALS)
        clean = f.bool("clean", True)
        duration = f.int("duration_ms", None, lo=1)
        targets.node(node, join(path, "node"), problems)
        if action == "restart" and duration is not None:
            problems.add(join(path, "duration_ms"), "a restart is instantaneous: no duration")
        value = ProcessFault(at_ms=at_ms, action=action, node=node, signal=signal, clean=clean, duration_ms=duration)
    elif kind == "replace-disk":
        dir_ = f.str("dir")
        targets.node(node, join(path, "node"), problems, broker_only=True)
        targets.dir(dir_, join(path, "dir"), problems, single=True)
        value = ReplaceDisk(at_ms=at_ms, node=node, dir=dir_)
    elif kind == "move-replica":
        topic = f.str("topic")
        partition = f.int("partition", lo=0)
        to_dir = f.str("to_dir")
        targets.node(node, join(path, "node"), problems, broker_only=True)
        if topic is not None and partition is not None:
            targets.topic_partition(topic, partition, join(path, "topic"), problems)
        targets.dir(to_dir, join(path, "to_dir"), problems, single=True)
        if to_dir is not None and to_dir.startswith(("metadata", "replica:")):
            problems.add(join(path, "to_dir"), "must be a data dir (d1..dN or spare:<topic>/<p>)")
        value = MoveReplica(at_ms=at_ms, node=node, topic=topic, partition=partition, to_dir=to_dir)
    f.finish()
    return value


def _admin_action(f: Fields, at_ms: Any, path: str, problems: Problems, targets: TargetCheck) -> AdminAction | None:
    """An ``admin`` table: its topic may be any valid name (a topic it creates is not one
    of the workload's); create-topic needs partitions and replication_factor. reassign/elect:
    :func:`_operator_action`."""
    from controller_impl.state.topics import topic_name_problem
    action = f.str("action", choices=ADMIN_ACTIONS)
    if action in OPERATOR_ACTIONS:
        return _operator_action(f, action, at_ms, path, problems, targets)
    topic = f.str("topic")
    partitions = f.int("partitions", None, lo=1)
    rf = f.int("replication_factor", None, lo=1)
    records = f.int("records", None, lo=0)
    if isinstance(topic, str) and (why := topic_name_problem(topic)):
        problems.add(join(path, "topic"), why)
    if action == "create-topic":
        for name, v in (("partitions", partitions), ("replication_factor", rf)):
            if v is None:
                problems.add(join(path, name), "action 'create-topic' needs it")
    elif action == "delete-topic":
        for name, v in (("partitions", partitions), ("replication_factor", rf), ("records", records)):
            if v is not None:
                problems.add(join(path, name), "only for action 'create-topic'")
    return AdminAction(at_ms=at_ms, action=action, topic=topic, partitions=partitions, replication_factor=rf,
                       records=records)


def _operator_action(f: Fields, action: str, at_ms: Any, path: str, problems: Problems,
                     targets: TargetCheck) -> AdminAction:
    """reassign [node, dir, topic] / elect [election, topic]: the topic one of the workload's."""
    node = f.str("node", None)
    topic = f.str("topic", None)
    election = f.str("election", None, choices=ELECTIONS)
    dir_ = f.str("dir", None)
    targets.node(node, join(path, "node"), problems, broker_only=True)
    if action == "reassign" and node is None:
        problems.add(join(path, "node"), "action 'reassign' needs node (the broker whose replicas move off)")
    if topic is not None and topic not in targets.partitions:
        problems.add(join(path, "topic"), one_of(topic, sorted(targets.partitions)) + " (topics of the workload)")
    if action == "reassign" and election is not None:
        problems.add(join(path, "election"), "only for action 'elect'")
    targets.dir(dir_, join(path, "dir"), problems, single=True)
    if dir_ is not None and action != "reassign":
        problems.add(join(path, "dir"), "only for action 'reassign'")
    return AdminAction(at_ms=at_ms, action=action, node=node, topic=topic, election=election, dir=dir_)
