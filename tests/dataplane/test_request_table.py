"""The broker listener's one request table: ApiVersions advertises exactly its rows (plus
what the server serves itself) and every advertised API has a handler. Over a socket:
``test_admin_apis.test_advertised_versions``."""

from __future__ import annotations

import inspect

import pytest

from broker_impl.api import legacy_produce, request_table
from broker_impl.api.request_table import REQUESTS, Handler
from kafka_common.wire import ApiKey
from kafka_runtime.connection import API_VERSIONS_RANGE
from kafka_runtime.server import SASL_APIS, KafkaServer
from kafka_runtime.request_context import SecurityConfig

pytestmark = pytest.mark.unit
# what the server answers itself, besides the handler's table
OWN = {ApiKey.API_VERSIONS, *SASL_APIS}


def test_every_row_is_a_typed_handler_keyed_by_api_key():
    for key, row in REQUESTS.items():
        assert type(key) is ApiKey, key
        assert isinstance(row, Handler) and inspect.iscoroutinefunction(row.fn), key
        lo, hi = row.versions
        assert 0 <= lo <= hi, key
        assert key not in OWN, key
        for version, cls in row.request_classes.items():
            assert lo <= version <= hi and int(cls.__api_key__) == key and cls.__version__ == version


class _Api:
    """The server reads the handler's ``supported_apis`` only (BrokerApi's own, derived)."""
    supported_apis = request_table.supported_apis()


@pytest.mark.parametrize("sasl", [False, True])
def test_the_listener_advertises_exactly_the_table(sasl):
    security = SecurityConfig(sasl_offered=True) if sasl else SecurityConfig()
    table = KafkaServer(_Api(), host="127.0.0.1", port=0, listener_name="L", security=security).api_table()
    assert {k: v for k, v in table.items() if k not in OWN} == {k: row.versions for k, row in REQUESTS.items()}
    assert table[ApiKey.API_VERSIONS] == API_VERSIONS_RANGE
    assert all(table[k] == SASL_APIS[k] for k in SASL_APIS) if sasl else not set(SASL_APIS) & set(table)


def test_broker_api_derives_its_tables_from_the_rows():
    assert request_table.supported_apis() == {k: row.versions for k, row in REQUESTS.items()}
    # the schemas kio lacks: Produce v0-2, from the row
    assert request_table.request_classes() == {(ApiKey.PRODUCE, v): cls for v, cls in
                                               REQUESTS[ApiKey.PRODUCE].request_classes.items()}
    assert request_table.request_classes() == legacy_produce.REQUEST_CLASSES

