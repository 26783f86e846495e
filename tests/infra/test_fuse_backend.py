"""The fuse disk-fault backend end to end: containers writing to bind-mounted log dirs on
loop devices served by the lab's FUSE fault filesystem."""

from __future__ import annotations

import errno
import statistics
import time

import pytest

from infra import fs
from infra.device_probe import device_healthy, probe_device
from infra.lab import Lab, NodeSpec, Topology
from tests.infra.conftest import container_python, fuse_skip_reason, start_writer, wait_log

pytestmark = pytest.mark.system

PROBE_BOUND_S = 2.0  # the fault must be visible to a writer within this bound (measured: ~10-20 ms)


def works(disk, op: str) -> bool:
    """The op succeeds (allowing the kernel to report a stale writeback error of the device once or twice)."""
    return any(probe_device(disk, op) is None for _ in range(3))


@pytest.fixture
def lab(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1", "d2")),), disk_size_mb=128, backend="fuse")) as lab:
        yield lab


def test_writer_in_container_gets_eio_right_after_inject(lab):
    writer = start_writer(lab, "n1", "d1")
    wait_log(lab, writer, "READY")
    fault = lab.disk_fault("n1", "d1", "error-writes")
    rec = fault.inject()
    _, err_ns, err_no, _n = wait_log(lab, writer, "ERR")
    assert int(err_no) == errno.EIO, f"first error was errno {err_no}, not EIO"
    delay_s = (int(err_ns) - rec.injected_ns) / 1e9
    print(f"inject -> writer EIO: {delay_s * 1000:.1f} ms; inject -> probe EIO: "
          f"{(rec.first_io_error_observed_ns - rec.injected_ns) / 1e6:.1f} ms")
    assert 0 <= delay_s < PROBE_BOUND_S
    assert rec.backend == "fuse" and rec.probe_op == "write" and rec.probe_errno == errno.EIO
    assert rec.first_io_error_observed_ns >= rec.injected_ns
    assert fault.describe()["target"]["dir"] == "d1"
    # the other disk of the node is untouched (the writer exited: a fresh container of the node)
    lab.start_node("n1")
    assert container_python(lab, "n1", "import os;fd=os.open('/jbodlab/disks/d2/data/ok',os.O_CREAT|os.O_WRONLY);"
                            "os.write(fd,b'y');os.fsync(fd)").returncode == 0
    # while the fault lasts, every later write on d1 fails too (EIO, or EROFS once ext4 aborted its journal)
    r = container_python(lab, "n1", "import os;fd=os.open('/jbodlab/disks/d1/data/log',os.O_WRONLY|os.O_APPEND);"
                         "os.write(fd,b'y'*4096);os.fsync(fd)")
    assert r.returncode != 0 and ("Input/output error" in r.stderr or "Read-only" in r.stderr), r.stderr


def test_error_reads_fail_reads_only_and_error_writes_keep_reads(lab):
    lab.start_node("n1")
    setup = ("import os\nfor n in ('a','b'):\n fd=os.open('/jbodlab/disks/d1/data/'+n,os.O_CREAT|os.O_WRONLY)\n"
             " os.write(fd,b'z'*1048576);os.fsync(fd);os.close(fd)")
    assert container_python(lab, "n1", setup).returncode == 0
    direct_read = ("import os,mmap\nfd=os.open('/jbodlab/disks/d1/data/{f}',os.O_RDONLY|os.O_DIRECT)\n"
                   "b=mmap.mmap(-1,65536)\nprint(os.preadv(fd,[b],0))")
    fault = lab.disk_fault("n1", "d1", "error-reads")
    rec = fault.inject()
    assert rec.probe_errno == errno.EIO and rec.probe_op == "read"
    assert works(lab.disk("n1", "d1"), "write"), "writes must still work under error-reads"
    r = container_python(lab, "n1", direct_read.format(f="a"))
    assert r.returncode != 0 and "Input/output error" in r.stderr
    append = ("import os;fd=os.open('/jbodlab/disks/d1/data/b',os.O_WRONLY|os.O_APPEND);"
              "os.write(fd,b'q'*4096);os.fsync(fd)")
    assert container_python(lab, "n1", append).returncode == 0, "append+fsync must work under error-reads"
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")
    r = container_python(lab, "n1", "print(len(open('/jbodlab/disks/d1/data/b','rb').read()))")
    assert r.returncode != 0 and "Input/output error" in r.stderr, "a cold buffered read must fail"
    fault.heal()
    assert works(lab.disk("n1", "d1"), "read")

    wfault = lab.disk_fault("n1", "d2", "error-writes")
    assert container_python(lab, "n1", setup.replace("d1", "d2")).returncode == 0
    wfault.inject()
    assert works(lab.disk("n1", "d2"), "read"), "reads must still work under error-writes"
    r = container_python(lab, "n1", direct_read.replace("d1", "d2").format(f="a"))
    assert r.returncode == 0 and r.stdout.strip() == "65536", r.stderr
    wfault.heal()
    wfault.heal()  # idempotent


def test_delay_adds_the_asked_latency(lab):
    disk = lab.disk("n1", "d2")

    def timed(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.monotonic()
            assert probe_device(disk, "read") is None
            out.append((time.monotonic() - t0) * 1000)
        return out

    base = statistics.median(timed(10))
    fault = lab.disk_fault("n1", "d2", "delay", delay_ms=50)
    rec = fault.inject()
    delayed = timed(10)
    fault.heal()
    after = statistics.median(timed(10))
    print(f"O_DIRECT 4 KiB read: base {base:.2f} ms, delay:50 {statistics.median(delayed):.2f} ms, healed {after:.2f} ms")
    assert min(delayed) >= 50.0
    assert rec.probe_latency_ms >= 50.0 and rec.first_io_error_observed_ns is None
    # a container's fsync sees it too
    lab.start_node("n1")
    fault2 = lab.disk_fault("n1", "d2", "delay", delay_ms=50)
    fault2.inject()
    r = container_python(lab, "n1", "import os,time;fd=os.open('/jbodlab/disks/d2/data/s',os.O_CREAT|os.O_WRONLY);"
                         "os.write(fd,b'x'*4096);t=time.monotonic();os.fsync(fd);print(time.monotonic()-t)")
    fault2.heal()
    assert r.returncode == 0 and float(r.stdout) >= 0.05, r.stdout + r.stderr


def test_heal_restores_service_after_repair(lab):
    writer = start_writer(lab, "n1", "d1")
    wait_log(lab, writer, "READY")
    fault = lab.disk_fault("n1", "d1", "error")
    fault.inject()
    wait_log(lab, writer, "ERR")
    rec = fault.heal()
    assert rec.healed_ns >= rec.injected_ns and rec.state_after_heal and '"ok"' in rec.state_after_heal
    assert rec.device_healthy_after_heal and device_healthy(lab.disk("n1", "d1")), "the device works again"
    lab.docker.remove(writer)  # the node holds the fs: stop it, repair (umount, e2fsck, mount), start again
    fault.heal(repair_fs=True)  # already healed: only the filesystem repair runs now
    assert fault.record.fs_repair and not fs.is_read_only(lab.disk("n1", "d1").mountpoint)
    lab.start_node("n1")
    r = container_python(lab, "n1", "import os;p='/jbodlab/disks/d1/data/log';print(os.path.getsize(p));"
                         "fd=os.open(p,os.O_WRONLY|os.O_APPEND);os.write(fd,b'x'*4096);os.fsync(fd)")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 5 * 4096, "data fsynced before the fault survives the repair"


def test_enospc_and_remove(lab):
    lab.start_node("n1")
    fault = lab.disk_fault("n1", "d1", "enospc")
    rec = fault.inject()
    assert rec.probe_errno == errno.ENOSPC and rec.first_io_error_observed_ns is not None
    write = ("import os;fd=os.open('/jbodlab/disks/d1/data/big',os.O_CREAT|os.O_WRONLY);"
             "os.write(fd,b'x'*(1<<20));os.fsync(fd)")
    r = container_python(lab, "n1", write)
    assert r.returncode != 0 and "No space left" in r.stderr
    fault.heal()
    assert container_python(lab, "n1", write).returncode == 0

    gone = lab.disk_fault("n1", "d2", "remove")
    rec = gone.inject()
    assert rec.probe_errno == errno.EIO
    gone.heal()
    assert gone.record.device_healthy_after_heal


def test_flaky_fails_about_p_reproducibly(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("raw",)),), disk_size_mb=16, fstype="raw",
                             backend="fuse", network=False)) as lab:
        disk = lab.disk("n1", "raw")

        def pattern(seed: int) -> list[bool]:
            fault = lab.disk_fault("n1", "raw", "flaky", p=0.3, seed=seed, probe=False)
            fault.inject()
            out = [probe_device(disk, "read" if i % 2 else "write") is not None for i in range(400)]
            fault.heal()
            return out

        first, again, other = pattern(7), pattern(7), pattern(8)
        share = sum(first) / len(first)
        print(f"flaky p=0.3 seed=7: {share:.3f} of 400 O_DIRECT ops failed")
        assert first == again, "same seed, same failure sequence"
        assert first != other
        assert 0.2 <= share <= 0.4


def test_xfs_disk_gets_eio_too(node_image):
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1",)),), disk_size_mb=300, fstype="xfs",
                             backend="fuse")) as lab:
        writer = start_writer(lab, "n1", "d1")
        wait_log(lab, writer, "READY")
        fault = lab.disk_fault("n1", "d1", "error-writes")
        rec = fault.inject()
        _, _, err_no, _ = wait_log(lab, writer, "ERR")
        assert int(err_no) == errno.EIO and rec.probe_errno == errno.EIO
        lab.docker.remove(writer)
        fault.heal(repair_fs=True)  # xfs shut down: unmount, xfs_repair -L, mount
        lab.start_node("n1")
        r = container_python(lab, "n1", "import os;fd=os.open('/jbodlab/disks/d1/data/log',os.O_WRONLY|os.O_APPEND);"
                             "os.write(fd,b'x'*4096);os.fsync(fd)")
        assert r.returncode == 0, r.stderr


def test_a_delayed_disk_does_not_stall_the_other_disks_of_the_daemon(lab):
    """One daemon serves every disk of the lab: requests stuck in a delay must not starve the rest."""
    import threading

    slow, fast = lab.disk("n1", "d2"), lab.disk("n1", "d1")
    fault = lab.disk_fault("n1", "d2", "delay", delay_ms=2000, probe=False)
    fault.inject()
    stuck = [threading.Thread(target=probe_device, args=(slow, "read")) for _ in range(16)]
    try:
        for t in stuck:
            t.start()
        time.sleep(0.1)
        for _ in range(20):
            assert probe_device(fast, "read") is None and probe_device(fast, "write") is None
        assert all(t.is_alive() for t in stuck), "the other disk answered while all 16 delayed ops were pending"
    finally:
        fault.heal()
        for t in stuck:
            t.join(timeout=30)
