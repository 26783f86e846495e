"""kafka_common.wire_guard: the walk in front of kio's native reader.

* every request and response schema kio ships: a valid encoding passes unchanged (no copy)
  and the walk ends exactly where kio's reader ends;
* hostile lengths are refused before kio sees them — the huge-array frame among them;
* unknown tagged fields are cut out (header, body, nested entity, inside a known tagged
  field) and kio then reads the value the sender meant;
* differential fuzz (in a child process, since a miss would abort it): for mutated
  encodings of every schema, whatever the guard lets through kio reads with exactly the
  structure the guard walked, and never aborts.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from kafka_common import wire, wire_guard
from kafka_common.varint import encode_uvarint
from testkit import fuzz, fuzz_corpus

pytestmark = pytest.mark.unit
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
st.register_type_strategy(Records, st.binary(max_size=64))


def all_schemas() -> list[type]:
    import kio.index
    out = []
    for key in range(0, 100):
        for version in range(0, 20):
            for load in (kio.index.load_request_schema, kio.index.load_response_schema):
                try:
                    out.append(load(key, version))
                except Exception:
                    pass
    return out


SCHEMAS = all_schemas()


def test_every_schema_has_a_plan():
    assert len(SCHEMAS) > 500
    for cls in SCHEMAS:
        wire_guard.plan_for(cls)
        wire_guard.plan_for(cls.__header_schema__)


@pytest.mark.parametrize("cls", SCHEMAS[::7], ids=lambda c: f"{c.__module__.split('schema.')[1]}")
def test_valid_encodings_pass_unchanged_and_the_walk_ends_where_kio_ends(cls):
    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def check(value):
        buf = io.BytesIO()
        try:
            entity_writer(cls)(buf, value)
        except Exception:  # a value kio cannot encode (e.g. an out-of-range timedelta)
            return
        data = buf.getvalue() + b"trailing"
        checked, end, end_in_data = wire_guard.check(data, (cls,))
        assert checked is data and end == end_in_data == len(data) - len("trailing")
        try:
            _, consumed = entity_reader(cls)(data, 0)
        except ValueError:  # kio refuses some values it wrote (timedelta overflow): not our walk
            return
        assert consumed == end
    check()


def test_huge_array_frame_is_refused_before_kio():
    frame = fuzz.HUGE_ARRAY_FRAME[4:]
    with pytest.raises(wire.DecodeError, match="4294967294 elements but 8 bytes left"):
        wire.decode_request(frame)


def _frame(api_key: int, version: int, body: bytes, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, -1) + (b"\x00" if flexible else b"") + body


@pytest.mark.parametrize("body,flexible,version,why", [
    (b"\x7f\xff\xff\xff", False, 4, "classic array count 2^31-1"),
    (b"\xff\xff\xff\xfe", False, 4, "classic array count -2"),
    (b"\x00\x00\x00\x01\x7f\xff", False, 4, "classic string length 32767"),
    (b"\x00\x00\x00\x01\xff\xfe", False, 4, "classic string length -2"),
    (b"\x00\x00\x00\x01\xff\xff", False, 4, "null for a non-nullable topic name"),
    (b"\xff\xff\xff\xff\x0f", True, 12, "compact array count 2^32-2"),
    (b"\x80\x80\x80\x80\x80\x01", True, 12, "varint longer than 5 bytes"),
    (b"\x02" + b"\x00" * 16 + b"\xff\xff\xff\xff\x0f", True, 12, "compact string length 2^32-2"),
    (b"\x01\x00\x00\x05\x05\x01\x02", True, 12, "tagged field size past the end"),
    (b"\x01\x00\x00\xfe\xff\xff\xff\x0f", True, 12, "2^32-2 tagged fields"),
])
def test_hostile_lengths_are_refused(body, flexible, version, why):
    with pytest.raises(wire.DecodeError):
        wire.decode_request(_frame(3, version, body, flexible))


def test_array_element_budget():
    n = 5000
    frame = _frame(3, 4, struct.pack(">i", n) + b"\x00\x00" * n + b"\x01", False)  # n empty topic names
    assert len(wire.decode_request(frame)[1].topics) == n
    with pytest.raises(wire.DecodeError, match="more array elements"):
        wire.decode_request(frame, max_items=n - 1)


def test_nullable_struct_marker_must_be_minus_one_or_one():
    """KIP-893 nullable structs: -1 null, 1 present; any other marker could be read differently
    by kio than by the walk, so it is refused."""
    import kio.schema.describe_topic_partitions.v0.request as m
    cls = m.DescribeTopicPartitionsRequest
    absent = bytes.fromhex("0100000005ff00")
    present = bytes.fromhex("010000000501036162000000030000")
    assert wire.decode(cls, absent)[0].cursor is None
    assert wire.decode(cls, present)[0].cursor == m.Cursor(topic_name="ab", partition_index=3)
    for marker in (0x00, 0x02, 0x7F, 0x80, 0xFE):
        with pytest.raises(wire.DecodeError, match="marker"):
            wire.decode(cls, present[:5] + bytes([marker]) + present[6:])


def test_unknown_tagged_fields_are_cut_out_everywhere():
    mod = wire.request_module(3, 12)
    request = wire.make(wire.request_class(3, 12), topics=(mod.MetadataRequestTopic(topic_id=None, name="a"),
                                                           mod.MetadataRequestTopic(topic_id=None, name="b")),
                        allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    plain = wire.encode_request(request, 9, "c")
    sections = [p for p, _e, role in wire_guard.length_fields(plain, (request.__header_schema__, type(request)))
                if role == "tags"]
    assert len(sections) == 4  # header, two topics, body
    out = bytearray(plain)
    for pos in reversed(sections):
        out[pos:pos + 1] = b"\x02" + b"\xe8\x07\x03abc" + b"\x90\x4e\x00"  # tags 1000 ("abc") and 10000 (empty)
    header, decoded = wire.decode_request(bytes(out))
    assert decoded == request and header.correlation_id == 9 and header.client_id == "c"


def test_unknown_tags_inside_a_known_tagged_field_are_cut_and_its_size_rewritten():
    cls = next(c for c in SCHEMAS if c.__flexible__ and any(op[0] == wire_guard._OP_ENTITY
                                                              for op in wire_guard.plan_for(c).tagged.values()))
    tag, op = next((t, op) for t, op in sorted(wire_guard.plan_for(cls).tagged.items())
                   if op[0] == wire_guard._OP_ENTITY)
    value = fuzz_corpus.random_value(cls, __import__("random").Random(3))
    inner_cls = type(getattr(value, op[3])) if getattr(value, op[3]) is not None else None
    if inner_cls is None or not inner_cls.__flexible__:
        pytest.fail(f"{cls.__name__}.{op[3]}: expected a flexible tagged struct")
    data = wire.encode(value)
    inner = wire.encode(getattr(value, op[3]))
    assert inner.endswith(b"\x00")  # its own (empty) tagged section
    polluted_inner = inner[:-1] + b"\x01" + b"\xd0\x0f\x02zz"  # tag 2000, 2 bytes
    needle = encode_uvarint(tag) + encode_uvarint(len(inner)) + inner
    assert data.count(needle) == 1, "the tagged value should appear once"
    polluted = data.replace(needle, encode_uvarint(tag) + encode_uvarint(len(polluted_inner)) + polluted_inner)
    decoded, consumed = wire.decode(cls, polluted)
    assert decoded == value and consumed == len(polluted)


def test_a_known_tag_whose_value_does_not_fill_its_size_is_refused():
    cls = next(c for c in SCHEMAS if c.__flexible__ and any(op[0] == wire_guard._OP_FIXED
                                                              for op in wire_guard.plan_for(c).tagged.values()))
    tag, op = next((t, op) for t, op in sorted(wire_guard.plan_for(cls).tagged.items())
                   if op[0] == wire_guard._OP_FIXED)
    value = fuzz_corpus.random_value(cls, __import__("random").Random(5))
    data = wire.encode(value)
    # rebuild the top-level tagged section: only our tag, its value one byte too long
    sections = [p for p, _e, role in wire_guard.length_fields(data, (cls,)) if role == "tags"]
    last = sections[-1]
    bad = data[:last] + b"\x01" + encode_uvarint(tag) + encode_uvarint(op[1] + 1) + b"\x00" * (op[1] + 1)
    with pytest.raises(wire.DecodeError, match="declares"):
        wire.decode(cls, bad)


DIFFERENTIAL = textwrap.dedent('''
    import random, sys, io
    import kio.index
    from kio.serial import entity_reader
    from kafka_common import wire, wire_guard
    from testkit import fuzz, fuzz_corpus
    schemas = []
    for key in range(0, 100):
        for version in range(0, 20):
            for load in (kio.index.load_request_schema, kio.index.load_response_schema):
                try:
                    schemas.append(load(key, version))
                except Exception:
                    pass
    rng = random.Random(int(sys.argv[1]))
    ch = fuzz.RandomChooser(rng)
    accepted = refused = mismatched = 0
    for cls in schemas:
        for _ in range(3):
            try:
                data = wire.encode(fuzz_corpus.random_value(cls, rng))
            except Exception:
                continue
            lengths = wire_guard.length_fields(data, (cls,))
            for _ in range(12):
                buf = bytearray(data)
                if lengths and rng.random() < 0.6:
                    pos, enc, _ = rng.choice(lengths)
                    width = fuzz._width(bytes(buf), pos, enc)
                    buf[pos:pos + width] = fuzz._hostile_length(ch, enc, len(buf) - pos - width)
                elif buf:
                    p = rng.randrange(len(buf))
                    if rng.random() < 0.5:
                        buf[p] = rng.randrange(256)
                    else:
                        del buf[p:]
                m = bytes(buf)
                try:
                    checked, end, _ = wire_guard.check(m, (cls,))
                except wire_guard.FrameError:
                    refused += 1
                    continue
                accepted += 1
                try:
                    _, n = entity_reader(cls)(checked, 0)
                except Exception:
                    continue  # kio refuses a value (bad UTF-8, unknown error code): fine
                if n != end:
                    mismatched += 1
                    print("MISMATCH", cls.__module__, cls.__name__, m.hex(), n, end)
    print(accepted, refused, mismatched)
    sys.exit(1 if mismatched else 0)
''')


def test_differential_fuzz_against_kio_in_a_child_process():
    out = subprocess.run([sys.executable, "-c", DIFFERENTIAL, "19"], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, (f"exit {out.returncode} (-6 = kio aborted on bytes the guard let "
                                 f"through): {out.stdout[-2000:]} {out.stderr[-2000:]}")
    accepted, refused, mismatched = map(int, out.stdout.split()[-3:])
    assert accepted > 1000 and refused > 1000 and mismatched == 0


def test_tagged_fields_count_against_the_budget():
    """A frame of nothing but (unknown) tagged fields is walked in bounded steps too."""
    n = 3000
    section = encode_uvarint(n) + b"".join(encode_uvarint(1000 + i) + b"\x00" for i in range(n))
    frame = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00" + b"\x01\x01" + section  # ApiVersions v3
    header, request = wire.decode_request(frame)
    assert request.client_software_name == "" and header.correlation_id == 1
    with pytest.raises(wire.DecodeError, match="limit"):
        wire.decode_request(frame, max_items=n - 1)
