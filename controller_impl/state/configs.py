"""IncrementalAlterConfigs (44) and AlterConfigs (33): dynamic configs as ConfigRecords.

Brokers forward their clients' requests unchanged (as CreateTopics); the active controller
validates and writes one ConfigRecord per changed key (value None = delete), which every
broker replays into its image (``MetadataImage.configs``) — Kafka's
``ConfigurationControlManager``. Per resource:

- topic (2): the topic must exist (UNKNOWN_TOPIC_OR_PARTITION); names and values are checked
  by :mod:`kafka_common.topic_config` (INVALID_CONFIG with the reason);
- broker (4): resource name "" (the cluster default) or a broker id; only the broker
  synonyms of the topic configs are dynamic (others: INVALID_CONFIG);
- anything else: INVALID_REQUEST.

IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT to the stored values;
AlterConfigs replaces the resource's whole set (keys not given are deleted). A resource
listed twice → INVALID_REQUEST for each. ``validate_only``: checked, nothing written. The
answer of each resource is independent (one resource's error does not stop the others).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from controller_impl.errors import ControllerError
from kafka_common import topic_config as tc
from kafka_common import wire
from kafka_common.metadata import records as r
from kafka_common.wire import ApiKey, ErrorCode

from controller_impl.state.result import ZERO_THROTTLE
from controller_impl.state.view import WorkingView

ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS


class ResourceError(ControllerError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_resource(view: WorkingView, rtype: int, name: str) -> None:
    if rtype == tc.TOPIC:
        if not view.topic_exists(name):
            raise ResourceError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
    elif rtype == tc.BROKER:
        if name != "" and not name.isdigit():
            raise ResourceError(ErrorCode.invalid_request, f"Invalid broker resource name {name!r}: "
                                                           f"a broker id or \"\" (the cluster default)")
    else:
        raise ResourceError(ErrorCode.invalid_request, f"Unsupported resource type {rtype}")


def config_records(rtype: int, name: str, old: dict[str, str], new: dict[str, str]) -> list[r.ConfigRecord]:
    """The ConfigRecords turning ``old`` into ``new`` (sorted by key: deterministic)."""
    out = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            out.append(r.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=None))
        elif old.get(key) != new[key]:
            out.append(r.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=new[key]))
    return out


def _alter(view: WorkingView, req: Any, api_key: int,
           new_values: Callable[[int, dict[str, str], Any], dict[str, str]]) -> Any:
    version = req.__version__
    mod = wire.response_module(api_key, version)
    counts = Counter((int(res.resource_type), res.resource_name) for res in req.resources)
    results = []
    for res in req.resources:
        rtype, name = int(res.resource_type), res.resource_name
        try:
            if counts[(rtype, name)] > 1:
                raise ResourceError(ErrorCode.invalid_request, f"Resource {name!r} of type {rtype} is listed twice")
            _check_resource(view, rtype, name)
            old = dict(view.image.configs.get((rtype, name), {}))
            try:
                new = new_values(rtype, old, res)
            except tc.ConfigProblem as exc:
                raise ResourceError(ErrorCode.invalid_config, str(exc)) from None
            if not req.validate_only:
                for rec in config_records(rtype, name, old, new):
                    view.emit(rec)
            results.append(wire.make(mod.AlterConfigsResourceResponse, error_code=ErrorCode.none,
                                     error_message=None, resource_type=rtype, resource_name=name))
        except ResourceError as exc:
            results.append(wire.make(mod.AlterConfigsResourceResponse, error_code=exc.code,
                                     error_message=str(exc), resource_type=rtype, resource_name=name))
    return wire.make(wire.response_class(api_key, version), throttle_time=ZERO_THROTTLE, responses=tuple(results))


def incremental_alter_configs(view: WorkingView, req: Any) -> Any:
    def new_values(rtype: int, old: dict[str, str], res: Any) -> dict[str, str]:
        return tc.apply_ops(rtype, old, ((c.name, int(c.config_operation), c.value) for c in res.configs))
    return _alter(view, req, INCREMENTAL_ALTER_CONFIGS, new_values)


def alter_configs(view: WorkingView, req: Any) -> Any:
    def new_values(rtype: int, old: dict[str, str], res: Any) -> dict[str, str]:
        names = Counter(c.name for c in res.configs)
        twice = [n for n, k in names.items() if k > 1]
        if twice:
            raise tc.ConfigProblem(f"Config {twice[0]} is listed twice in one request")
        new = {}
        for c in res.configs:
            tc.validate(rtype, c.name, c.value)
            new[c.name] = c.value
        return new
    return _alter(view, req, ALTER_CONFIGS, new_values)


def not_controller_response(api_key: int, req: Any, why: str) -> Any:
    """Every resource answered NOT_CONTROLLER (the broker then retries on the next one)."""
    version = req.__version__
    mod = wire.response_module(api_key, version)
    return wire.make(wire.response_class(api_key, version), throttle_time=ZERO_THROTTLE, responses=tuple(
        wire.make(mod.AlterConfigsResourceResponse, error_code=ErrorCode.not_controller, error_message=why,
                  resource_type=res.resource_type, resource_name=res.resource_name)
        for res in req.resources))


def create_topic_configs(topic: Any) -> dict[str, str]:
    """The configs of a CreateTopics entry, validated (raises :class:`tc.ConfigProblem`)."""
    out: dict[str, str] = {}
    for c in getattr(topic, "configs", None) or ():
        if c.name in out:
            raise tc.ConfigProblem(f"Config {c.name} is listed twice")
        tc.validate(tc.TOPIC, c.name, c.value)
        out[c.name] = c.value
    return out
