import random
import uuid

import pytest
from hypothesis import given, strategies as st

from kafka_common import ids

pytestmark = pytest.mark.unit


def test_reserved_values_are_the_kips():
    assert ids.halves(ids.UNASSIGNED) == (0, 0)
    assert ids.halves(ids.LOST) == (0, 1)
    assert ids.halves(ids.MIGRATING) == (0, 2)
    assert ids.to_base64(ids.UNASSIGNED) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert ids.to_base64(ids.LOST) == "AAAAAAAAAAAAAAAAAAAAAQ"


@pytest.mark.parametrize("msb,lsb,reserved", [
    (0, 0, True), (0, 1, True), (0, 99, True), (0, 100, False), (0, -1, True),
    (0, -(1 << 63), True), (1, 0, False), (-1, 5, False),
])
def test_reserved_rule(msb, lsb, reserved):
    assert ids.is_reserved(ids.uuid_of(msb, lsb)) is reserved


def test_random_ids_are_never_reserved_and_never_start_with_dash():
    rng = random.Random(7)
    for _ in range(2000):
        u = ids.random_directory_id(rng)
        assert not ids.is_reserved(u)
        assert not ids.to_base64(u).startswith("-")


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_base64_round_trip(n):
    u = uuid.UUID(int=n)
    text = ids.to_base64(u)
    assert len(text) == 22
    assert ids.from_base64(text) == u


@pytest.mark.parametrize("text", ["", "abc", "A" * 23, "AAAAAAAAAAAAAAAAAAAA!A", "AAAAAAAAAAAAAAAAAAAAAB"])
def test_bad_base64_is_rejected(text):
    with pytest.raises(ids.InvalidUuid):
        ids.from_base64(text)


def test_online_rule():
    d = ids.random_directory_id(random.Random(1))
    assert ids.is_online_dir(ids.UNASSIGNED, set())
    assert ids.is_online_dir(ids.MIGRATING, set())
    assert not ids.is_online_dir(ids.LOST, {d})
    assert ids.is_online_dir(d, {d})
    assert not ids.is_online_dir(d, set())


def test_from_wire_maps_none_to_zero():
    assert ids.from_wire(None) == ids.UNASSIGNED
