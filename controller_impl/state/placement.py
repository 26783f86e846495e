"""Where new partitions' replicas go (behaviour.md §6 "Placement"; reference §5.1).

Unfenced brokers first, so the leader (first replica) is always unfenced; fenced brokers
only as non-leader replicas when there are not enough unfenced ones. Replicas of
consecutive partitions start at consecutive brokers (rotation), offset by ``start`` so
that successive topics spread too. Brokers in controlled shutdown are not used.
Directory health is not considered (Kafka's rule): a broker with an offline dir still
gets UNASSIGNED replicas and picks an online dir itself.
"""

from __future__ import annotations

from typing import Sequence


class PlacementError(ValueError):
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
    for p in range(num_partitions):
        k = (start + p) % len(up)
        order = up[k:] + up[:k]
        if replication_factor <= len(order):
            out.append(tuple(order[:replication_factor]))
        else:
            j = (start + p) % len(down)
            extra = (down[j:] + down[:j])[:replication_factor - len(order)]
            out.append(tuple(order) + tuple(extra))
    return out
