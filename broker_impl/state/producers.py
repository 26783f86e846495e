"""Idempotent-producer state of a leader: producer ids and per-partition sequence checks (pure).

Kafka's rules (``ProducerStateManager`` / ``ProducerAppendInfo.checkSequence``), restricted to
idempotence (no transactions):

- A batch with ``producer_id == -1`` is not idempotent and is never checked.
- Per ``(partition, producer_id)`` the table keeps the producer epoch, the last sequence
  appended and the last :data:`DUPLICATE_WINDOW` batches (first/last sequence and offsets).
- Same epoch: a batch equal to a remembered one (same first and last sequence) is a
  **duplicate**: the caller answers NONE with the original offsets and appends nothing.
  Otherwise the batch must start at ``last_seq + 1`` (int32 wrap-around to 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER (librdkafka treats that as fatal, so no false positives:
  see the next rule).
- A producer this table has never seen on this partition is accepted at any sequence. Kafka
  rebuilds the table from the log after a leader change; this broker keeps it in memory, so
  after a fail-over the new leader must not kill a healthy producer (the runtime may feed
  replicated batches through :meth:`ProducerStateTable.record` to regain duplicate detection).
- A newer epoch starts over; it must start at sequence 0. An older epoch is fenced:
  INVALID_PRODUCER_EPOCH.

Verdicts are values; the table changes only through :meth:`ProducerStateTable.record`,
called after the append succeeded (so a failed append leaves the table as it was).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

DUPLICATE_WINDOW = 5  # Kafka keeps the last 5 batch metadata entries per producer
MAX_SEQUENCE = 2**31 - 1
NO_PRODUCER_ID = -1


def next_sequence(seq: int) -> int:
    return 0 if seq == MAX_SEQUENCE else seq + 1


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """Sequence of the last record of a batch (int32 wrap-around, as Kafka)."""
    return (first_seq + last_offset_delta) % (MAX_SEQUENCE + 1)


class Outcome(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order_sequence"
    FENCED_EPOCH = "invalid_producer_epoch"


@dataclass(frozen=True, slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    duplicate_of: BatchRecord | None = None
    message: str = ""


@dataclass(slots=True)
class _Entry:
    epoch: int
    batches: list[BatchRecord] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerStateTable:
    """Sequence state of every idempotent producer, keyed by (partition key, producer id).

    ``partition_key`` is any hashable (the broker uses ``(topic_id, partition)``). The table
    keeps at most ``max_entries`` producers, evicting the least recently written one."""

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._entries: OrderedDict[tuple[Hashable, int], _Entry] = OrderedDict()
        self._max = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, partition_key: Hashable, producer_id: int, epoch: int,
              first_seq: int, last_seq: int) -> Verdict:
        if producer_id == NO_PRODUCER_ID:
            return Verdict(Outcome.APPEND)
        entry = self._entries.get((partition_key, producer_id))
        if entry is None:
            return Verdict(Outcome.APPEND)
        if epoch < entry.epoch:
            return Verdict(Outcome.FENCED_EPOCH,
                           message=f"producer {producer_id} epoch {epoch} is older than {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                return Verdict(Outcome.OUT_OF_ORDER,
                               message=f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                                       f"got {first_seq}")
            return Verdict(Outcome.APPEND)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Verdict(Outcome.DUPLICATE, duplicate_of=batch)
        expected = next_sequence(entry.last_seq)
        if first_seq != expected:
            return Verdict(Outcome.OUT_OF_ORDER,
                           message=f"producer {producer_id} epoch {epoch}: expected sequence {expected}, "
                                   f"got {first_seq}")
        return Verdict(Outcome.APPEND)

    def record(self, partition_key: Hashable, producer_id: int, epoch: int, first_seq: int,
               last_seq: int, first_offset: int, last_offset: int) -> None:
        """Remember an appended batch (leader append, or a replicated one on a follower)."""
        if producer_id == NO_PRODUCER_ID:
            return
        key = (partition_key, producer_id)
        entry = self._entries.get(key)
        if entry is None or epoch > entry.epoch:
            entry = _Entry(epoch)
            self._entries[key] = entry
        elif epoch < entry.epoch:
            return
        entry.batches.append(BatchRecord(first_seq, last_seq, first_offset, last_offset))
        if len(entry.batches) > DUPLICATE_WINDOW:
            del entry.batches[0]
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget_partition(self, partition_key: Hashable) -> None:
        """Drop every producer of a partition (this broker stopped leading it, or it was deleted)."""
        for key in [k for k in self._entries if k[0] == partition_key]:
            del self._entries[key]


MAX_EPOCH = 32767


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    producer_id: int
    epoch: int


class ProducerIdAllocator:
    """Hands out producer ids from ``[first_id, first_id + block_size)``.

    Kafka takes id blocks from the controller (AllocateProducerIds). Here the runtime seeds
    a block that no other broker or incarnation uses, e.g. ``node_id << 48 | broker_epoch << 24``.
    ``init(existing)`` implements InitProducerId: with a known (id, epoch) from the same
    producer (KIP-360) the epoch is bumped; otherwise, or at epoch exhaustion, a new id."""

    def __init__(self, first_id: int, block_size: int = 1 << 24) -> None:
        if first_id < 0 or block_size < 1:
            raise ValueError(f"invalid producer id block: first_id={first_id} block_size={block_size}")
        self._next = first_id
        self._end = first_id + block_size
        self._epochs: dict[int, int] = {}

    def init(self, producer_id: int = NO_PRODUCER_ID, epoch: int = -1) -> ProducerIdentity:
        known = self._epochs.get(producer_id)
        if producer_id != NO_PRODUCER_ID and known is not None and known == epoch and epoch < MAX_EPOCH:
            self._epochs[producer_id] = epoch + 1
            return ProducerIdentity(producer_id, epoch + 1)
        if self._next >= self._end:
            raise OverflowError("producer id block exhausted")
        new_id = self._next
        self._next += 1
        self._epochs[new_id] = 0
        return ProducerIdentity(new_id, 0)
