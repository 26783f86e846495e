"""What every handler returns: the records to make durable, then the response to send."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """``records`` are appended to the metadata log (in order, one commit), replayed into
    the image, and only then is ``response`` (a kio response value; ``None`` for timers)
    sent. An empty ``records`` means nothing to commit."""

    records: tuple[Any, ...]
    response: Any = None
    # optional, aligned with records: (registration read, registration it becomes) for a
    # PartitionChangeRecord whose merge the handler did already (replayed with
    # MetadataImage.replay_merged, no second merge), None for the others
    merged: tuple[Any, ...] | None = None


ZERO_THROTTLE = datetime.timedelta(0)
