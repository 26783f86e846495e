"""The files a file target names in one log dir on the host (the I/O half of
:func:`harness.scenario.faults.parse_file_target`), resolved when the fault is injected.

``<topic>-<p>:oldest-segment`` / ``:active-segment`` — the partition's ``.log`` with the
lowest / highest base offset; ``:segments`` — every ``.log``; ``:index`` — every non-empty
``.index`` (an empty one has no blocks to fail); ``:leader-epoch-checkpoint``;
``checkpoint:<name>`` — the file ``<dir>/<name>``; ``metadata-log`` — every segment of
``__cluster_metadata-0`` (a controller's metadata dir). A target that names nothing there is a
:class:`FileTargetError` that says what the dir holds.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError
from harness.scenario.faults import FileTarget, parse_file_target

METADATA_LOG_DIR = "__cluster_metadata-0"


class FileTargetError(HarnessError, ValueError):
    """The file target names no file in that dir."""


def resolve(text: str | FileTarget, data_path: Path) -> list[Path]:
    target = parse_file_target(text) if isinstance(text, str) else text
    if target is None:
        raise FileTargetError(f"{text!r} is not a file target")
    data_path = Path(data_path)
    if target.kind == "checkpoint":
        path = data_path / str(target.name)
        if not path.is_file():
            have = sorted(p.name for p in data_path.iterdir() if p.is_file()) if data_path.is_dir() else []
            raise FileTargetError(f"no file {target.name!r} in {data_path} (files there: {', '.join(have) or 'none'})")
        return [path]
    if target.kind == "metadata-log":
        segs = sorted((data_path / METADATA_LOG_DIR).glob("*.log"))
        if not segs:
            raise FileTargetError(f"no metadata log segments in {data_path / METADATA_LOG_DIR}")
        return segs
    part = data_path / f"{target.topic}-{target.partition}"
    if not part.is_dir():
        have = sorted(p.name for p in data_path.iterdir() if p.is_dir()) if data_path.is_dir() else []
        raise FileTargetError(f"no partition {target.topic}-{target.partition} in {data_path} (it holds: "
                              f"{', '.join(have) or 'nothing'})")
    if target.kind == "leader-epoch-checkpoint":
        path = part / "leader-epoch-checkpoint"
        if not path.is_file():
            raise FileTargetError(f"{part} has no leader-epoch-checkpoint yet")
        return [path]
    if target.kind == "index":
        found = sorted(p for p in part.glob("*.index") if p.stat().st_size > 0)
        if not found:
            raise FileTargetError(f"{part}: no index entries yet (every .index is empty)")
        return found
    segs = sorted(part.glob("*.log"))
    if not segs:
        raise FileTargetError(f"{part} has no segments")
    return {"oldest-segment": segs[:1], "active-segment": segs[-1:], "segments": segs}[target.kind]
