"""Moving a replica between dirs of this broker (AlterReplicaLogDirs; Kafka's future-log protocol).

States of one move: COPYING (future log being filled) → QUEUED (caught up,
``AssignReplicasToDirs(target)`` queued) → ACCEPTED (controller acked) → SWAPPING (runtime
blocks appends, lets the future catch up fully, swaps, deletes the old log) → done.

- Target dir fails before the swap → cancel; if the assignment was queued/accepted, revert
  it to the source dir (KAFKA-16297).
- Source dir fails after the assignment was queued and before the swap → assign LOST so
  the controller moves ISR/leadership.
- Source dir fails during the swap → the swap decides: once the future log is in, the
  replica lives in the target (the swap's own delete of the old log is often what fails the
  source); a swap that fails assigns LOST (source offline) or reverts to the source.
- Cancel (new destination, partition removed) → revert when QUEUED/ACCEPTED.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from broker_impl.state.effects import (Assignment, CreateFutureLog, DeleteFutureLog, QueueAssignment, StartDirMover,
                                       StopDirMover, SwapFutureLog, TopicPartition, event)
from kafka_common.ids import LOST, TopicId, to_base64

REASON_PROMOTION = "Future replica promotion"
REASON_REVERT = "Reverting reassignment for canceled future replica"
REASON_LOST = "Source dir failed during move"


class MoveState(enum.Enum):
    COPYING = "copying"
    QUEUED = "queued"
    ACCEPTED = "accepted"
    SWAPPING = "swapping"


@dataclass(slots=True)
class Move:
    tp: TopicPartition
    topic_id: TopicId
    source_dir: uuid.UUID
    target_dir: uuid.UUID
    state: MoveState = MoveState.COPYING


class DirMoves:
    def __init__(self) -> None:
        self.moves: dict[TopicPartition, Move] = {}

    def promotions_in_flight(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, m in self.moves.items() if m.state is not MoveState.COPYING)

    def start(self, tp: TopicPartition, topic_id: TopicId, source_dir: uuid.UUID, target_dir: uuid.UUID,
              *, create_future: bool = True) -> list:
        """Begin a move (the caller validated it). A move of ``tp`` to another target is
        cancelled first; the same target is a no-op."""
        out: list = []
        cur = self.moves.get(tp)
        if cur is not None:
            if cur.target_dir == target_dir:
                return []
            out += self.cancel(tp)
        if source_dir == target_dir:
            return out
        self.moves[tp] = Move(tp, topic_id, source_dir, target_dir)
        if create_future:
            out.append(CreateFutureLog(tp, topic_id, target_dir))
        out += [StartDirMover(tp, source_dir, target_dir),
                event("dir_move_started", topic=tp.topic, partition=tp.partition,
                      source_dir=to_base64(source_dir), target_dir=to_base64(target_dir))]
        return out

    def _revert(self, m: Move, dir_id: uuid.UUID, reason: str) -> list:
        if m.state in (MoveState.QUEUED, MoveState.ACCEPTED):
            return [QueueAssignment(m.topic_id, m.tp.partition, dir_id, reason, m.tp)]
        return []

    def cancel(self, tp: TopicPartition, *, delete_future: bool = True) -> list:
        m = self.moves.pop(tp, None)
        if m is None:
            return []
        out: list = [StopDirMover(tp)]
        if delete_future:
            out.append(DeleteFutureLog(tp, m.target_dir))
        out += self._revert(m, m.source_dir, REASON_REVERT)
        out.append(event("dir_move_cancelled", topic=tp.topic, partition=tp.partition, state=m.state.value))
        return out

    def on_future_caught_up(self, tp: TopicPartition) -> list:
        m = self.moves.get(tp)
        if m is None:
            return []
        if m.state is MoveState.COPYING:
            m.state = MoveState.QUEUED
            return [QueueAssignment(m.topic_id, tp.partition, m.target_dir, REASON_PROMOTION, tp)]
        if m.state is MoveState.ACCEPTED:
            m.state = MoveState.SWAPPING
            return [SwapFutureLog(tp, m.source_dir, m.target_dir)]
        return []

    def on_assignment_acked(self, a: Assignment, tp: TopicPartition | None) -> list:
        m = self.moves.get(tp) if tp is not None else None
        if (m is not None and m.state is MoveState.QUEUED and a.reason == REASON_PROMOTION
                and a.dir_id == m.target_dir):
            m.state = MoveState.ACCEPTED
            return [event("dir_move_accepted", topic=tp.topic, partition=tp.partition)]
        return []

    def on_swap_done(self, tp: TopicPartition) -> Move | None:
        return self.moves.pop(tp, None)

    def on_swap_started(self, tp: TopicPartition) -> None:
        """The runtime swaps ``tp``'s future in: from the caught-up future here, or because the
        metadata already names the target (KAFKA-16082). Either way the swap decides now."""
        m = self.moves.get(tp)
        if m is not None:
            m.state = MoveState.SWAPPING

    def on_swap_failed(self, tp: TopicPartition, source_online: bool) -> list:
        """The runtime could not swap the future log in: the move ends here (the core points
        the controller's assignment back at the source, or at LOST; the future log stays where
        it is, as when the source fails before the swap)."""
        m = self.moves.pop(tp, None)
        if m is None:
            return []
        return [StopDirMover(tp), event("dir_move_cancelled", topic=tp.topic, partition=tp.partition,
                                        state=m.state.value,
                                        reason="swap failed" + ("" if source_online else ", source dir offline"))]

    def on_dir_offline(self, dir_id: uuid.UUID) -> list:
        out: list = []
        for tp, m in sorted(self.moves.items()):
            if m.state is MoveState.SWAPPING:
                continue  # the runtime's swap reports its own storage errors
            if m.target_dir == dir_id:
                del self.moves[tp]
                out += [StopDirMover(tp)] + self._revert(m, m.source_dir, REASON_REVERT)
                out.append(event("dir_move_cancelled", topic=tp.topic, partition=tp.partition,
                                 state=m.state.value, reason="target dir offline"))
            elif m.source_dir == dir_id:
                del self.moves[tp]
                out += [StopDirMover(tp)] + self._revert(m, LOST, REASON_LOST)
                out.append(event("dir_move_cancelled", topic=tp.topic, partition=tp.partition,
                                 state=m.state.value, reason="source dir offline"))
        return out
