"""What each API needs before its handler sees it: the listener's authorization table.

A listener's rules are data — ``{api_key: ApiRule}`` — so a new API (the Raft RPCs, say)
declares its permission and whether it may come before SASL authentication in one line::

    API_RULES = {ApiKey.VOTE: ApiRule(CLUSTER_ACTION), ApiKey.DESCRIBE_QUORUM: ApiRule(ANY)}

and the handler exposes them as ``api_rules`` next to ``supported_apis``. The listener
(``kafka_runtime.server``) merges them over :data:`SERVER_RULES` and enforces them for every
request, in this order (as Kafka does):

1. before SASL authentication (a listener that requires it), only APIs with
   ``before_auth=True`` — ApiVersions, SaslHandshake, SaslAuthenticate — are even decoded;
   anything else closes the connection;
2. after decoding, ``permission``: :data:`ANY` lets every principal through;
   :data:`CLUSTER_ACTION` (CLUSTER_ACTION on the CLUSTER resource) only principals listed in
   ``super.users`` when ``authorizer.enabled=true`` (everyone when it is false, as in Kafka
   without an authorizer). A refused request is answered with CLUSTER_AUTHORIZATION_FAILED
   (31) by the rule's ``deny`` builder (default: the response's top-level error code, see
   :func:`deny_fetch` and :func:`deny_create_topics` for APIs that carry errors per item) and
   changes nothing.

Pure (no I/O): the controller's table lives with its state (``controller_impl.state.authz``).
Content-dependent checks (a broker's Fetch from a follower replica needs
CLUSTER_ACTION, one from a consumer does not) stay in the handler, which reads
``ctx.cluster_action_allowed``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kafka_common import wire
from kafka_common.wire import ApiKey, ErrorCode

ANY = "ANY"
CLUSTER_ACTION = "CLUSTER_ACTION"
PERMISSIONS = (ANY, CLUSTER_ACTION)

(API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE) = (
    ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
FETCH, CREATE_TOPICS = ApiKey.FETCH, ApiKey.CREATE_TOPICS

Deny = Callable[[Any, int, ErrorCode, str], Any]


@dataclass(frozen=True)
class ApiRule:
    """How a listener treats one API before its handler.

    ``permission``: :data:`ANY` or :data:`CLUSTER_ACTION`. ``before_auth``: may be decoded
    before SASL authentication. ``deny(request, version, code, message)``: the refusal
    response (None: the generic one with a top-level error code)."""

    permission: str = ANY
    before_auth: bool = False
    deny: Deny | None = None

    def __post_init__(self) -> None:
        if self.permission not in PERMISSIONS:
            raise ValueError(f"unknown permission {self.permission!r} (one of {PERMISSIONS})")


DEFAULT_RULE = ApiRule()
# what every listener applies, whatever its handler declares
SERVER_RULES: dict[int, ApiRule] = {
    API_VERSIONS: ApiRule(before_auth=True),
    SASL_HANDSHAKE: ApiRule(before_auth=True),
    SASL_AUTHENTICATE: ApiRule(before_auth=True),
}


def merged_rules(declared: Mapping[int, ApiRule] | None) -> dict[int, ApiRule]:
    """The handler's rules over the server's; the server's own APIs keep theirs."""
    rules = dict(declared or {})
    rules.update(SERVER_RULES)
    return rules


def denied_response(rule: ApiRule, api_key: int, request: Any, version: int, message: str) -> Any:
    code = ErrorCode.cluster_authorization_failed
    if rule.deny is not None:
        return rule.deny(request, version, code, message)
    return wire.error_response(api_key, version, code, message)


def deny_fetch(request: Any, version: int, code: ErrorCode, message: str) -> Any:
    """Fetch: the top-level error (v7+) and the same error in every requested partition (the
    only place v4–v6 can carry it), like Kafka's FetchRequest.getErrorResponse."""
    mod = wire.response_module(FETCH, version)
    by_id = version >= 13
    topics = tuple(
        wire.make(mod.FetchableTopicResponse, topic=None if by_id else t.topic,
                  topic_id=t.topic_id if by_id else None,
                  partitions=tuple(wire.make(mod.PartitionData, partition_index=p.partition, error_code=code,
                                             high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                             aborted_transactions=None, preferred_read_replica=-1,
                                             records=None)
                                   for p in t.partitions))
        for t in request.topics)
    return wire.make(wire.response_class(FETCH, version), throttle_time=datetime.timedelta(0),
                     error_code=code, session_id=0, responses=topics, node_endpoints=())


def deny_create_topics(request: Any, version: int, code: ErrorCode, message: str) -> Any:
    """CreateTopics: the error on every requested topic (the response has no top-level one)."""
    mod = wire.response_module(CREATE_TOPICS, version)
    topics = tuple(wire.make(mod.CreatableTopicResult, name=t.name, topic_id=None, error_code=code,
                             error_message=message, topic_config_error_code=0, num_partitions=-1,
                             replication_factor=-1, configs=None)
                   for t in request.topics)
    return wire.make(wire.response_class(CREATE_TOPICS, version), throttle_time=datetime.timedelta(0),
                     topics=topics)


def deny_alter_configs(request: Any, version: int, code: ErrorCode, message: str) -> Any:
    """AlterConfigs / IncrementalAlterConfigs: the error on every resource."""
    key = int(request.__api_key__)
    mod = wire.response_module(key, version)
    responses = tuple(wire.make(mod.AlterConfigsResourceResponse, error_code=code, error_message=message,
                                resource_type=res.resource_type, resource_name=res.resource_name)
                      for res in request.resources)
    return wire.make(wire.response_class(key, version), throttle_time=datetime.timedelta(0), responses=responses)
