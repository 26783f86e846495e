"""Pure parts of infra: fault modes, dm tables, mountinfo parsing, names, source hash, the
choice of FUSE daemon."""

import logging
import os
import re
import sys

import pytest

from infra import dm, faultfs_build, image, naming
from infra.errors import DeviceError
from infra.faultmodes import FaultMode
from infra.fuse_daemon import FuseDaemon, is_daemon_argv
from infra.mounts import mountinfo

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text,kind,ops", [
    ("ok", "ok", set()),
    ("error", "error", {"read", "write", "fsync"}),
    ("error-reads", "error-reads", {"read"}),
    ("error-writes", "error-writes", {"write", "fsync"}),
    ("flaky:0.25:7", "flaky", {"read", "write", "fsync"}),
    ("delay:50", "delay", {"read", "write", "fsync"}),
    ("removed", "removed", {"read", "write", "fsync"}),
    ("corrupt-reads:0.5:3", "corrupt-reads", {"read"}),
    ("corrupt-writes:1", "corrupt-writes", {"write"}),
    ("bad-blocks@4096-8192,16384-16385", "bad-blocks", {"read"}),
    ("error-reads@0-512", "error-reads", {"read"}),
    ("lose-unsynced", "lose-unsynced", {"read", "write", "fsync"}),
    ("off", "off", {"read", "write", "fsync"}),
])
def test_fault_mode_text_round_trip(text, kind, ops):
    mode = FaultMode.parse(text)
    assert mode.kind == kind and set(mode.ops) == ops
    assert FaultMode.parse(str(mode)) == mode
    assert FaultMode.from_dict(mode.to_dict()) == mode


@pytest.mark.parametrize("text,needle", [
    ("flaky:2", "within [0, 1]"), ("delay", "needs MS"), ("error:3", "takes no parameters"),
    ("bogus", "unknown"), ("flaky:x", "flaky:x"), ("corrupt-reads:0", "within (0, 1]"),
    ("bad-blocks", "needs the bad blocks"), ("lose-unsynced@0-10", "takes no ranges"), ("error@5-5", "start < end"),
    ("error@", "needs START-END"),
])
def test_fault_mode_rejects_bad_text_naming_the_problem(text, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        FaultMode.parse(text)


def test_ranges_are_merged_and_bad_blocks_widened_to_whole_blocks():
    from infra.faultmodes import normalize_ranges, overlaps
    assert normalize_ranges([(10, 20), (0, 5), (15, 30), (30, 31)]) == ((0, 5), (10, 31))
    assert FaultMode("bad-blocks", ranges=((100, 200), (5000, 5001))).ranges == ((0, 8192),)
    r = ((0, 5), (10, 31))
    assert overlaps(r, 4, 6) and overlaps(r, 30, 40) and overlaps(r, 6, 11) and not overlaps(r, 5, 10)
    assert not overlaps(r, 31, 100) and not overlaps((), 0, 10)
    mode = FaultMode("error-writes", ranges=((4096, 8192),))
    assert mode.in_scope("write", 4000, 100) and not mode.in_scope("write", 0, 4096) and not mode.in_scope("fsync")


def test_corruption_is_a_fixed_function_of_seed_and_block():
    from infra.faultmodes import block_flip, flips, mix64
    assert mix64(0) == 0xE220A8397B1DCDAF          # splitmix64's first output for state 0 (the C daemon's too)
    assert all(block_flip(9, b, 1.0) is not None for b in range(100))
    assert sum(block_flip(9, b, 0.1) is not None for b in range(10_000)) in range(900, 1100)
    assert block_flip(9, 42, 1.0) == block_flip(9, 42, 1.0) != block_flip(10, 42, 1.0)
    # a read of 3 blocks sees the flips of the blocks it covers, at their offsets in the request
    got = flips((), 9, 1.0, 4096, 3 * 4096)
    assert [i // 4096 for i, _ in got] == [0, 1, 2]
    assert flips(((4096, 8192),), 9, 1.0, 0, 3 * 4096) == [(i + 4096, b) for i, b in flips((), 9, 1.0, 4096, 4096)]


def test_a_file_limited_corruption_moves_its_seed_until_a_flip_meets_the_files_bytes():
    from infra.faultmodes import BLOCK, block_flip, flips, seed_meeting_data
    block = 37_421
    start = block * BLOCK
    short = ((start, start + 300),)                 # a 300-byte file: its one block mostly past its end
    missing = next(s for s in range(1000) if block_flip(s, block, 1.0)[0] >= 300)
    moved = seed_meeting_data(missing, 1.0, short)
    assert moved > missing and flips(short, moved, 1.0, start, 300), "the flip lands in the file's 300 bytes"
    assert all(not flips(short, s, 1.0, start, 300) for s in range(missing, moved)), "the first such seed"
    assert seed_meeting_data(moved, 1.0, short) == moved, "a seed that already meets the data is kept"
    full = ((start, start + 16 * BLOCK),)           # whole blocks at p=1: every seed meets them
    assert seed_meeting_data(5, 1.0, full) == 5
    assert seed_meeting_data(5, 1.0, ()) == 5, "no ranges: the whole image, nothing to move"
    assert seed_meeting_data(5, 1e-9, ((start, start + 1),), tries=8) == 5, "none meets it: the seed asked for"


def test_error_writes_fails_writes_and_fsync_only():
    mode = FaultMode("error-writes")
    assert mode.fails("write") and mode.fails("fsync") and not mode.fails("read")
    assert not FaultMode("flaky", p=1.0).fails("read")  # flaky is decided per op by the RNG


def test_dm_tables_follow_the_xfstests_forms():
    assert dm.table_for(FaultMode(), "/dev/loop3", 2048) == "0 2048 linear /dev/loop3 0\n"
    assert dm.table_for(FaultMode("error"), "/dev/loop3", 2048) == "0 2048 error\n"
    assert dm.table_for(FaultMode("error-writes"), "/dev/loop3", 2048) == \
        "0 2048 flakey /dev/loop3 0 0 180 1 error_writes\n"
    assert dm.table_for(FaultMode("error-reads"), "/dev/loop3", 2048) == \
        "0 2048 flakey /dev/loop3 0 0 180 1 error_reads\n"
    assert dm.table_for(FaultMode("delay", delay_ms=200), "/dev/loop3", 2048) == "0 2048 delay /dev/loop3 0 200\n"
    assert dm.table_for(FaultMode("removed"), "/dev/loop3", 2048) == "0 2048 error\n"


def test_mountinfo_parsing(tmp_path):
    text = ("36 35 98:0 /mnt1 /mnt/parent\\040dir rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
            "40 36 0:52 / /var/lib/jbodlab/labs/ab12cd34/fuse rw,nosuid shared:5 - fuse jbodlab-faultfs rw,user_id=0\n"
            "41 36 7:3 / /var/lib/jbodlab/labs/ab12cd34/nodes/n1/d1 ro,relatime - ext4 /dev/loop3 ro\n")
    path = tmp_path / "mountinfo"
    path.write_text(text)
    entries = mountinfo(str(path))
    assert entries[0].target == "/mnt/parent dir" and entries[0].fstype == "ext3"
    assert entries[1].minor == 52 and entries[1].fstype == "fuse" and not entries[1].read_only
    assert entries[2].read_only and entries[2].source == "/dev/loop3"


def test_names_are_checked():
    assert naming.container_name("ab12cd34", "broker-1") == "jbodlab-ab12cd34-broker-1"
    assert naming.dm_name("ab12cd34", "broker-1", "d1") == "jbodlab-ab12cd34-broker-1--d1"
    for bad in ("Broker", "a/b", "x--y", "", "-a"):
        with pytest.raises(ValueError, match="name"):
            naming.check_name("node", bad)
    with pytest.raises(ValueError, match="lab id"):
        naming.check_lab_id("../etc")


def test_source_hash_tracks_runtime_sources_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\ndependencies=['a==1']\n")
    for pkg in ("kafka_common", "harness"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "m.py").write_text("A = 1\n")
    h1 = image.source_hash(tmp_path)
    assert image.source_hash(tmp_path) == h1
    (tmp_path / "harness" / "m.py").write_text("A = 2\n")
    assert image.source_hash(tmp_path) == h1, "host-only packages must not rebuild the node image"
    (tmp_path / "kafka_common" / "m.py").write_text("A = 2\n")
    h2 = image.source_hash(tmp_path)
    assert h2 != h1
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\ndependencies=['a==2']\n")
    assert image.source_hash(tmp_path) != h2
    assert image.runtime_dependencies(tmp_path) == ["a==2"]


def test_cleanup_maps_paths_and_recorded_loops_to_labs(tmp_path, monkeypatch):
    import json

    from infra import cleanup
    monkeypatch.setattr(cleanup, "LABS_ROOT", tmp_path)
    assert cleanup._lab_of_path(f"{tmp_path}/ab12cd34/fuse/n1--d1.img") == "ab12cd34"
    assert cleanup._lab_of_path("/tmp/jbodtest-x/disk.img") is None
    assert cleanup._lab_of_path(str(tmp_path) + "x/ab12cd34/f") is None
    (tmp_path / "ab12cd34").mkdir()
    (tmp_path / "ab12cd34" / "lab.json").write_text(json.dumps(
        {"disks": [{"loop_dev": "/dev/loop7", "image": f"{tmp_path}/ab12cd34/backing/n1--d1.img"}]}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "lab.json").write_text("{not json")
    assert cleanup._recorded_loops() == {"/dev/loop7": ("ab12cd34", "n1--d1.img")}


def test_impl_choice_and_fallback(monkeypatch, tmp_path, caplog):
    with pytest.raises(ValueError):
        FuseDaemon(tmp_path, impl="rust")
    monkeypatch.setenv("JBODLAB_FUSE_IMPL", "python")
    assert FuseDaemon(tmp_path).impl == "python"
    monkeypatch.delenv("JBODLAB_FUSE_IMPL")
    assert FuseDaemon(tmp_path).impl == "auto"
    assert FuseDaemon(tmp_path, impl="python")._program() == ([sys.executable, "-m", "infra.fusefs"], "python")

    def unbuildable(say=None):
        raise faultfs_build.BuildError("no C compiler (apt-get install gcc libc6-dev)")

    monkeypatch.setattr(faultfs_build, "ensure_built", unbuildable)
    with caplog.at_level(logging.WARNING, logger="jbodlab.fuse"):
        assert FuseDaemon(tmp_path)._program()[1] == "python"
    assert [r.getMessage() for r in caplog.records] == [
        "native FUSE daemon unavailable (no C compiler (apt-get install gcc libc6-dev)); "
        "running the Python daemon (infra.fusefs)"]
    with pytest.raises(DeviceError, match="no C compiler"):
        FuseDaemon(tmp_path, impl="native")._program()


def test_cleanup_recognises_both_daemons():
    assert is_daemon_argv([b"/usr/bin/python3", b"-m", b"infra.fusefs", b"--mount", b"/x", b""])
    assert is_daemon_argv([b"/var/cache/jbodlab/faultfs/jbodlab-faultfs-0123456789abcdef", b"--mount", b"/x", b""])
    assert not is_daemon_argv([b"/usr/bin/python3", b"-m", b"infra.fusefs_other", b""])
    assert not is_daemon_argv([b"/bin/sleep", b"jbodlab-faultfs-1", b""])
    assert not is_daemon_argv([])


def test_dm_tables_of_the_partial_silent_and_lost_write_modes():
    ranged = FaultMode("error-reads", ranges=((4096, 8192), (1 << 20, (1 << 20) + 512)))
    assert dm.table_for(ranged, "/dev/loop3", 4096) == (
        "0 8 linear /dev/loop3 0\n8 8 flakey /dev/loop3 8 0 180 1 error_reads\n16 2032 linear /dev/loop3 16\n"
        "2048 1 flakey /dev/loop3 2048 0 180 1 error_reads\n2049 2047 linear /dev/loop3 2049\n")
    assert dm.table_for(FaultMode("corrupt-reads", p=1.0), "/dev/loop3", 2048) == \
        "0 2048 flakey /dev/loop3 0 0 180 5 corrupt_bio_byte 1 r 255 0\n"
    assert dm.table_for(FaultMode("corrupt-writes", p=0.25), "/dev/loop3", 2048) == \
        "0 2048 flakey /dev/loop3 0 0 180 2 random_write_corrupt 250000000\n"
    assert dm.table_for(FaultMode("off"), "/dev/loop3", 2048) == \
        "0 2048 flakey /dev/loop3 0 0 180 2 error_reads drop_writes\n"
    bad = FaultMode("bad-blocks", ranges=((8192, 16384),))
    assert dm.table_for(bad, "/dev/loop3", 2048) == "0 2048 dust /dev/loop3 0 4096\n"
    assert dm.dust_messages(bad) == ["addbadblock 2", "addbadblock 3", "enable"]
    assert dm.table_for(FaultMode("lose-unsynced"), "/dev/loop3", 2048, "/dev/loop9") == \
        "0 2048 log-writes /dev/loop3 /dev/loop9\n"
    with pytest.raises(Exception, match="log device"):
        dm.table_for(FaultMode("lose-unsynced"), "/dev/loop3", 2048)


def test_dm_log_writes_replay_keeps_what_was_flushed(tmp_path):
    from infra import dm_logwrites as lw
    log = tmp_path / "log"
    lw.write_log(str(log), [(0, b"A" * 4096, 0), (2, b"B" * 8192, 0), (0, b"", lw.FLUSH),
                            (5, b"C" * 4096, 0), (6, b"D" * 4096, lw.FUA), (1, b"E" * 4096, 0)])
    with open(log, "ab") as fh:
        fh.write(b"\0" * 3 * 4096)                          # a sparse log's zeros after the last entry
    sectorsize, entries = lw.parse_log(str(log))
    assert sectorsize == 4096 and [(e.sector, e.nr_sectors, e.flags) for e in entries] == [
        (0, 1, 0), (2, 2, 0), (0, 0, lw.FLUSH), (5, 1, 0), (6, 1, lw.FUA), (1, 1, 0)]
    kept, lost = lw.durable(entries)
    assert [e.sector for e in kept] == [0, 2, 0, 6] and [e.sector for e in lost] == [5, 1]
    target = tmp_path / "image"
    target.write_bytes(b"." * 8 * 4096)
    fd = os.open(target, os.O_WRONLY)
    try:
        assert lw.replay(str(log), sectorsize, kept, fd) == 4 * 4096
    finally:
        os.close(fd)
    got = target.read_bytes()
    assert got == b"A" * 4096 + b"." * 4096 + b"B" * 8192 + b"." * 8192 + b"D" * 4096 + b"." * 4096
    (tmp_path / "junk").write_bytes(b"x" * 9000)
    with pytest.raises(lw.LogFormatError):
        lw.parse_log(str(tmp_path / "junk"))
