"""Where new partitions' replicas go (behaviour.md §6 "Placement"; reference §5.1).

Unfenced brokers first, so the leader (first replica) is always unfenced; fenced brokers
only as non-leader replicas when there are not enough unfenced ones. Replicas of
consecutive partitions start at consecutive brokers (rotation), offset by ``start`` (the
partitions the cluster already has) so that successive topics spread too. Each time the
leaders wrap around the brokers, the followers' order turns by one (Kafka's rack-unaware
assignment, its ``nextReplicaShift``): with a fixed order every partition a broker leads
would have the same first follower, and when that broker fails or loses the dir holding its
leaders, one broker would inherit all of them (S15 on 3 brokers: 200 leaders on one broker,
100 on the other). Turned, they split evenly — the goal Kafka's striped placer states: "If
any specific broker is fenced, we would like the new leaders to distributed evenly across
the remaining brokers". Deterministic: no random start. Brokers in controlled shutdown are
not used.
Directory health is not considered (Kafka's rule): a broker with an offline dir still
gets UNASSIGNED replicas and picks an online dir itself.
"""

from __future__ import annotations

from typing import Sequence

from controller_impl.errors import ControllerError


class PlacementError(ControllerError, ValueError):
    """The requested replication cannot be placed (the message says why)."""


def place(num_partitions: int, replication_factor: int, unfenced: Sequence[int],
          fenced: Sequence[int], start: int = 0) -> list[tuple[int, ...]]:
    if num_partitions < 1:
        raise PlacementError(f"number of partitions must be >= 1, got {num_partitions}")
    if replication_factor < 1:
        raise PlacementError(f"replication factor must be >= 1, got {replication_factor}")
    if not unfenced:
        raise PlacementError("all brokers are currently fenced (or none is registered)")
    total = len(unfenced) + len(fenced)
    if replication_factor > total:
        raise PlacementError(f"replication factor {replication_factor} is larger than the "
                             f"{total} usable registered broker(s)")
    up = sorted(unfenced)
    down = sorted(fenced)
    out = []
    n = len(up)
    for p in range(num_partitions):
        g = start + p
        k = g % n
        shift = g // n  # the round: how many times the leaders wrapped around the brokers
        order = [up[k]] + [up[(k + 1 + (shift + j) % (n - 1)) % n] for j in range(n - 1)]
        if replication_factor <= len(order):
            out.append(tuple(order[:replication_factor]))
        else:
            j = (start + p) % len(down)
            extra = (down[j:] + down[:j])[:replication_factor - len(order)]
            out.append(tuple(order) + tuple(extra))
    return out
