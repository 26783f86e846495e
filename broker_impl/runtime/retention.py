"""Retention: the broker's periodic maintenance task that deletes old segments.

Every ``log.retention.check.interval.ms`` each online data dir gets one retention round on
its own I/O worker (``broker_impl.runtime.dir_io``: serialised with that dir's appends,
never on the event loop; a dir whose previous round still runs is skipped). A round gives
every log of the dir the current config of its topic (segment.bytes, segment.ms,
segment.jitter.ms, retention.ms, retention.bytes: :func:`topic_log_config`, from the image's ConfigRecords and
server.properties), then deletes at most :data:`MAX_SEGMENTS_PER_ROUND` segments by time
and size (``LogManager.enforce_retention``) and checkpoints the moved log start offsets.
Leaders and followers do this alike, each on its own log. A disk error while deleting goes
through the dir failure channel like any other (the dir goes offline; nothing crashes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from typing import TYPE_CHECKING, Callable

from broker_impl.storage import LogConfig, StorageError
from kafka_common import topic_config as tc

if TYPE_CHECKING:
    from broker_impl.runtime.host import Host

log = logging.getLogger(__name__)
MAX_SEGMENTS_PER_ROUND = 100
CONFIG_REFRESH_MS = 1000


def topic_log_config(base: LogConfig, node_id: int, image, static: tc.StaticBrokerConfig) -> Callable[[str], LogConfig]:
    """``topic -> LogConfig``: ``base`` with the topic's segment and retention configs."""
    def config_for(topic: str) -> LogConfig:
        configs = image.configs

        def value(name: str) -> int:
            return int(tc.topic_value(topic, name, node_id, configs, static))  # type: ignore[arg-type]
        cfg = dataclasses.replace(base, segment_bytes=value("segment.bytes"), roll_ms=value("segment.ms"),
                                  roll_jitter_ms=value("segment.jitter.ms"),
                                  retention_ms=value("retention.ms"), retention_bytes=value("retention.bytes"))
        return base if cfg == base else cfg
    return config_for


def install(runtime: "Host", static: tc.StaticBrokerConfig, *, wall_ms: Callable[[], int]) -> asyncio.Task:
    """Give the log manager per-topic configs and start the retention task (``wall_ms``: the
    wall clock that record timestamps are compared with)."""
    lm = runtime.lm
    lm.config_for = topic_log_config(lm.config, runtime.cfg.node_id, runtime.image, static)
    return asyncio.create_task(_loop(runtime, wall_ms), name="retention")


async def _loop(runtime: "Host", wall_ms_now: Callable[[], int]) -> None:
    """Retention rounds every ``log.retention.check.interval.ms``; between them, once a
    second, a change of the image's configs is handed to the logs at once (no I/O: a
    reference swap each), so segment.bytes / segment.ms changes apply within a second."""
    lm = runtime.lm
    interval_ms = runtime.cfg.log_retention_check_interval_ms
    step_ms = min(interval_ms, CONFIG_REFRESH_MS)
    running: dict[str, concurrent.futures.Future] = {}
    seen: dict | None = None
    last_round = runtime.now_ms()
    while True:
        await asyncio.sleep(step_ms / 1000)
        configs = runtime.image.configs
        if configs != seen:
            seen = {k: dict(v) for k, v in configs.items()}
            lm.refresh_configs()
        now = runtime.now_ms()
        if now - last_round < interval_ms:
            continue
        last_round = now
        wall_ms = wall_ms_now()
        for path in lm.online_dirs():
            if path in running and not running[path].done():
                continue
            running[path] = runtime.dir_io.submit(path, _round, runtime, path, wall_ms)


def _round(runtime: "Host", path: str, wall_ms: int) -> None:
    lm = runtime.lm
    try:
        deleted, failed = lm.enforce_retention(wall_ms, only_dir=path, max_segments=MAX_SEGMENTS_PER_ROUND)
    except StorageError:
        return  # reported through the failure channel (once per dir)
    except Exception:  # a bug must not stop retention silently
        log.exception("retention round of %s", path)
        return
    if deleted:
        runtime.events.emit("retention_deleted", path=path, segments=deleted, failed_dirs=failed)
