"""Produce v0–v2 schemas in kio's style (kio 0.6.5 ships Produce 3–13 only).

Why: librdkafka derives its codec support from the advertised ranges — gzip and snappy
need Produce v0 in the range (librdkafka 2.0.2, i.e. Debian's kcat), so a broker that
starts Produce at v3 silently gets uncompressed batches from it. With these classes the
broker decodes and answers v0–v2 truthfully: the layout is Kafka's (ProduceRequest.json:
v0 acks/timeout/topics; v1 adds throttle time to the response; v2 log append time), and
the legacy message formats (magic 0/1) those versions normally carry are up-converted to a
v2 batch as Kafka 3.9 does (:mod:`broker_impl.api.up_convert`); magic-2 batches are accepted
as in v3.

The listener looks request classes up in ``BrokerApi.request_classes`` before kio's index
(see :mod:`broker_impl.api.handlers`); responses are built from :func:`response_module`.
"""

# No ``from __future__ import annotations``: kio reads the field types at runtime.
import datetime
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import TopicName
from kio.static.constants import EntityType
from kio.static.primitive import Records, TZAware, i16, i32, i32Timedelta, i64

VERSIONS = (0, 1, 2)


def _make(version: int) -> tuple[Any, Any]:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_data: tuple[PartitionProduceData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ProduceRequest:
        __type__: ClassVar = EntityType.request
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
        acks: i16 = field(metadata={"kafka_type": "int16"})
        timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        topic_data: tuple[TopicProduceData, ...]

        transactional_id: ClassVar[None] = None  # not in v0–v2; read by the handler

    if version < 2:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class PartitionProduceResponse:
            __type__: ClassVar = EntityType.nested
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class PartitionProduceResponse:  # type: ignore[no-redef]
            __type__: ClassVar = EntityType.nested
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            index: i32 = field(metadata={"kafka_type": "int32"})
            error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
            base_offset: i64 = field(metadata={"kafka_type": "int64"})
            log_append_time: TZAware | None = field(metadata={"kafka_type": "datetime_i64"}, default=None)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
        name: TopicName = field(metadata={"kafka_type": "string"})
        partition_responses: tuple[PartitionProduceResponse, ...]

    if version == 0:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]
    else:
        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:  # type: ignore[no-redef]
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]
            throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"},
                                                default=i32Timedelta.parse(datetime.timedelta(0)))

    request = SimpleNamespace(ProduceRequest=ProduceRequest, TopicProduceData=TopicProduceData,
                              PartitionProduceData=PartitionProduceData)
    response = SimpleNamespace(ProduceResponse=ProduceResponse, TopicProduceResponse=TopicProduceResponse,
                               PartitionProduceResponse=PartitionProduceResponse)
    return request, response


_MODULES = {v: _make(v) for v in VERSIONS}
REQUEST_CLASSES: dict[tuple[int, int], type] = {(0, v): _MODULES[v][0].ProduceRequest for v in VERSIONS}


def request_module(version: int) -> Any:
    return _MODULES[version][0]


def response_module(version: int) -> Any:
    return _MODULES[version][1]
