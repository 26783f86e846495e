"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) on the broker.

- DescribeConfigs is answered by the broker itself from its metadata image (the topic and
  broker configs replayed from ConfigRecords) and its own ``server.properties``, as Kafka's
  brokers do. Topic resources: every topic config with its value in force and source
  (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
  STATIC_BROKER_CONFIG, DEFAULT_CONFIG); synonyms when asked; documentation when asked
  (v3+); an unknown topic → UNKNOWN_TOPIC_OR_PARTITION. Broker resources: this broker's id
  (its dynamic keys and a read-only set of static keys) or "" (the cluster-wide dynamic
  defaults only); another broker's id → INVALID_REQUEST (clients send a broker resource to
  that broker). Unknown resource types → INVALID_REQUEST.
- AlterConfigs / IncrementalAlterConfigs are forwarded unchanged to the active controller
  (as CreateTopics is), which validates them and writes ConfigRecords; no answer from the
  controller → REQUEST_TIMED_OUT on every resource. The new value is in force on a broker
  once it replayed the record (the metadata long-poll: milliseconds).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafka_common.wire import ApiKey
from broker_impl.api.entities import NO_THROTTLE, build, response_type
from kafka_common import topic_config as tc

if TYPE_CHECKING:
    from broker_impl.api.context import ApiContext

log = logging.getLogger(__name__)
(DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS) = (
    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
FORWARD_TIMEOUT_S = 30.0


def _entry(version: int, r: tc.Resolved, include_synonyms: bool, include_docs: bool) -> Any:
    entry_cls = response_type(DESCRIBE_CONFIGS, version, "DescribeConfigsResourceResult")
    syn_cls = response_type(DESCRIBE_CONFIGS, version, "DescribeConfigsSynonym")
    synonyms = tuple(build(syn_cls, name=n, value=v, source=s) for n, v, s in r.synonyms) if include_synonyms else ()
    return build(entry_cls, name=r.name, value=r.value, read_only=False, config_source=r.source,
                 is_default=r.source == tc.DEFAULT_CONFIG,  # v0 only
                 is_sensitive=False, synonyms=synonyms, config_type=r.config_type,
                 documentation=r.doc if include_docs else None)


def describe_resource(view: Any, version: int, rtype: int, name: str, keys: tuple[str, ...] | None,
                      include_synonyms: bool, include_docs: bool) -> tuple[ErrorCode, str | None, list[Any]]:
    configs = getattr(view.image, "configs", {})
    static = view.static_config
    entries: list[Any] = []
    if rtype == tc.TOPIC:
        if name not in view.image.topic_ids:
            return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist", []
        for key in tc.TOPIC_CONFIGS:
            if keys is None or key in keys:
                entries.append(_entry(version, tc.resolve_topic(name, key, view.node_id, configs, static),
                                      include_synonyms, include_docs))
        return ErrorCode.none, None, entries
    if rtype == tc.BROKER:
        if name != "" and name != str(view.node_id):
            return (ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {view.node_id} or empty string, but received {name}", [])
        wanted = [*tc.DYNAMIC_BROKER_CONFIGS, *(k for k, _ in tc.STATIC_BROKER_KEYS)]
        for key in wanted:
            if keys is not None and key not in keys:
                continue
            r = tc.resolve_broker(key, view.node_id, configs, static, resource_name=name)
            if r is None:
                continue
            entry = _entry(version, r, include_synonyms, include_docs)
            if key not in tc.DYNAMIC_BROKER_CONFIGS:
                entry = build(type(entry), **{**_fields(entry), "read_only": True})
            entries.append(entry)
        return ErrorCode.none, None, entries
    return ErrorCode.invalid_request, f"Unsupported resource type {rtype}", []


def _fields(obj: Any) -> dict[str, Any]:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}


async def handle_describe_configs(api: ApiContext, ctx: Any, req: Any) -> Any:
    version = req.__version__
    result_cls = response_type(DESCRIBE_CONFIGS, version, "DescribeConfigsResult")
    resp_cls = response_type(DESCRIBE_CONFIGS, version, "DescribeConfigsResponse")
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    results = []
    for res in req.resources:
        # null = every key; an empty list = none (Kafka's rule)
        keys = tuple(res.configuration_keys) if res.configuration_keys is not None else None
        code, message, entries = describe_resource(api.view, version, int(res.resource_type), res.resource_name,
                                                   keys, synonyms, docs)
        results.append(build(result_cls, error_code=code, error_message=message,
                             resource_type=res.resource_type, resource_name=res.resource_name,
                             configs=tuple(entries)))
    return build(resp_cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def _forward(api: ApiContext, req: Any) -> Any:
    key = int(req.__api_key__)
    try:
        return await asyncio.wait_for(api.view.controller.alter_configs(req), FORWARD_TIMEOUT_S)
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError) as exc:
        reason = f"controller unreachable: {type(exc).__name__}: {exc}"
        log.warning("%s: %s", "AlterConfigs" if key == ALTER_CONFIGS else "IncrementalAlterConfigs", reason)
    version = req.__version__
    item_cls = response_type(key, version, "AlterConfigsResourceResponse")
    resp_cls = response_type(key, version, "AlterConfigsResponse" if key == ALTER_CONFIGS
                             else "IncrementalAlterConfigsResponse")
    return build(resp_cls, throttle_time=NO_THROTTLE, responses=tuple(
        build(item_cls, error_code=ErrorCode.request_timed_out, error_message=reason,
              resource_type=r.resource_type, resource_name=r.resource_name) for r in req.resources))


async def handle_alter_configs(api: ApiContext, ctx: Any, req: Any) -> Any:
    return await _forward(api, req)


async def handle_incremental_alter_configs(api: ApiContext, ctx: Any, req: Any) -> Any:
    return await _forward(api, req)


def batch_too_large(view: Any, topic_id: Any, headers: list[Any]) -> str | None:
    """Produce: the reason a batch is over the topic's ``max.message.bytes`` (None if none)."""
    limit = view.topic_config(topic_id, "max.message.bytes")
    for h in headers:
        if h.size_bytes > limit:
            return f"batch of {h.size_bytes} bytes is larger than max.message.bytes={limit}"
    return None
