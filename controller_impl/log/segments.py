"""Segment files of the metadata log: the partition directory's name, a segment's file
name (``<base offset, 20 digits>.log``) and its open handle; the log's misuse error."""

from __future__ import annotations

from dataclasses import dataclass

from controller_impl.errors import ControllerError

DIR_NAME = "__cluster_metadata-0"
SUFFIX = ".log"


class LogError(ControllerError):
    """A misuse of the log (offsets out of order, truncation past the end)."""


@dataclass
class Segment:
    base_offset: int
    path: str
    fd: int
    size: int


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SUFFIX}"
