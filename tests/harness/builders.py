"""Hand-built histories for checker and metric tests: times in ms from a fixed base."""

from __future__ import annotations

from typing import Any

from harness.history.model import ClientOp, Event, History

BASE_NS = 1_700_000_000_000_000_000
DIRS = {1: ["B1dir1aaaaaaaaaaaaaaaa", "B1dir2aaaaaaaaaaaaaaaa", "B1dir3aaaaaaaaaaaaaaaa"],
        2: ["B2dir1aaaaaaaaaaaaaaaa", "B2dir2aaaaaaaaaaaaaaaa", "B2dir3aaaaaaaaaaaaaaaa"],
        3: ["B3dir1aaaaaaaaaaaaaaaa", "B3dir2aaaaaaaaaaaaaaaa", "B3dir3aaaaaaaaaaaaaaaa"]}
CONTROLLER = 3001


def ns(ms: float) -> int:
    return BASE_NS + int(ms * 1_000_000)


class H:
    """A history under construction: ``H().produce(...).fault(...).build()``."""

    def __init__(self) -> None:
        self.entries: list = []
        self._seq = 0

    def build(self) -> History:
        return History.of(self.entries)

    # client
    def produce(self, t_ms: float, done_ms: float, vid: str, partition: int, offset: int | None = None,
                outcome: str = "ok", topic: str = "t1", process: str = "p0", error: str | None = None) -> "H":
        self.entries.append(ClientOp(ts_ns=ns(t_ms), type="invoke", f="produce", process=process, topic=topic,
                                     partition=partition, value_id=vid))
        if outcome != "never":
            self.entries.append(ClientOp(ts_ns=ns(done_ms), type=outcome, f="produce", process=process,
                                         topic=topic, partition=partition, value_id=vid,
                                         offset=offset if outcome == "ok" else None, error=error))
        return self

    def consume(self, t_ms: float, vid: str, partition: int, offset: int, topic: str = "t1") -> "H":
        self.entries.append(ClientOp(ts_ns=ns(t_ms), type="ok", f="consume", process="c0", topic=topic,
                                     partition=partition, value_id=vid, offset=offset))
        return self

    def drained(self, t_ms: float, partition: int, offset: int, topic: str = "t1") -> "H":
        self.entries.append(Event(ts_ns=ns(t_ms), source="client", event="drained",
                                  attrs={"topic": topic, "partition": partition, "offset": offset}))
        return self

    # harness
    def harness(self, t_ms: float, event: str, node_id: int | None = None, **attrs: Any) -> "H":
        self.entries.append(Event(ts_ns=ns(t_ms), source="harness", event=event, node_id=node_id, attrs=attrs))
        return self

    def disk_fault(self, t_ms: float, broker: int, dir_index: int = 0, mode: str = "error",
                   node_ref: str | None = None, dir_ref: str = "d1", fault_id: str | None = None,
                   dir_ids: list[str] | None = None) -> "H":
        fid = fault_id or f"f{self._seq}"
        self._seq += 1
        return self.harness(t_ms, "fault_injected", broker, fault_id=fid, kind="disk", mode=mode, fault_kind=mode,
                            node_ref=node_ref or f"broker:{broker}", dir_ref=dir_ref,
                            dir_ids=dir_ids if dir_ids is not None else [DIRS[broker][dir_index]])

    def status(self, t_ms: float, broker: int, alive: bool) -> "H":
        return self.harness(t_ms, "node_status", broker, alive=alive)

    # nodes
    def node(self, t_ms: float, node_id: int, role: str, event: str, **attrs: Any) -> "H":
        self.entries.append(Event(ts_ns=ns(t_ms), source="node", event=event, node_id=node_id, role=role,
                                  attrs=attrs))
        return self

    def ctl(self, t_ms: float, event: str, **attrs: Any) -> "H":
        return self.node(t_ms, CONTROLLER, "controller", event, **attrs)

    def register_all(self, t_ms: float = 0, fenced: bool = False) -> "H":
        for b in (1, 2, 3):
            self.ctl(t_ms, "registered", broker_id=b, log_dirs=list(DIRS[b]), fenced=True, broker_epoch=10 + b)
            if not fenced:
                self.ctl(t_ms + 0.5, "unfenced", broker_id=b)
        return self

    def partition(self, t_ms: float, p: int, leader: int, isr: list[int], replicas: list[int] | None = None,
                  dirs: list[str] | None = None, topic: str = "t1", reason: str = "create") -> "H":
        attrs: dict[str, Any] = {"topic": topic, "partition": p, "leader": leader, "isr": isr, "reason": reason}
        if replicas is not None:
            attrs["replicas"] = replicas
        if dirs is not None:
            attrs["directories"] = dirs
        return self.ctl(t_ms, "partition_change", **attrs)

    def layout(self, t_ms: float = 1) -> "H":
        """t1-0: replicas [1,2,3] leader 1, each on its broker's d1; t1-1: leader 2, each on d2."""
        self.partition(t_ms, 0, 1, [1, 2, 3], [1, 2, 3], [DIRS[1][0], DIRS[2][0], DIRS[3][0]])
        self.partition(t_ms, 1, 2, [2, 3, 1], [2, 3, 1], [DIRS[2][1], DIRS[3][1], DIRS[1][1]])
        return self
