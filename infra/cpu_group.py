"""The lab's CPU group: every node's container in one cgroup weighted as one process per node.

Docker puts every container in one group (``/docker`` with the cgroupfs driver), and the
kernel's scheduler shares a busy host's cores between *groups* at the top: the whole cluster
— 3 brokers and a controller — then weighs as much as one process of the host. Beside a
single ``while True`` loop the cluster got about one core in all (measured: S15, brokers 0.8
of a core together, the host 99 % busy) where the same brokers as bare processes would each
weigh one process. That is the container's doing, not the broker's, so the lab gives its
containers a parent cgroup of their own, ``/jbodlab-<lab_id>``, whose CPU weight is that of
one process per node (cgroup v1 ``cpu.shares`` = 1024 × nodes, v2 ``cpu.weight`` = 100 ×
nodes, the default weight of one process or group being 1024 / 100). Nothing is reserved or
capped: an idle lab takes nothing from anyone.

Only with docker's ``cgroupfs`` driver (the ``systemd`` driver wants a slice unit); anywhere
else the lab runs without the group and says why. :func:`remove` deletes the group's
directories (docker removes the containers' own ones); :func:`leftovers` finds them for
``jbodlab cleanup``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from infra.naming import PREFIX

__all__ = ["CpuGroup", "group_name", "create", "remove", "leftovers", "CGROUP_ROOT",
           "V1_SHARES_PER_NODE", "V2_WEIGHT_PER_NODE"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_SHARES_PER_NODE = 1024     # cpu.shares of one process's group by default
V2_WEIGHT_PER_NODE = 100      # cpu.weight default
V2_WEIGHT_MAX = 10000


@dataclass(frozen=True, slots=True)
class CpuGroup:
    parent: str          # docker's --cgroup-parent
    path: Path           # the group's dir in the cpu hierarchy
    weight_file: str     # cpu.shares | cpu.weight
    weight: int


def group_name(lab_id: str) -> str:
    return f"{PREFIX}-{lab_id}"


def _cpu_hierarchy(root: Path) -> tuple[str, Path] | None:
    """("v1", <cpu controller dir>) or ("v2", <unified root>) where the cpu controller is."""
    for name in ("cpu", "cpu,cpuacct"):
        if (root / name / "cpu.shares").is_file():
            return "v1", root / name
    try:
        if "cpu" in (root / "cgroup.controllers").read_text().split():
            return "v2", root
    except OSError:
        pass
    return None


def create(lab_id: str, nodes: int, *, driver: str, root: Path = CGROUP_ROOT) -> tuple[CpuGroup | None, str]:
    """Make the group and set its weight → (group, "") or (None, why not)."""
    if driver != "cgroupfs":
        return None, f"docker's cgroup driver is {driver!r}, not cgroupfs"
    found = _cpu_hierarchy(root)
    if found is None:
        return None, f"no cpu controller under {root}"
    version, base = found
    path = base / group_name(lab_id)
    if version == "v1":
        weight_file, weight = "cpu.shares", V1_SHARES_PER_NODE * max(1, nodes)
    else:
        weight_file, weight = "cpu.weight", min(V2_WEIGHT_MAX, V2_WEIGHT_PER_NODE * max(1, nodes))
    try:
        if version == "v2":
            control = base / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
        path.mkdir(exist_ok=True)
        (path / weight_file).write_text(str(weight))
    except OSError as exc:
        remove(lab_id, root=root)
        return None, f"cannot set up {path}: {exc.strerror or exc}"
    return CpuGroup("/" + group_name(lab_id), path, weight_file, weight), ""


def leftovers(root: Path = CGROUP_ROOT) -> dict[str, list[Path]]:
    """lab id → its group's directories in every hierarchy (v1 controllers and the unified one)."""
    pre = group_name("")
    found: dict[str, list[Path]] = {}
    candidates = [root]
    try:
        candidates += [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(pre)]
    except OSError:
        return found
    for base in candidates:
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for d in entries:
            if d.name.startswith(pre) and d.is_dir():
                found.setdefault(d.name[len(pre):], []).append(d)
    return found


def _rmdir_tree(path: Path) -> str | None:
    """Remove an (empty of tasks) cgroup dir and its child groups, deepest first."""
    try:
        children = [c for c in path.iterdir() if c.is_dir()]
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    for child in children:
        err = _rmdir_tree(child)
        if err:
            return err
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "processes still in it" if exc.errno == errno.EBUSY else (exc.strerror or str(exc))
        return f"{path}: {why}"
    return None


def remove(lab_id: str, *, root: Path = CGROUP_ROOT) -> list[str]:
    """Delete the lab's group in every hierarchy (after its containers are gone); the
    problems, one line each (a group with processes in it stays)."""
    problems = []
    for path in leftovers(root).get(lab_id, []):
        err = _rmdir_tree(path)
        if err:
            problems.append(err)
    return problems
