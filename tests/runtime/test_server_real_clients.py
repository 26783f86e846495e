"""The generic listener against unmodified real clients (librdkafka via confluent-kafka,
kafka-python): ApiVersions header quirks, flexible versions and SASL PLAIN as they do it.
The test handler serves only Metadata (no topics), enough for an admin client's
list_topics()."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pytest

from kafka_common import wire
from kafka_common.wire import ErrorCode
from kafka_runtime.request_context import SecurityConfig
from kafka_runtime.server import KafkaServer

pytestmark = pytest.mark.integration
confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka not installed")
from confluent_kafka.admin import AdminClient  # noqa: E402


class MetadataOnly:
    supported_apis = {3: (0, 12)}

    def __init__(self) -> None:
        self.port = 0
        self.principals: list[str] = []

    async def handle(self, ctx, header, request):
        self.principals.append(ctx.principal)
        mod = wire.response_module(3, ctx.api_version)
        return wire.make(wire.response_class(3, ctx.api_version), throttle_time=datetime.timedelta(0),
                         brokers=(wire.make(mod.MetadataResponseBroker, node_id=7, host="127.0.0.1",
                                            port=self.port, rack=None),),
                         cluster_id="jbodlab-test", controller_id=7, topics=(),
                         cluster_authorized_operations=-2147483648)


class ServerThread:
    """The asyncio server in a thread, so synchronous client libraries can call it."""

    def __init__(self, security: SecurityConfig | None = None) -> None:
        self.handler = MetadataOnly()
        self.security = security
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = KafkaServer(self.handler, host="127.0.0.1", port=0, listener_name="PLAINTEXT",
                                  security=self.security, log=lambda m: None)
        self.loop.run_until_complete(self.server.start())
        self.handler.port = self.server.port
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_librdkafka_negotiates_and_reads_metadata():
    with ServerThread() as srv:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.server.port}"})
        md = admin.list_topics(timeout=10)
        assert md.cluster_id == "jbodlab-test" and list(md.brokers) == [7]
        assert md.topics == {}


def test_kafka_python_negotiates_and_reads_metadata():
    kafka = pytest.importorskip("kafka", reason="kafka-python not installed")
    with ServerThread() as srv:
        client = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{srv.server.port}",
                                        request_timeout_ms=5000)
        try:
            assert client.list_topics() == []
        finally:
            client.close()


SASL = SecurityConfig(sasl_required=True, authorizer_enabled=True, users={"admin": "pw"},
                      super_users=frozenset({"User:admin"}))


def test_librdkafka_sasl_plain_login_and_failure():
    with ServerThread(SASL) as srv:
        conf = {"bootstrap.servers": f"127.0.0.1:{srv.server.port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "pw"}
        md = AdminClient(conf).list_topics(timeout=10)
        assert list(md.brokers) == [7]
        assert set(srv.handler.principals) == {"User:admin"}
        bad = AdminClient({**conf, "sasl.password": "nope"})
        with pytest.raises(confluent_kafka.KafkaException):
            bad.list_topics(timeout=3)
        assert set(srv.handler.principals) == {"User:admin"}
