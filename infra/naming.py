"""Names, labels and paths of every lab resource (how `jbodlab cleanup` finds leftovers).

Everything the lab creates carries the prefix ``jbodlab``:

- lab directory        ``/var/lib/jbodlab/labs/<lab_id>/`` (``lab.json`` = owner pid + start time)
- backing images       ``<lab dir>/backing/<node>--<dir>.img``
- FUSE fault fs        ``<lab dir>/fuse/`` (daemon pid ``<lab dir>/fused.pid``, socket ``fused.sock``)
- filesystems          ``<lab dir>/nodes/<node>/<dir>/`` (log dir = ``…/<dir>/data``)
- loop devices         found by their backing file (sysfs) under the lab dir
- dm devices           ``jbodlab-<lab_id>-<node>--<dir>``
- containers           ``jbodlab-<lab_id>-<node>``, label ``jbodlab.lab=<lab_id>``
- docker network       ``jbodlab-<lab_id>``, label ``jbodlab.lab=<lab_id>``
- CPU cgroup           ``/sys/fs/cgroup/<controller>/jbodlab-<lab_id>/`` (the containers' parent)
- node image           ``jbodlab-node:<source hash>``; base ``jbodlab-base:<key>``

Other engineers' test devices use the prefix ``jbodtest-``: never touched here.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

PREFIX = "jbodlab"
LAB_LABEL = "jbodlab.lab"
ROLE_LABEL = "jbodlab.node"
STATE_ROOT = Path(os.environ.get("JBODLAB_STATE_ROOT", "/var/lib/jbodlab"))
LABS_ROOT = STATE_ROOT / "labs"
CACHE_ROOT = Path(os.environ.get("JBODLAB_CACHE_ROOT", "/var/cache/jbodlab"))
LOG_ROOT = Path("/var/log/jbodlab")

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,30}$")
_LAB_RE = re.compile(r"^[a-z0-9]{4,16}$")


def check_name(kind: str, value: str) -> str:
    """Node and dir names: lowercase, digits, ``_ . -``, at most 31 chars, no ``--``."""
    if not _NAME_RE.match(value) or "--" in value:
        raise ValueError(f"{kind} name {value!r} is invalid: use [a-z0-9_.-], start alphanumeric, "
                         f"at most 31 chars, no '--'")
    return value


def check_lab_id(lab_id: str) -> str:
    if not _LAB_RE.match(lab_id):
        raise ValueError(f"lab id {lab_id!r} is invalid: 4-16 chars of [a-z0-9]")
    return lab_id


def new_lab_id() -> str:
    return secrets.token_hex(4)


def lab_dir(lab_id: str) -> Path:
    return LABS_ROOT / check_lab_id(lab_id)


def disk_key(node: str, dirname: str) -> str:
    return f"{node}--{dirname}"


def container_name(lab_id: str, node: str) -> str:
    return f"{PREFIX}-{lab_id}-{node}"


def network_name(lab_id: str) -> str:
    return f"{PREFIX}-{lab_id}"


def dm_name(lab_id: str, node: str, dirname: str) -> str:
    return f"{PREFIX}-{lab_id}-{disk_key(node, dirname)}"
