"""Idempotent-producer state of one partition, fed by every append (pure).

Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo.checkSequence``, restricted to
idempotence (no transactions). One :class:`ProducerState` belongs to each partition log
(``broker_impl.storage.partition_log.PartitionLog.producer_state``) and follows the log, not
the leadership:

- every batch appended to the log — by the leader (after the check below) **and** by a
  follower (replicated as the leader wrote it), or by the dir mover into a future log — is
  recorded through :meth:`ProducerState.record_header` from its v2 header (producerId,
  producerEpoch, baseSequence, baseOffset, lastOffsetDelta); so a follower that becomes leader
  already knows every producer's last sequences and last :data:`DUPLICATE_WINDOW` batches;
- a truncation or a log load/recovery rebuilds it from the log's batch headers
  (:meth:`ProducerState.rebuild`; the storage layer bounds how much of the tail it scans).

Rules of :meth:`ProducerState.check` (the leader, before appending):

- ``producer_id == -1``: not idempotent, never checked or recorded (control batches neither).
- Same epoch: a batch equal to a remembered one (same first and last sequence) is a
  **duplicate**: answered NONE with the original offsets, nothing appended. Otherwise it must
  start at ``last_seq + 1`` (int32 wrap-around to 0), else OUT_OF_ORDER_SEQUENCE_NUMBER.
- A producer with no state at all in this partition (never seen in the log tail the state was
  built from) is accepted at any sequence: librdkafka treats OUT_OF_ORDER_SEQUENCE_NUMBER as
  fatal, so a false positive is worse than a missed duplicate.
- A newer epoch starts over at sequence 0 (else OUT_OF_ORDER); an older epoch is fenced:
  INVALID_PRODUCER_EPOCH.

:meth:`ProducerState.check_batches` applies those rules to all the batches of one produce
request (a batch may continue an earlier batch of the same request); its verdict is
APPEND, DUPLICATE (every batch a duplicate: the original first/last offsets) or an error.
The state changes only through ``record*``/``rebuild``/``clear``, called by the log after the
bytes are written, so a failed append leaves it as it was.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from kafka_common.batch_header import BatchHeader

DUPLICATE_WINDOW = 5  # Kafka keeps the last 5 batch metadata entries per producer
MAX_SEQUENCE = 2**31 - 1
NO_PRODUCER_ID = -1
DEFAULT_MAX_PRODUCERS = 10_000  # per partition; the least recently written producer is evicted


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


@dataclass(frozen=True, slots=True)
class RequestVerdict:
    """The verdict on all the batches of one request for one partition. For DUPLICATE,
    ``first_offset``/``last_offset`` are the original offsets of the first/last batch."""
    outcome: Outcome
    first_offset: int = -1
    last_offset: int = -1
    message: str = ""


@dataclass(frozen=True, slots=True)
class SequencedBatch:
    """What the check needs of one incoming batch (from its header)."""
    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int

    @classmethod
    def of(cls, header: BatchHeader) -> "SequencedBatch":
        return cls(header.producer_id, header.producer_epoch, header.base_sequence,
                   last_sequence(header.base_sequence, header.last_offset_delta))


@dataclass(slots=True)
class _Entry:
    epoch: int
    batches: list[BatchRecord] = field(default_factory=list)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """A read-only view of one producer's state (tests, diagnostics)."""
    producer_id: int
    epoch: int
    last_seq: int
    batches: tuple[BatchRecord, ...]


class ProducerState:
    """Sequence state of every idempotent producer of ONE partition, keyed by producer id."""

    def __init__(self, max_producers: int = DEFAULT_MAX_PRODUCERS) -> None:
        if max_producers < 1:
            raise ValueError(f"max_producers must be >= 1, got {max_producers}")
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._max = max_producers

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        e = self._entries.get(producer_id)
        if e is None:
            return None
        return ProducerEntry(producer_id, e.epoch, e.last_seq, tuple(e.batches))

    # ---- checks (no state change) ----------------------------------------------------
    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> Verdict:
        if producer_id == NO_PRODUCER_ID:
            return Verdict(Outcome.APPEND)
        entry = self._entries.get(producer_id)
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

    def check_batches(self, batches: Sequence[SequencedBatch]) -> RequestVerdict:
        """All the batches of one request: APPEND (append them all), DUPLICATE (every batch
        is a remembered one: answer with the original offsets, append nothing), or the first
        error. A request mixing duplicates and new batches is OUT_OF_ORDER (Kafka's clients
        send one batch per partition, so it cannot come from a correct producer)."""
        if not batches:
            return RequestVerdict(Outcome.APPEND)
        earlier: dict[int, tuple[int, int]] = {}  # producer id → (epoch, last seq) earlier in this request
        dups: list[BatchRecord] = []
        appends = 0
        for b in batches:
            prev = earlier.get(b.producer_id)
            if prev is not None and prev[0] == b.epoch:  # after a batch earlier in this same request
                if b.first_seq != next_sequence(prev[1]):
                    return RequestVerdict(Outcome.OUT_OF_ORDER,
                                          message=f"producer {b.producer_id} epoch {b.epoch}: expected sequence "
                                                  f"{next_sequence(prev[1])}, got {b.first_seq}")
                v = Verdict(Outcome.APPEND)
            else:
                v = self.check(b.producer_id, b.epoch, b.first_seq, b.last_seq)
            if v.outcome in (Outcome.OUT_OF_ORDER, Outcome.FENCED_EPOCH):
                return RequestVerdict(v.outcome, message=v.message)
            if v.outcome is Outcome.DUPLICATE:
                assert v.duplicate_of is not None
                dups.append(v.duplicate_of)
            else:
                appends += 1
                if b.producer_id != NO_PRODUCER_ID:
                    earlier[b.producer_id] = (b.epoch, b.last_seq)
        if dups and appends:
            return RequestVerdict(Outcome.OUT_OF_ORDER,
                                  message="request mixes duplicate and new batches of one producer")
        if dups:
            return RequestVerdict(Outcome.DUPLICATE, dups[0].first_offset, dups[-1].last_offset)
        return RequestVerdict(Outcome.APPEND)

    # ---- updates ---------------------------------------------------------------------
    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int) -> None:
        """Remember an appended batch (leader append, replicated batch, or a log scan)."""
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = _Entry(epoch)
            self._entries[producer_id] = entry
        elif epoch < entry.epoch:
            return  # an older epoch's batch (replicated zombie write): the newer state stands
        if entry.batches and entry.batches[-1].first_offset >= first_offset:
            return  # already recorded (the same batch seen twice, e.g. a rebuild overlapping)
        entry.batches.append(BatchRecord(first_seq, last_seq, first_offset, last_offset))
        if len(entry.batches) > DUPLICATE_WINDOW:
            del entry.batches[0]
        self._entries.move_to_end(producer_id)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def record_header(self, header: BatchHeader) -> None:
        """Record a batch as it is in the log (offsets assigned)."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return
        self.record(header.producer_id, header.producer_epoch, header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    header.base_offset, header.last_offset)

    def clear(self) -> None:
        self._entries.clear()

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Forget everything, then replay the batch headers of the log (oldest first)."""
        self._entries.clear()
        for header in headers:
            self.record_header(header)


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
