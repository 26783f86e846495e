"""Partial, silent and lost-write disk faults end to end, seen from a process in a container
(the fuse backend, a node running as an unprivileged user): faults limited to one file's
blocks (FIEMAP) with that file's cached pages evicted, bad blocks a write remaps, corrupt
reads that flip bits only in the file, a power cut that loses what was never flushed, and
``chmod a-w`` giving EACCES to the unprivileged node."""

from __future__ import annotations

import errno
import hashlib

import pytest

from infra.faultmodes import flips
from infra.lab import Lab, NodeSpec, Topology
from tests.infra.conftest import container_python, fuse_skip_reason

pytestmark = pytest.mark.system

NODE_USER = (2500, 2500)
MIB = 1 << 20
WRITE = ("import os\nfor n, c in (('a', b'A'), ('b', b'B')):\n"
         " fd = os.open('/jbodlab/disks/d1/data/' + n, os.O_CREAT | os.O_WRONLY, 0o644)\n"
         " os.write(fd, bytes(range(256)) * 4096); os.write(fd, c * 4096); os.fsync(fd); os.close(fd)\n")
READ = "import hashlib,sys;print(hashlib.sha256(open('/jbodlab/disks/d1/data/'+sys.argv[1],'rb').read()).hexdigest())"


@pytest.fixture
def lab(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    topo = Topology(nodes=(NodeSpec("n1", ("d1", "d2")),), disk_size_mb=64, backend="fuse", node_user=NODE_USER)
    with Lab.create(topo) as lab:
        lab.start_node("n1")
        assert container_python(lab, "n1", WRITE).returncode == 0
        yield lab


def _read(lab, name: str):
    return lab.docker.exec(lab.container_name("n1"), ["python3", "-c", READ, name], timeout_s=30)


def _want(c: bytes) -> str:
    return hashlib.sha256(bytes(range(256)) * 4096 + c * 4096).hexdigest()


def test_bad_blocks_of_one_file_fail_its_cold_reads_only_until_rewritten(lab):
    disk = lab.disk("n1", "d1")
    assert _read(lab, "a").stdout.strip() == _want(b"A")        # cached now: the fault must evict it
    fault = lab.disk_fault("n1", "d1", "bad-blocks", files=[disk.data_path / "a"])
    rec = fault.inject()
    assert rec.ranges and sum(e - s for s, e in rec.ranges) == MIB + 4096
    before, after, total = rec.cache_pages
    print(f"bad-blocks on a: ranges {rec.ranges}; cached pages {before} -> {after} of {total}")
    assert before == total == 257 and after == 0
    assert rec.probe_op == "read" and rec.probe_errno == errno.EIO and rec.first_io_error_observed_ns
    r = _read(lab, "a")
    assert r.returncode != 0 and "Input/output error" in r.stderr, "a cold read of a bad block must fail"
    assert _read(lab, "b").stdout.strip() == _want(b"B"), "the other file is untouched"
    fault.observe_hits()
    assert rec.first_hit_ns is not None and rec.first_hit_ns > rec.first_io_error_observed_ns
    assert rec.hits["read"] >= 1
    rewrite = ("import os,mmap\nfd=os.open('/jbodlab/disks/d1/data/a',os.O_WRONLY|os.O_DIRECT)\n"
               "b=mmap.mmap(-1,1<<20);b.write(bytes(range(256))*4096);os.pwritev(fd,[b],0);os.fsync(fd)")
    assert container_python(lab, "n1", rewrite).returncode == 0
    r = _read(lab, "a")
    assert r.returncode != 0, "the last block was not rewritten: still bad"
    assert lab.backend.snapshot(disk)["bad_blocks"] == 1
    fault.heal()
    assert _read(lab, "a").stdout.strip() == _want(b"A")


def test_corrupt_reads_of_one_file_flip_bits_the_reader_gets_and_nothing_else(lab):
    disk = lab.disk("n1", "d1")
    fault = lab.disk_fault("n1", "d1", "corrupt-reads", p=1.0, seed=4, files=[disk.data_path / "a"])
    rec = fault.inject()
    assert rec.probe_op == "read-compare" and rec.probe_flipped_bits == 16   # 64 KiB: 16 blocks, one bit each
    diff = ("import json\nd=open('/jbodlab/disks/d1/data/a','rb').read()\nw=bytes(range(256))*4096+b'A'*4096\n"
            "print(json.dumps([i for i in range(len(w)) if d[i]!=w[i]]))")
    import json
    diffs = json.loads(container_python(lab, "n1", diff).stdout)
    start = rec.ranges[0][0]
    expected = flips(tuple(map(tuple, rec.ranges)), 4, 1.0, start, MIB + 4096) if len(rec.ranges) == 1 else None
    assert len(diffs) == 257, f"one flipped bit per 4 KiB block of the file: {len(diffs)}"
    if expected is not None:
        assert diffs == [i for i, _ in expected]
    assert _read(lab, "b").stdout.strip() == _want(b"B")
    fault.observe_hits()
    assert rec.flipped_bits >= 257 and rec.first_hit_ns is not None
    fault.heal()
    lab.start_node("n1")   # fresh page cache? no: the corrupted pages are cached; evict them
    from infra.extents import drop_cached_pages
    drop_cached_pages(disk.data_path / "a")
    assert _read(lab, "a").stdout.strip() == _want(b"A"), "the medium was never changed"


def test_corrupt_reads_of_a_short_file_corrupt_its_bytes_not_the_rest_of_its_block(lab):
    """A file shorter than a block (a freshly rolled active segment): the seed asked for flips
    a bit past the file's end, which no read of the file returns; the fault moves its seed to
    one that flips a byte the file holds, and says so in its params."""
    from infra.extents import image_ranges
    from infra.faultmodes import BLOCK, block_flip
    disk = lab.disk("n1", "d1")
    write = ("import os\nfd=os.open('/jbodlab/disks/d1/data/s',os.O_CREAT|os.O_WRONLY,0o644)\n"
             "os.write(fd,b'S'*300);os.fsync(fd);os.close(fd)")
    assert container_python(lab, "n1", write).returncode == 0
    (start, _end), = image_ranges(disk, [disk.data_path / "s"])
    asked = next(s for s in range(1000) if block_flip(s, start // BLOCK, 1.0)[0] >= 300)
    fault = lab.disk_fault("n1", "d1", "corrupt-reads", p=1.0, seed=asked, files=[disk.data_path / "s"])
    rec = fault.inject()
    assert rec.params["seed_asked"] == asked and rec.params["seed"] > asked, rec.params
    diff = ("import json\nd=open('/jbodlab/disks/d1/data/s','rb').read()\n"
            "print(json.dumps([len(d)]+[i for i in range(len(d)) if d[i]!=0x53]))")
    import json
    size, *diffs = json.loads(container_python(lab, "n1", diff).stdout)
    assert size == 300 and len(diffs) == 1, f"one flipped byte inside the file's 300: {diffs}"
    fault.heal()


def test_a_power_cut_loses_exactly_what_was_not_flushed(lab):
    disk = lab.disk("n1", "d1")
    fault = lab.disk_fault("n1", "d1", "lose-unsynced")
    rec = fault.inject()
    assert rec.probe_op == "write-unsynced" and rec.first_io_error_observed_ns, "the probe write stays unsynced"
    # a flush is device-wide: the fsynced append first, then what no flush follows
    unsynced = ("import os,mmap\n"
                "fd3=os.open('/jbodlab/disks/d1/data/b',os.O_WRONLY|os.O_APPEND);os.write(fd3,b'S'*4096);os.fsync(fd3)\n"
                "fd=os.open('/jbodlab/disks/d1/data/a',os.O_WRONLY|os.O_DIRECT)\n"
                "b=mmap.mmap(-1,4096);b.write(b'Z'*4096);os.pwritev(fd,[b],0)\n"      # reaches the device, no flush
                "fd2=os.open('/jbodlab/disks/d1/data/c',os.O_CREAT|os.O_WRONLY,0o644);os.write(fd2,b'page cache only')\n")
    assert container_python(lab, "n1", unsynced).returncode == 0
    snap = lab.backend.snapshot(disk)
    assert snap["mode"]["kind"] == "lose-unsynced" and snap["unsynced_bytes"] >= 4096
    lab.docker.kill(lab.container_name("n1"))
    cuts = lab.power_cut("n1")
    d1 = next(c for c in cuts if c.dir == "d1")
    print(f"power cut: {[c.as_dict() for c in cuts]}")
    assert d1.dropped_bytes >= 4096 and d1.mounted and all(c.mounted for c in cuts)
    data_a = (disk.data_path / "a").read_bytes()
    assert data_a[:4096] == bytes(range(256)) * 16, "the write that was never flushed is gone"
    assert (disk.data_path / "b").read_bytes()[-4096:] == b"S" * 4096, "the fsynced append survived"
    assert not (disk.data_path / "c").exists() or (disk.data_path / "c").read_bytes() == b""
    assert lab.backend.snapshot(disk)["mode"]["kind"] == "ok"
    fault.heal()
    lab.start_node("n1")
    assert container_python(lab, "n1", "open('/jbodlab/disks/d1/data/new','w').write('x')").returncode == 0


def test_chmod_a_w_gives_the_unprivileged_node_eacces_until_healed(lab):
    create = "import os;os.close(os.open('/jbodlab/disks/d1/data/seg',os.O_CREAT|os.O_WRONLY,0o644))"
    assert lab.docker.exec(lab.container_name("n1"), ["id", "-u"]).stdout.strip() == str(NODE_USER[0])
    fault = lab.disk_fault("n1", "d1", "permission")
    rec = fault.inject()
    assert rec.probe_op == "create-file" and rec.probe_errno == errno.EACCES and rec.modes_revoked >= 3
    r = container_python(lab, "n1", create)
    assert r.returncode != 0 and "Permission denied" in r.stderr
    r = container_python(lab, "n1", "open('/jbodlab/disks/d1/data/a','r+b')")
    assert r.returncode != 0 and "Permission denied" in r.stderr, "opening a file for writing fails too"
    assert container_python(lab, "n1", create.replace("/d1/", "/d2/")).returncode == 0, "the other dir works"
    fault.heal()
    assert container_python(lab, "n1", create).returncode == 0


def test_a_permission_fault_needs_an_unprivileged_node(node_image):
    from infra.errors import FaultError
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1",)),), disk_size_mb=32, backend="fuse")) as lab:
        with pytest.raises(FaultError, match="unprivileged"):
            lab.disk_fault("n1", "d1", "permission")
