"""Group consumption (kafkatest's consumer-in-a-group validation), from the history alone.

Reads the group consumers' ops (``consume`` ops whose process starts with ``group-m``) and
their client events (``offsets_committed``, ``offsets_fetched``, ``group_revoked`` /
``group_assigned``; see :mod:`harness.workload.group`):

- **unconsumed** — an acked record (produce ``ok`` with an offset) that no group member
  consumed although the group's final committed offset of its partition is past it;
  acked records at or past the final committed offset → **not_reached** (unknown);
- **never_acked** — a group member consumed a value no producer sent, or one whose produce
  was refused before sending (``fail``); values whose produce outcome is unknown (``info``)
  may be present;
- **committed_backwards** — a partition's acknowledged commits, in time order, went down;
- **commit_lost** — the offsets the coordinator answers at the end (``offsets_fetched``)
  are below the last acknowledged commit of the partition (a committed offset lost, e.g.
  across a coordinator move).
Without the group's events the verdict is unknown.

:func:`rebalance_ms` gives, per member start (``group_subscribed``) or revocation
(``group_revoked``), the time until that member got its (new) assignment (the lab's
``rebalance_ms`` metric).
"""

from __future__ import annotations

from collections import defaultdict

from harness.checkers.base import UNKNOWN, CheckResult
from harness.history.model import History

__all__ = ["check_group_consumption", "rebalance_ms", "GROUP_PROCESS_PREFIX"]

GROUP_PROCESS_PREFIX = "group-m"
EXAMPLES = 20


def check_group_consumption(scenario: object, history: History) -> CheckResult:
    """The checker (``scenario`` unused: the history carries the group's events)."""
    name = "group_consumption"
    consumed = [o for o in history.ops("consume", "ok") if o.process.startswith(GROUP_PROCESS_PREFIX)]
    commits = history.events("offsets_committed", source="client")
    fetched = history.events("offsets_fetched", source="client")
    if not consumed and not commits:
        return CheckResult(name, UNKNOWN, "no group consumer activity in the history")
    produced: dict[str, str] = {}
    acked: list[tuple[str, int, int, str]] = []
    for pair in history.produce_pairs():
        vid = pair.invoke.value_id
        if vid is None:
            continue
        produced[vid] = pair.outcome
        c = pair.completion
        if pair.outcome == "ok" and c is not None and c.offset is not None and c.topic is not None:
            acked.append((c.topic, int(c.partition or 0), c.offset, vid))
    seen = {o.value_id for o in consumed}
    final = {(t, p): o for e in fetched for t, p, o in e.get("offsets", [])}
    unconsumed, not_reached = [], []
    for topic, partition, offset, vid in acked:
        if vid in seen:
            continue
        end = final.get((topic, partition))
        if end is not None and end > offset:
            unconsumed.append({"topic": topic, "partition": partition, "offset": offset, "value_id": vid})
        else:
            not_reached.append({"topic": topic, "partition": partition, "offset": offset, "value_id": vid})
    never_acked = sorted({o.value_id or "<none>" for o in consumed
                          if o.value_id is None or produced.get(o.value_id) in (None, "fail")})
    last: dict[tuple[str, int], int] = {}
    backwards = []
    for e in commits:
        key = (e.get("topic"), int(e.get("partition", 0)))
        offset = int(e.get("offset", -1))
        if key in last and offset < last[key]:
            backwards.append({"topic": key[0], "partition": key[1], "from": last[key], "to": offset,
                              "member": e.get("member"), "ts_ns": e.ts_ns})
        last[key] = max(offset, last.get(key, offset))
    lost = [{"topic": t, "partition": p, "committed": o, "fetched": final.get((t, p))}
            for (t, p), o in sorted(last.items()) if fetched and final.get((t, p), -1) < o]
    details = {"consumed": len(consumed), "acked": len(acked), "commits": len(commits),
               "unconsumed": unconsumed[:EXAMPLES], "unconsumed_count": len(unconsumed),
               "not_reached_count": len(not_reached), "never_acked": never_acked[:EXAMPLES],
               "never_acked_count": len(never_acked), "committed_backwards": backwards[:EXAMPLES],
               "commit_lost": lost[:EXAMPLES], "final_committed": {f"{t}-{p}": o for (t, p), o in final.items()}}
    bad = {k: n for k, n in (("unconsumed", len(unconsumed)), ("never_acked", len(never_acked)),
                              ("committed_backwards", len(backwards)), ("commit_lost", len(lost))) if n}
    if bad:
        return CheckResult(name, False, "group consumption broken: " + ", ".join(f"{k} {n}" for k, n in bad.items()),
                           details)
    if not fetched:
        return CheckResult(name, UNKNOWN, "the group's committed offsets were not read back at the end", details)
    if not_reached:
        return CheckResult(name, UNKNOWN, f"{len(not_reached)} acked records past the group's final committed offsets",
                           details)
    return CheckResult(name, True, f"{len(acked)} acked records consumed by the group; {len(commits)} commits, "
                                   f"never backwards, none lost", details)


def rebalance_ms(history: History) -> list[dict]:
    """Per ``group_subscribed`` / ``group_revoked`` of a member: ms until the same member's
    next ``group_assigned``."""
    pending: dict[str, int] = {}
    out = []
    by_member: dict[str, list] = defaultdict(list)
    for e in history.events(("group_subscribed", "group_revoked", "group_assigned"), source="client"):
        by_member[e.get("member")].append(e)
    for member, events in by_member.items():
        for e in events:
            if e.event in ("group_subscribed", "group_revoked"):
                pending[member] = e.ts_ns
            elif member in pending:
                out.append({"member": member, "ts_ns": e.ts_ns, "value": (e.ts_ns - pending.pop(member)) / 1e6})
    return out
