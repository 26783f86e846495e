"""The runtime's one point of contact with the pure state machine (``controller_impl.state``).

Contract (docs/design.md): ``ControllerState(image, config, clock_ms)``; handlers
``handle_<api>(request, now_ms) -> ControllerResult(records, response)`` and
``tick(now_ms)``. The config handed over carries the cluster id read from the metadata
dir's ``meta.properties``. Which handler serves which API, in which versions, is the
listener's request table (:mod:`controller_impl.runtime.request_table`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from kafka_common.config import ServerConfig
from kafka_common.metadata.image import MetadataImage


def make_state(image: MetadataImage, cfg: ServerConfig, cluster_id: str, now_ms: int,
               on_problem: Callable[[str], None] | None = None) -> Any:
    from controller_impl.state import ControllerState
    return ControllerState(image, dataclasses.replace(cfg, cluster_id=cluster_id), now_ms,
                           on_problem=on_problem)

