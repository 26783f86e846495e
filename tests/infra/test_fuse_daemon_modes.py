"""The partial, silent and lost-write modes of both FUSE fault daemons (native and Python), on
temp images with O_DIRECT I/O (every call reaches the daemon): faults limited to byte ranges,
corrupt reads and writes (the same bits in both daemons: ``infra.faultmodes.block_flip``), bad
blocks that a write remaps, the volatile cache of ``lose-unsynced`` with a flush and a power
cut, and the counters that date the first hit. Real daemons, no containers."""

from __future__ import annotations

import errno
import os

import pytest

from infra.faultmodes import BLOCK, FaultMode, flips
from tests.infra.test_fuse_daemon_impls import Direct, _errno_of, daemon  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def _fill(daemon, name: str = "a.img") -> bytes:
    """Known content in the first 64 KiB of the backing file (written on the host, not through FUSE)."""
    data = bytes((i * 7 + i // 4096) % 251 for i in range(16 * BLOCK))
    with open(daemon.backing / name, "r+b") as fh:
        fh.write(data)
    return data


def _read(d: Direct, offset: int) -> bytes:
    d.read(offset)
    return bytes(d.buf[:BLOCK])


def test_ranges_limit_a_fault_to_those_bytes_and_an_fsync_passes(daemon):
    d = Direct(daemon.mountpoint / "a.img")
    try:
        reply = daemon.set_mode("a.img", FaultMode("error", ranges=((8192, 12288), (40960, 45056))))
        assert reply["mode"]["ranges"] == [[8192, 12288], [40960, 45056]]
        assert _errno_of(lambda: d.read(8192)) == errno.EIO
        assert _errno_of(lambda: d.write(40960)) == errno.EIO
        assert _errno_of(lambda: d.read(0)) == 0 and _errno_of(lambda: d.write(16384)) == 0
        assert _errno_of(d.fsync) == 0
        got = daemon.get("a.img")
        assert got["injected"] == {"read": 1, "write": 1, "fsync": 0} and got["first_hit_ns"] >= got["since_ns"]
        daemon.request({"op": "rearm", "image": "a.img"})
        assert daemon.get("a.img")["first_hit_ns"] is None and daemon.get("a.img")["injected"]["read"] == 1
    finally:
        d.close()


def test_corrupt_reads_flip_the_hashed_bits_inside_the_ranges_only(daemon):
    data = _fill(daemon)
    ranges = ((4096, 3 * BLOCK),)
    mode = FaultMode("corrupt-reads", p=1.0, seed=11, ranges=ranges)
    daemon.set_mode("a.img", mode)
    d = Direct(daemon.mountpoint / "a.img")
    try:
        for off in range(0, 4 * BLOCK, BLOCK):
            want = bytearray(data[off:off + BLOCK])
            for i, bit in flips(mode.ranges, mode.seed, mode.p, off, BLOCK):
                want[i] ^= 1 << bit
            got = _read(d, off)
            assert got == bytes(want), f"block at {off}"
            assert (got != data[off:off + BLOCK]) == (4096 <= off < 3 * BLOCK)
        assert _read(d, BLOCK) == _read(d, BLOCK), "the same bit every time (bit rot, not noise)"
        snap = daemon.get("a.img")
        assert snap["flipped"] == 4 and snap["injected"]["read"] == 4 and snap["first_hit_ns"] is not None
        assert (daemon.backing / "a.img").read_bytes()[:16 * BLOCK] == data, "the medium itself is intact"
        daemon.set_mode("a.img", FaultMode("corrupt-reads", p=0.5, seed=3))   # a rate over the whole image
        changed = sum(_read(d, off) != data[off:off + BLOCK] for off in range(0, 16 * BLOCK, BLOCK))
        assert changed == sum(bool(flips((), 3, 0.5, off, BLOCK)) for off in range(0, 16 * BLOCK, BLOCK))
        assert 2 <= changed <= 14
    finally:
        d.close()


def test_corrupt_writes_land_with_the_flipped_bit(daemon):
    mode = FaultMode("corrupt-writes", p=1.0, seed=5)
    daemon.set_mode("a.img", mode)
    d = Direct(daemon.mountpoint / "a.img")
    try:
        d.buf[:] = bytes(range(256)) * 16
        d.write(2 * BLOCK)
        d.fsync()
        want = bytearray(bytes(range(256)) * 16)
        for i, bit in flips((), 5, 1.0, 2 * BLOCK, BLOCK):
            want[i] ^= 1 << bit
        with open(daemon.backing / "a.img", "rb") as fh:
            fh.seek(2 * BLOCK)
            assert fh.read(BLOCK) == bytes(want)
        assert daemon.get("a.img")["flipped"] == 1
    finally:
        d.close()


def test_bad_blocks_fail_reads_until_a_write_remaps_them(daemon):
    d = Direct(daemon.mountpoint / "a.img")
    try:
        reply = daemon.set_mode("a.img", FaultMode("bad-blocks", ranges=((8192, 8193), (20480, 24576))))
        assert reply["mode"]["ranges"] == [[8192, 12288], [20480, 24576]] and reply["bad_blocks"] == 2
        assert _errno_of(lambda: d.read(8192)) == errno.EIO and _errno_of(lambda: d.read(20480)) == errno.EIO
        assert _errno_of(lambda: d.read(12288)) == 0
        assert _errno_of(lambda: d.write(8192)) == 0                  # remapped
        assert _errno_of(lambda: d.read(8192)) == 0 and _errno_of(lambda: d.read(20480)) == errno.EIO
        assert daemon.get("a.img")["bad_blocks"] == 1
    finally:
        d.close()


def test_lose_unsynced_keeps_writes_until_a_flush_and_a_power_cut_drops_the_rest(daemon):
    data = _fill(daemon)
    image = daemon.backing / "a.img"
    d = Direct(daemon.mountpoint / "a.img")
    try:
        daemon.set_mode("a.img", FaultMode("lose-unsynced"))
        d.buf[:] = b"S" * BLOCK
        d.write(BLOCK)
        assert image.read_bytes()[BLOCK:2 * BLOCK] == data[BLOCK:2 * BLOCK], "not on the medium before a flush"
        assert _read(d, BLOCK) == b"S" * BLOCK, "reads see the volatile cache"
        assert daemon.get("a.img")["unsynced_bytes"] == BLOCK
        d.fsync()
        assert image.read_bytes()[BLOCK:2 * BLOCK] == b"S" * BLOCK and daemon.get("a.img")["unsynced_bytes"] == 0
        d.buf[:] = b"U" * BLOCK
        d.write(3 * BLOCK)
        fd = os.open(daemon.mountpoint / "a.img", os.O_RDWR)
        try:
            os.pwrite(fd, b"half", 5 * BLOCK + 100)   # a partial page: read, changed, cached
        finally:
            os.close(fd)
        cut = daemon.request({"op": "power-cut", "image": "a.img"})
        assert cut["ok"] and cut["dropped_bytes"] == 2 * BLOCK and cut["mode"]["kind"] == "off"
        disk = image.read_bytes()
        assert disk[3 * BLOCK:4 * BLOCK] == data[3 * BLOCK:4 * BLOCK] and disk[5 * BLOCK:6 * BLOCK] == data[5 * BLOCK:6 * BLOCK]
        assert _errno_of(lambda: d.read(0)) == errno.EIO, "no power: reads fail"
        assert _errno_of(lambda: d.write(0)) == 0 and _errno_of(d.fsync) == 0, "writes are acknowledged and dropped"
        assert daemon.get("a.img")["dropped_bytes"] == 3 * BLOCK, "a write after the cut counts as lost"
        assert image.read_bytes()[:BLOCK] == data[:BLOCK]
        daemon.set_mode("a.img", FaultMode())
        assert _read(d, BLOCK) == b"S" * BLOCK and _read(d, 3 * BLOCK) == data[3 * BLOCK:4 * BLOCK]
    finally:
        d.close()


def test_leaving_lose_unsynced_without_a_power_cut_loses_nothing(daemon):
    d = Direct(daemon.mountpoint / "a.img")
    try:
        daemon.set_mode("a.img", FaultMode("lose-unsynced"))
        d.buf[:] = b"K" * BLOCK
        d.write(7 * BLOCK)
        daemon.set_mode("a.img", FaultMode())
        assert (daemon.backing / "a.img").read_bytes()[7 * BLOCK:8 * BLOCK] == b"K" * BLOCK
    finally:
        d.close()


@pytest.mark.parametrize("mode", [
    {"kind": "bad-blocks"}, {"kind": "corrupt-reads", "p": 0}, {"kind": "lose-unsynced", "ranges": [[0, 10]]},
    {"kind": "error", "ranges": [[5, 5]]}, {"kind": "error", "ranges": [[0, "x"]]}, {"kind": "error", "ranges": 7},
    {"kind": "error", "ranges": [[0, 1, 2]]}, {"kind": "corrupt-writes", "p": 1.5},
])
def test_bad_new_modes_are_refused_with_a_reason(daemon, mode):
    reply = daemon.request({"op": "set", "image": "a.img", "mode": mode})
    assert reply["ok"] is False and reply["error"], reply
    assert daemon.get("a.img")["mode"]["kind"] == "ok"
