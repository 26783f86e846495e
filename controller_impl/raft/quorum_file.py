"""The ``quorum-state`` file: Kafka's JSON (``ElectionState``), read and written whole.

    {"leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1},…],"data_version":0}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from controller_impl.errors import ControllerError

FILE_NAME = "quorum-state"


class QuorumFileError(ControllerError):
    """The quorum-state file is unreadable or inconsistent."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int = 0
    voted_for: int = -1
    leader_id: int = -1
    voters: tuple[int, ...] = ()


def render(state: ElectionState) -> str:
    return json.dumps({"leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_for,
                       "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in state.voters],
                       "data_version": 0}, separators=(",", ":")) + "\n"


def parse(text: str, *, source: str = FILE_NAME) -> ElectionState:
    try:
        data = json.loads(text)
        state = ElectionState(epoch=int(data["leaderEpoch"]), voted_for=int(data.get("votedId", -1)),
                              leader_id=int(data.get("leaderId", -1)),
                              voters=tuple(int(v["voterId"]) for v in data.get("currentVoters") or ()))
    except (ValueError, KeyError, TypeError) as exc:
        raise QuorumFileError(f"{source}: not a quorum-state file: {exc}") from None
    if state.epoch < 0:
        raise QuorumFileError(f"{source}: negative epoch {state.epoch}")
    return state
