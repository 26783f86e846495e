"""`meta.properties` of a log dir: parse and render (pure; the file I/O is in kafka_runtime).

Format (Kafka's, version 1)::

    version=1
    node.id=1
    cluster.id=<22-char base64 uuid>
    directory.id=<22-char base64 uuid>
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kafka_common import ids
from kafka_common.errors import KafkaCommonError

FILE_NAME = "meta.properties"


class MetaPropertiesError(KafkaCommonError, ValueError):
    """A meta.properties file that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    cluster_id: str
    directory_id: uuid.UUID | None  # None: the file has no directory.id (one gets generated)
    version: int = 1


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: key=value or key:value lines, '#'/'!' comments."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise MetaPropertiesError(f"line {lineno}: expected key=value, got {raw!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def parse(text: str, source: str = "meta.properties") -> MetaProperties:
    props = parse_properties(text)
    def need(key: str) -> str:
        if key not in props or not props[key]:
            raise MetaPropertiesError(f"{source}: missing {key}")
        return props[key]
    version = need("version")
    if version != "1":
        raise MetaPropertiesError(f"{source}: unsupported version={version!r} (want 1)")
    try:
        node_id = int(need("node.id"))
    except ValueError:
        raise MetaPropertiesError(f"{source}: node.id={props['node.id']!r} is not an integer") from None
    cluster_id = need("cluster.id")
    try:
        ids.from_base64(cluster_id)
    except ids.InvalidUuid:
        raise MetaPropertiesError(f"{source}: cluster.id={cluster_id!r} is not a Kafka uuid") from None
    dir_text = props.get("directory.id")
    directory_id = None
    if dir_text:
        try:
            directory_id = ids.from_base64(dir_text)
        except ids.InvalidUuid:
            raise MetaPropertiesError(f"{source}: directory.id={dir_text!r} is not a Kafka uuid") from None
        if ids.is_reserved(directory_id):
            raise MetaPropertiesError(f"{source}: directory.id={dir_text} is a reserved id")
    return MetaProperties(node_id=node_id, cluster_id=cluster_id, directory_id=directory_id)


def render(mp: MetaProperties) -> str:
    lines = ["#", "# written by kraft-storage / kraft-broker", f"version={mp.version}",
             f"node.id={mp.node_id}", f"cluster.id={mp.cluster_id}"]
    if mp.directory_id is not None:
        lines.append(f"directory.id={ids.to_base64(mp.directory_id)}")
    return "\n".join(lines) + "\n"
