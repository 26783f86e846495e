"""kafka_common.wire request/response helpers (pure: bytes in, bytes out)."""

import datetime
import struct

import pytest
from hypothesis import given, settings, strategies as st

from kafka_common import wire
from kafka_common.wire import ErrorCode

pytestmark = pytest.mark.unit


def _heartbeat(version=1):
    return wire.make(wire.request_class(63, version), broker_id=3, broker_epoch=7,
                     current_metadata_offset=42, want_fence=False, want_shut_down=False,
                     offline_log_dirs=())


def test_request_round_trip_and_header_version():
    frame = wire.encode_request(_heartbeat(), 99, "cli")
    assert wire.peek_header(frame) == (63, 1, 99)
    header, req = wire.decode_request(frame)
    assert header.correlation_id == 99 and header.client_id == "cli"
    assert req == _heartbeat()


def test_trailing_bytes_are_ignored_like_kafka_does_unless_strict():
    frame = wire.encode_request(_heartbeat(), 1, None) + b"\x01\x00\x00"
    assert wire.decode_request(frame)[1] == _heartbeat()
    with pytest.raises(wire.DecodeError, match="trailing"):
        wire.decode_request(frame, strict=True)


def test_unknown_api_and_version_raise_unknown_api():
    with pytest.raises(wire.UnknownApi):
        wire.decode_request(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00")
    with pytest.raises(wire.UnknownApi):
        wire.decode_request(struct.pack(">hhi", 63, 77, 1) + b"\x00\x00")


def test_short_frame_is_a_decode_error():
    with pytest.raises(wire.DecodeError):
        wire.peek_header(b"\x00\x01")


@pytest.mark.parametrize("api_key,version", [(62, 2), (63, 1), (73, 0), (56, 3), (19, 7), (1, 12),
                                              (1, 16), (64, 0), (3, 12), (0, 9)])
def test_error_response_encodes_for_every_api_we_serve(api_key, version):
    resp = wire.error_response(api_key, version, ErrorCode.cluster_authorization_failed)
    if hasattr(resp, "error_code"):
        assert resp.error_code == ErrorCode.cluster_authorization_failed
    payload = wire.encode_response(resp, 5)
    cid, back = wire.decode_response(payload, api_key, version)
    assert cid == 5 and back == resp


def test_api_versions_fallback_is_v0_body_with_error_35():
    payload = wire.api_versions_fallback(17, {18: (0, 4), 63: (1, 1)})
    cid, resp = wire.decode_response(payload, 18, 0)
    assert cid == 17
    assert resp.error_code == ErrorCode.unsupported_version
    assert {(a.api_key, a.min_version, a.max_version) for a in resp.api_keys} == {(18, 0, 4), (63, 1, 1)}


def test_api_versions_v3_response_uses_header_v0():
    payload = wire.encode_response(wire.api_versions_response(3, {18: (0, 4)}), 9)
    # header v0 = just the correlation id, then the body's error code: no tagged-field byte
    assert payload[:6] == struct.pack(">ih", 9, 0)


def test_make_drops_fields_the_version_lacks():
    v0 = wire.make(wire.request_class(63, 0), broker_id=1, broker_epoch=1, current_metadata_offset=0,
                   want_fence=True, want_shut_down=False, offline_log_dirs=("x",))
    assert not hasattr(v0, "offline_log_dirs")


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_random_bytes_never_raise_anything_but_decode_errors(data):
    try:
        wire.decode_request(data)
    except wire.DecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 200), st.binary(min_size=1, max_size=8))
def test_mutated_heartbeat_never_raises_anything_but_decode_errors(pos, junk):
    frame = bytearray(wire.encode_request(_heartbeat(), 3, "x"))
    pos %= len(frame)
    frame[pos:pos + len(junk)] = junk
    try:
        wire.decode_request(bytes(frame))
    except wire.DecodeError:
        pass
