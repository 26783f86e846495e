"""Network faults inside the nodes' network namespaces.

The namespace of a node is its container's: ``/proc/<container pid>/ns/net``. Faults are
frozen values with ``inject()`` / ``heal()`` (idempotent) / ``describe()``:

- ``Partition(a, b)`` — drop every IPv4 packet between a and b, both ways, silently (no RST,
  no ICMP: a cut cable): DROP rules for the peer's address in OUTPUT and INPUT of each
  of the two namespaces.
- ``Isolate(node)`` — drop everything on the node except loopback, both directions.
- ``Netem(node, delay_ms, jitter_ms, loss_pct)`` — loss: a random-drop rule
  (``statistic --mode random``) on the node's egress; delay/jitter: a root netem qdisc set
  with pyroute2.

Mechanism, measured on this kernel (6.18, /proc/config.gz): the tc classifier path
(clsact + u32/matchall + gact drop) and the netem qdisc are NOT built in (CONFIG_NET_ACT_GACT,
CONFIG_NET_CLS_MATCHALL, CONFIG_NET_SCH_NETEM unset), so drops use netfilter rules
(``iptables`` run with ``nsenter --net``; every rule carries the comment ``jbodlab-…`` and is
deleted by exactly its own spec). Delay uses netem through pyroute2 and raises
CapabilityError where the kernel lacks netem (``netem_available()`` says why).
Rules live in the container's namespace, so they disappear with the container.
"""

from __future__ import annotations

import gzip
import itertools
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyroute2 import IPRoute

from infra import _cmd
from infra.errors import CapabilityError, FaultError

IFNAME = "eth0"
_fault_seq = itertools.count(1)


@dataclass(frozen=True, slots=True)
class NetTarget:
    node: str
    container: str
    pid: int
    ip: str


@dataclass(slots=True)
class NetFaultRecord:
    kind: str
    target: dict[str, str]
    params: dict[str, float]
    injected_ns: int | None = None
    healed_ns: int | None = None
    rules: list[tuple[int, list[str]]] = field(default_factory=list)  # (pid, iptables rule spec)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@contextmanager
def netns_of(pid: int):
    """pyroute2 IPRoute inside the network namespace of ``pid``."""
    path = f"/proc/{pid}/ns/net"
    try:
        ipr = IPRoute(netns=path, flags=0)
    except Exception as exc:  # noqa: BLE001 - pyroute2 raises a variety of errors here
        raise FaultError(f"cannot enter network namespace {path}: {exc}") from exc
    try:
        yield ipr
    finally:
        ipr.close()


def _ifindex(ipr: IPRoute, pid: int) -> int:
    links = ipr.link_lookup(ifname=IFNAME)
    if not links:
        raise FaultError(f"no {IFNAME} in the network namespace of pid {pid}")
    return links[0]


def _iptables(pid: int, action: str, spec: list[str]) -> bool:
    proc = _cmd.run(["nsenter", f"--net=/proc/{pid}/ns/net", "iptables", "-w", action, *spec], check=False)
    return proc.returncode == 0


def _add_rules(rec: NetFaultRecord, rules: list[tuple[int, list[str]]], what: str) -> None:
    for pid, spec in rules:
        if not _iptables(pid, "-I", spec):
            _remove_rules(rec)
            raise FaultError(f"{what}: cannot add rule {' '.join(spec)} in the namespace of pid {pid}")
        rec.rules.append((pid, spec))


def _remove_rules(rec: NetFaultRecord) -> None:
    for pid, spec in rec.rules:
        if Path(f"/proc/{pid}/ns/net").exists():
            for _ in range(8):  # bounded: delete every copy of exactly this rule
                chk = _cmd.run(["nsenter", f"--net=/proc/{pid}/ns/net", "iptables", "-w", "-C", *spec], check=False)
                if chk.returncode != 0 or not _iptables(pid, "-D", spec):
                    break
    rec.rules = []


def _tag(kind: str) -> list[str]:
    return ["-m", "comment", "--comment", f"jbodlab-{kind}-{os.getpid()}-{next(_fault_seq)}"]


class _RuleFault:
    """inject/heal, each idempotent, with the times in the record; a fault says what it adds
    (``_apply``: by default its iptables ``_rules``) and takes away (``_undo``)."""
    record: NetFaultRecord

    def _rules(self) -> list[tuple[int, list[str]]]:
        raise NotImplementedError

    def _apply(self, rec: NetFaultRecord) -> None:
        _add_rules(rec, self._rules(), rec.kind)

    def _undo(self, rec: NetFaultRecord) -> None:
        _remove_rules(rec)

    def inject(self) -> NetFaultRecord:
        rec = self.record
        if rec.injected_ns is not None and rec.healed_ns is None:
            return rec
        rec.healed_ns = None
        self._apply(rec)
        rec.injected_ns = time.time_ns()
        return rec

    def heal(self) -> NetFaultRecord:
        rec = self.record
        if rec.injected_ns is None or rec.healed_ns is not None:
            return rec
        self._undo(rec)
        rec.healed_ns = time.time_ns()
        return rec

    def describe(self) -> dict[str, object]:
        return {"fault": "network", **self.record.as_dict()}


@dataclass(frozen=True, slots=True)
class Partition(_RuleFault):
    a: NetTarget
    b: NetTarget
    record: NetFaultRecord = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record", NetFaultRecord(
            "partition", {"a": self.a.node, "b": self.b.node, "a_ip": self.a.ip, "b_ip": self.b.ip}, {}))

    def _rules(self) -> list[tuple[int, list[str]]]:
        tag = _tag("partition")
        rules = []
        for me, peer in ((self.a, self.b), (self.b, self.a)):
            rules.append((me.pid, ["OUTPUT", "-d", f"{peer.ip}/32", *tag, "-j", "DROP"]))
            rules.append((me.pid, ["INPUT", "-s", f"{peer.ip}/32", *tag, "-j", "DROP"]))
        return rules


@dataclass(frozen=True, slots=True)
class Isolate(_RuleFault):
    node: NetTarget
    record: NetFaultRecord = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record", NetFaultRecord("isolate", {"node": self.node.node, "ip": self.node.ip}, {}))

    def _rules(self) -> list[tuple[int, list[str]]]:
        tag = _tag("isolate")
        return [(self.node.pid, ["OUTPUT", "!", "-o", "lo", *tag, "-j", "DROP"]),
                (self.node.pid, ["INPUT", "!", "-i", "lo", *tag, "-j", "DROP"])]


def netem_available() -> tuple[bool, str]:
    try:
        text = gzip.open("/proc/config.gz", "rt").read()
    except OSError:
        return True, "kernel config unknown; assuming netem"
    if "CONFIG_NET_SCH_NETEM=y" in text or "CONFIG_NET_SCH_NETEM=m" in text:
        return True, "netem available"
    return False, "no netem qdisc in this kernel (CONFIG_NET_SCH_NETEM not set)"


@dataclass(frozen=True, slots=True)
class Netem(_RuleFault):
    """Degrade a node's network: ``loss_pct`` of its outgoing packets dropped at random,
    ``delay_ms`` ± ``jitter_ms`` added by a netem qdisc (kernel permitting)."""

    node: NetTarget
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    record: NetFaultRecord = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0 or not 0 <= self.loss_pct <= 100:
            raise FaultError(f"netem on {self.node.node}: delay/jitter must be >= 0 and loss within [0, 100]")
        if self.delay_ms or self.jitter_ms:
            ok, reason = netem_available()
            if not ok:
                raise CapabilityError(f"delay on {self.node.node}: {reason}")
        object.__setattr__(self, "record", NetFaultRecord(
            "netem", {"node": self.node.node, "ip": self.node.ip},
            {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "loss_pct": self.loss_pct}))

    def _apply(self, rec: NetFaultRecord) -> None:
        if self.loss_pct:
            spec = ["OUTPUT", "!", "-o", "lo", "-m", "statistic", "--mode", "random", "--probability",
                    f"{self.loss_pct / 100:.6f}", *_tag("loss"), "-j", "DROP"]
            _add_rules(rec, [(self.node.pid, spec)], "loss")
        if self.delay_ms or self.jitter_ms:
            try:
                with netns_of(self.node.pid) as ipr:
                    ipr.tc("replace", "netem", _ifindex(ipr, self.node.pid), handle="1:",
                           delay=int(self.delay_ms * 1000), jitter=int(self.jitter_ms * 1000))
            except Exception as exc:
                _remove_rules(rec)
                raise FaultError(f"netem delay on {self.node.node} failed: {exc}") from exc

    def _undo(self, rec: NetFaultRecord) -> None:
        _remove_rules(rec)
        if self.delay_ms or self.jitter_ms:
            try:
                with netns_of(self.node.pid) as ipr:
                    idx = _ifindex(ipr, self.node.pid)
                    if any(q.get_attr("TCA_KIND") == "netem" for q in ipr.get_qdiscs(index=idx)):
                        ipr.tc("del", index=idx, handle="1:", parent=0xFFFFFFFF)
            except FaultError:
                pass  # namespace gone with the container


__all__ = ["Isolate", "NetTarget", "Netem", "Partition", "netem_available", "netns_of"]
