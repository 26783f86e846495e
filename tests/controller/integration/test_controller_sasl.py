"""SASL/authorization on the controller listener of a real kraft-controller process (the
hostile-frame fuzzing of every listener is tests/runtime/test_listener_fuzz.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from kafka_runtime.controller_client import MetadataReader, SimBroker
from kafka_common import ids
from kafka_common.wire import ErrorCode
from kafka_runtime.client import ClientError, KafkaClient

pytestmark = pytest.mark.integration
RNG = random.Random(31)


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


SASL = dict(authorizer_enabled="true", listener_security_protocol_map="CONTROLLER:SASL_PLAINTEXT",
            sasl_plain_users="broker:b-pw,alice:a-pw,admin:ad-pw", super_users="User:broker;User:admin")


def test_sasl_and_cluster_action(make_controller):
    proc = make_controller(**SASL)

    async def body():
        # ApiVersions is allowed before authentication
        anon = await KafkaClient.connect("127.0.0.1", proc.port)
        assert 17 in anon.versions and 36 in anon.versions
        await anon.close()
        with pytest.raises(ClientError, match="sasl_authentication_failed"):
            await KafkaClient.connect("127.0.0.1", proc.port, sasl=("broker", "wrong"))
        alice = SimBroker(1, [ids.random_directory_id(RNG)], cluster_id=proc.cluster_id)
        await alice.connect("127.0.0.1", proc.port, sasl=("alice", "a-pw"))
        assert (await alice.register()).error_code == ErrorCode.cluster_authorization_failed
        alice.epoch = 1
        assert (await alice.heartbeat(0)).error_code == ErrorCode.cluster_authorization_failed
        assert (await alice.assign({})).error_code == ErrorCode.cluster_authorization_failed
        # reading the metadata log is a cluster action too (the whole cluster's metadata)
        with pytest.raises(RuntimeError, match="cluster_authorization_failed"):
            await MetadataReader(alice.client).catch_up()
        broker = SimBroker(1, [ids.random_directory_id(RNG) for _ in range(2)], cluster_id=proc.cluster_id)
        await broker.connect("127.0.0.1", proc.port, sasl=("broker", "b-pw"))
        reader = MetadataReader(broker.client)
        await reader.catch_up()
        assert all(type(r).__name__ == "NoOpRecord" for _, r in reader.records)  # the refused requests changed nothing
        assert (await broker.register()).error_code == ErrorCode.none
        await reader.catch_up()
        assert list(reader.image.brokers) == [1] and reader.high_watermark >= 1
        await alice.close()
        await broker.close()
    run(body())


def test_plaintext_client_cannot_skip_authentication(make_controller):
    proc = make_controller(**SASL)

    async def body():
        c = await KafkaClient.connect("127.0.0.1", proc.port)
        b = SimBroker(1, [ids.random_directory_id(RNG)], cluster_id=proc.cluster_id)
        with pytest.raises(ClientError):
            await c.request(b.registration_request(), timeout_s=5)
        await c.close()
    run(body())
