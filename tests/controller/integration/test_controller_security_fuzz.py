"""SASL/authorization on the controller listener, and random/mutated frames thrown at a
real kraft-controller process: an error or a closed connection, never a crash."""

from __future__ import annotations

import asyncio
import datetime
import random
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from controller_impl.runtime.sim import MetadataReader, SimBroker, create_topic
from kafka_common import framing, ids, wire
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
        reader = MetadataReader(alice.client)  # reading metadata is not a cluster action
        await reader.catch_up()
        assert all(type(r).__name__ == "NoOpRecord" for _, r in reader.records)  # the refused requests changed nothing
        broker = SimBroker(1, [ids.random_directory_id(RNG) for _ in range(2)], cluster_id=proc.cluster_id)
        await broker.connect("127.0.0.1", proc.port, sasl=("broker", "b-pw"))
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


# -- fuzz ------------------------------------------------------------------------------------

def _valid_frames(cluster_id: str) -> list[bytes]:
    b = SimBroker(1, [ids.random_directory_id(RNG) for _ in range(2)], cluster_id=cluster_id)
    b.epoch = 0
    mod = wire.request_module(19, 7)
    create = wire.make(wire.request_class(19, 7), topics=(mod.CreatableTopic(
        name="fz", num_partitions=3, replication_factor=1, assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=1), validate_only=False)
    fetch = MetadataReader.__new__(MetadataReader)
    fetch.version, fetch.next_offset = 13, 0
    reqs = [b.registration_request(), b.heartbeat_request(0), create, fetch.fetch_request(0)]
    ap_mod = wire.request_module(73, 0)
    reqs.append(wire.request_class(73, 0)(broker_id=1, broker_epoch=0, directories=(ap_mod.DirectoryData(
        id_=b.dirs[0], topics=(ap_mod.TopicData(topic_id=ids.random_uuid(RNG), partitions=(
            ap_mod.PartitionData(partition_index=0),)),)),)))
    # a Produce with garbage "records" (not a controller API: must be refused, not crash)
    pmod = wire.request_module(0, 9)
    reqs.append(wire.make(wire.request_class(0, 9), transactional_id=None, acks=1,
                          timeout=datetime.timedelta(seconds=1), topic_data=(pmod.TopicProduceData(
                              name="x", partition_data=(pmod.PartitionProduceData(
                                  index=0, records=bytes(RNG.getrandbits(8) for _ in range(80))),)),)))
    return [wire.encode_request(q, 1, "fuzz") for q in reqs]


def _exchange(port: int, payload: bytes) -> None:
    """Send one payload, read until the server answers, closes, or 0.3 s pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.settimeout(0.3)
        try:
            s.sendall(payload)
            while s.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError, BrokenPipeError):
            pass


def _alive(port: int) -> bool:
    async def ping():
        c = await KafkaClient.connect("127.0.0.1", port, timeout_s=5)
        await c.close()
        return True
    return run(ping(), 10)


def test_random_and_mutated_frames_never_crash_the_controller(make_controller):
    proc = make_controller(socket_request_max_bytes="65536")
    valid = _valid_frames(proc.cluster_id)
    count = {"n": 0}

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(["random", "mutate", "truncate", "size"]),
           which=st.integers(0, len(valid) - 1), data=st.binary(min_size=0, max_size=64),
           pos=st.integers(0, 10_000), size=st.integers(-2**31, 2**31 - 1))
    def fuzz(kind, which, data, pos, size):
        frame = valid[which]
        if kind == "random":
            payload = framing.encode_frame(data)
        elif kind == "mutate":
            buf = bytearray(frame)
            p = pos % len(buf)
            buf[p:p + len(data)] = data
            payload = framing.encode_frame(bytes(buf))
        elif kind == "truncate":
            payload = framing.encode_frame(frame[: pos % len(frame)])
        else:  # a lying size prefix
            payload = struct.pack(">i", size) + frame
        _exchange(proc.port, payload)
        count["n"] += 1
        if count["n"] % 20 == 0:
            assert proc.alive(), proc.stderr()

    fuzz()
    assert proc.alive(), proc.stderr()
    assert _alive(proc.port)
    assert "Traceback" not in proc.stderr()
