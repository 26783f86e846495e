"""Schemas of the old versions Kafka 3.9 serves and kio 0.6.5 does not ship (kio has Kafka
4.0's ranges, which KIP-896 cut): ListOffsets v0, OffsetCommit v0–1, OffsetFetch v0,
DescribeConfigs v0, CreateTopics v0–1, DeleteTopics v0, AlterReplicaLogDirs v0,
DescribeLogDirs v0, Fetch v0–3. (Produce v0–2 are :mod:`broker_impl.api.legacy_produce`, written earlier.)

Each is derived from kio's lowest version of the same API — the same entities, the same
field metadata kio's reader/writer and :mod:`kafka_common.wire_guard` walk — with the
fields that version lacks dropped and the ones it alone has added, exactly as Kafka 3.9's
``clients/src/main/resources/common/message/*.json`` say ("versions" of each field):

- ListOffsets v0: the request partition adds ``max_num_offsets`` (int32); the response
  partition has ``old_style_offsets`` ([]int64) instead of ``timestamp``/``offset``.
- OffsetCommit v1: no ``retention_time``; the request partition adds ``commit_timestamp``
  (int64) after ``committed_offset``. v0 also has no generation/member id.
- OffsetFetch v0: the layout of v1.
- DescribeConfigs v0: no ``include_synonyms``; a config has ``is_default`` (bool) where v1
  has ``config_source``, and no synonyms.
- CreateTopics v0–1: no throttle time; v0 also no ``validate_only`` and no error message.
- DeleteTopics v0: v1's layout without the response's throttle time (for the DeleteTopics
  handler, whose range is its own; the schema is here so that its floor can be Kafka's).
- AlterReplicaLogDirs v0, DescribeLogDirs v0: the layout of v1.
- Fetch v0–3: no isolation level (v4), no ``max_bytes`` before v3, no throttle time in
  the v0 response, no last stable offset / aborted transactions.

:func:`request_class` / :func:`response_class` / :func:`module` are what
:mod:`kafka_common.wire` falls back to when kio's index has no schema, so every caller
(the listener, the handlers' ``response_type``, the error replies, the fuzzer) sees these
like kio's own. The classes are built once at import.
"""

# No ``from __future__ import annotations``: kio reads the field types at runtime.
import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, get_args, get_origin

import kio.index
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

_ENTITY_ATTRS = ("__type__", "__flexible__", "__api_key__", "__header_schema__")


def _is_entity(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _derive(src: type, version: int, edits: dict[str, Any], made: dict[type, type]) -> type:
    """A copy of kio's entity ``src`` as ``version``: nested entities derived too, the
    fields of ``edits[src.__name__]`` dropped (``"drop"``) or inserted (``"add"``: a list of
    (after_field, name, type, dataclasses.field)), ``None`` after = first."""
    if src in made:
        return made[src]
    spec = edits.get(src.__name__, {})
    drop = set(spec.get("drop", ()))
    adds = list(spec.get("add", ()))
    new_fields: list[tuple[str, Any, Any]] = []

    def insert_after(name: str | None) -> None:
        for after, fname, ftype, fdef in adds:
            if after == name:
                new_fields.append((fname, ftype, fdef))

    insert_after(None)
    for f in dataclasses.fields(src):
        if f.name not in drop:
            ftype = f.type
            if get_origin(ftype) is tuple and _is_entity(get_args(ftype)[0]):
                ftype = tuple[_derive(get_args(ftype)[0], version, edits, made), ...]  # type: ignore[misc]
            elif _is_entity(ftype):
                ftype = _derive(ftype, version, edits, made)
            kwargs: dict[str, Any] = {"metadata": f.metadata}
            if f.default is not dataclasses.MISSING:
                kwargs["default"] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                kwargs["default_factory"] = f.default_factory  # type: ignore[misc]
            new_fields.append((f.name, ftype, field(**kwargs)))
        insert_after(f.name)
    namespace = {a: getattr(src, a) for a in _ENTITY_ATTRS}
    namespace["__version__"] = i16(version)
    namespace["__module__"] = __name__
    cls = dataclasses.make_dataclass(src.__name__, new_fields, namespace=namespace,
                                     frozen=True, slots=True, kw_only=True)
    cls.__qualname__ = f"{src.__name__}_v{version}"
    made[src] = cls
    return cls


def _module_of(api_key: int, base: int, version: int, kind: EntityType, edits: dict[str, Any]) -> SimpleNamespace:
    mod = kio.index.load_payload_module(api_key, base, kind)
    made: dict[type, type] = {}
    for name in dir(mod):
        obj = getattr(mod, name)
        if _is_entity(obj) and obj.__module__ == mod.__name__:
            _derive(obj, version, edits, made)
    return SimpleNamespace(**{cls.__name__: cls for cls in made.values()})


def _i32(default: int | None = None) -> Any:
    return field(metadata={"kafka_type": "int32"}, **({} if default is None else {"default": i32(default)}))


def _i64(default: int | None = None) -> Any:
    return field(metadata={"kafka_type": "int64"}, **({} if default is None else {"default": i64(default)}))


@dataclass(frozen=True)
class _Legacy:
    api_key: int
    version: int
    base: int                      # kio's lowest version, the template
    request: dict[str, Any]
    response: dict[str, Any]


_OFFSET_COMMIT_V1_REQ = {
    "OffsetCommitRequest": {"drop": ["retention_time"]},
    "OffsetCommitRequestPartition": {"add": [("committed_offset", "commit_timestamp", i64, _i64(-1))]},
}
_FETCH_V3_REQ = {"FetchRequest": {"drop": ["isolation_level"]}}
_FETCH_V2_REQ = {"FetchRequest": {"drop": ["isolation_level", "max_bytes"]}}
_FETCH_RESP = {"PartitionData": {"drop": ["last_stable_offset", "aborted_transactions"]}}
_FETCH_V0_RESP = {**_FETCH_RESP, "FetchResponse": {"drop": ["throttle_time"]}}

_LEGACY: list[_Legacy] = [
    _Legacy(2, 0, 1,
            {"ListOffsetsPartition": {"add": [("timestamp", "max_num_offsets", i32, _i32(1))]}},
            {"ListOffsetsPartitionResponse": {
                "drop": ["timestamp", "offset"],
                "add": [("error_code", "old_style_offsets", tuple[i64, ...],
                         field(metadata={"kafka_type": "int64"}, default=()))]}}),
    _Legacy(8, 1, 2, _OFFSET_COMMIT_V1_REQ, {}),
    _Legacy(8, 0, 2, {"OffsetCommitRequest": {"drop": ["retention_time", "generation_id_or_member_epoch",
                                                       "member_id"]}}, {}),
    _Legacy(9, 0, 1, {}, {}),
    _Legacy(32, 0, 1, {"DescribeConfigsRequest": {"drop": ["include_synonyms"]}},
            {"DescribeConfigsResourceResult": {
                "drop": ["config_source", "synonyms"],
                "add": [("read_only", "is_default", bool, field(metadata={"kafka_type": "bool"}))]}}),
    _Legacy(19, 1, 2, {}, {"CreateTopicsResponse": {"drop": ["throttle_time"]}}),
    _Legacy(19, 0, 2, {"CreateTopicsRequest": {"drop": ["validate_only"]}},
            {"CreateTopicsResponse": {"drop": ["throttle_time"]},
             "CreatableTopicResult": {"drop": ["error_message"]}}),
    _Legacy(20, 0, 1, {}, {"DeleteTopicsResponse": {"drop": ["throttle_time"]}}),
    _Legacy(34, 0, 1, {}, {}),
    _Legacy(35, 0, 1, {}, {}),
    _Legacy(1, 3, 4, _FETCH_V3_REQ, _FETCH_RESP),
    _Legacy(1, 2, 4, _FETCH_V2_REQ, _FETCH_RESP),
    _Legacy(1, 1, 4, _FETCH_V2_REQ, _FETCH_RESP),
    _Legacy(1, 0, 4, _FETCH_V2_REQ, _FETCH_V0_RESP),
]

_MODULES: dict[tuple[int, int, EntityType], SimpleNamespace] = {}
for _l in _LEGACY:
    _MODULES[(_l.api_key, _l.version, EntityType.request)] = _module_of(
        _l.api_key, _l.base, _l.version, EntityType.request, _l.request)
    _MODULES[(_l.api_key, _l.version, EntityType.response)] = _module_of(
        _l.api_key, _l.base, _l.version, EntityType.response, _l.response)

VERSIONS: frozenset[tuple[int, int]] = frozenset((_l.api_key, _l.version) for _l in _LEGACY)


def module(api_key: int, version: int, kind: EntityType) -> SimpleNamespace:
    """The nested classes of a legacy version by name; KeyError if there is none."""
    return _MODULES[(api_key, version, kind)]


def _top(api_key: int, version: int, kind: EntityType) -> type:
    mod = module(api_key, version, kind)
    for cls in vars(mod).values():
        if cls.__type__ == kind:
            return cls
    raise KeyError((api_key, version, kind))


def request_class(api_key: int, version: int) -> type:
    return _top(api_key, version, EntityType.request)


def response_class(api_key: int, version: int) -> type:
    return _top(api_key, version, EntityType.response)
