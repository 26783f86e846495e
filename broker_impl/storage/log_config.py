"""A partition log's settings (``LogConfig``), the names of partition dirs and each segment's roll
jitter (``roll_jitter_ms``)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    roll_ms: int = 7 * 24 * 3600 * 1000
    roll_jitter_ms: int = 0                     # a segment rolls after roll_ms minus its jitter
    flush_interval_messages: int = 2**63 - 1
    flush_interval_ms: int = 2**63 - 1
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000   # -1: no time limit (topic retention.ms)
    retention_bytes: int = -1                   # -1: no size limit (topic retention.bytes)
    producer_state_scan_bytes: int = 32 << 20  # log tail read to rebuild the producer state
    tail_cache_bytes: int = 64 << 10           # the newest appended bytes always kept in memory (read_tail)
    tail_cache_max_bytes: int = 16 << 20       # ... and those above the HW, up to this (log_tail)

    @classmethod
    def from_server_config(cls, cfg) -> "LogConfig":
        return cls(segment_bytes=cfg.log_segment_bytes, roll_ms=cfg.log_roll_ms,
                   roll_jitter_ms=cfg.log_roll_jitter_ms,
                   retention_ms=cfg.log_retention_ms, retention_bytes=cfg.log_retention_bytes,
                   flush_interval_messages=cfg.log_flush_interval_messages,
                   flush_interval_ms=cfg.log_flush_interval_ms)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int, str] | None:
    """``topic-3`` → (topic, 3, ""); ``topic-3.<hex>-future`` → (topic, 3, "future");
    also ``-delete`` and ``-stray``. None for anything else."""
    kind = ""
    for suffix in ("future", "delete", "stray"):
        if name.endswith("-" + suffix) and "." in name:
            name, kind = name[: name.rindex(".")], suffix
            break
    topic, dash, part = name.rpartition("-")
    if not dash or not topic or not part.isdigit():
        return None
    return topic, int(part), kind


def roll_jitter_ms(topic: str, partition: int, base_offset: int, roll_ms: int, jitter_ms: int) -> int:
    """How much earlier than ``roll_ms`` the segment at ``base_offset`` rolls: in
    [0, min(jitter_ms, roll_ms)), as Kafka's ``segment.jitter.ms``. Kafka draws it at random per
    segment; here it is a hash of the segment's name, the same across restarts and replicas,
    and different from partition to partition and from one segment of a partition to the next,
    so partitions created together drift apart instead of rolling in one burst."""
    bound = min(jitter_ms, roll_ms)
    if bound <= 0:
        return 0
    return zlib.crc32(f"{topic}-{partition}@{base_offset}".encode()) % bound
