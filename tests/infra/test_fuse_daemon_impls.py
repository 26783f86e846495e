"""Both FUSE fault daemons — native (``infra/faultfs/faultfs.c``, the default) and Python
(``infra.fusefs``) — behave the same: what they serve, the fault gate of every mode, seeded
flaky replays, a delayed request stalling only itself (on the served file and through a
``--direct-io`` loop device), the control protocol's replies, and bad control requests
answered with an error while the daemon lives on. Plus the choice between them (``impl``,
fallback when the native one cannot be built) and its build cache. Real daemons on temp dirs;
no containers."""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from loopdev import lab_disk_skip_reason  # noqa: E402

from infra import faultfs_build, loopdev  # noqa: E402
from infra.faultmodes import FaultMode  # noqa: E402
from infra.fuse_daemon import FuseDaemon  # noqa: E402

pytestmark = pytest.mark.integration

IMAGE_SIZE = 4 << 20
SNAPSHOT_KEYS = ["mode", "since_ns", "ops", "injected", "host_syncs", "first_hit_ns", "flipped", "unsynced_bytes",
                 "dropped_bytes", "bad_blocks"]
OPS = {"read": 0, "write": 0, "fsync": 0}


def _skip_unless_runnable(impl: str) -> None:
    reason = lab_disk_skip_reason()
    if reason:
        pytest.skip(reason)
    if impl == "native":
        try:
            faultfs_build.ensure_built()
        except faultfs_build.BuildError as exc:
            pytest.skip(f"native FUSE daemon cannot be built here: {exc}")


@pytest.fixture(params=["native", "python"])
def daemon(request):
    _skip_unless_runnable(request.param)
    lab = Path(tempfile.mkdtemp(prefix="jbodtest-fuseimpl-"))
    (lab / "backing").mkdir()
    for name in ("a.img", "b.img"):
        with open(lab / "backing" / name, "wb") as fh:
            fh.truncate(IMAGE_SIZE)
    (lab / "backing" / "not-an-image").mkdir()
    d = FuseDaemon(lab, impl=request.param)
    try:
        d.start()
        assert d.active_impl == request.param
        yield d
    finally:
        d.stop()
        shutil.rmtree(lab, ignore_errors=True)


class Direct:
    """O_DIRECT I/O on one served file: every call reaches the daemon (no page cache)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_DIRECT)
        self.buf = mmap.mmap(-1, 4096)

    def read(self, offset: int = 0) -> int:
        return os.preadv(self.fd, [self.buf], offset)

    def write(self, offset: int = 0) -> int:
        return os.pwritev(self.fd, [self.buf], offset)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
        self.buf.close()


def _errno_of(fn) -> int:
    try:
        fn()
    except OSError as exc:
        return exc.errno
    return 0


def test_serves_the_regular_backing_files_flat(daemon):
    mnt = daemon.mountpoint
    assert sorted(os.listdir(mnt)) == ["a.img", "b.img"]      # the directory is not served
    assert oct(os.stat(mnt).st_mode) == oct(0o40755)
    st = os.stat(mnt / "a.img")
    assert (oct(st.st_mode), st.st_nlink, st.st_size) == (oct(0o100600), 1, IMAGE_SIZE)
    with pytest.raises(FileNotFoundError):
        os.stat(mnt / "nope.img")
    with pytest.raises(FileNotFoundError):
        os.stat(mnt / "not-an-image")
    with open(mnt / "a.img", "r+b") as fh:                  # buffered I/O through the page cache
        fh.seek(8192)
        fh.write(b"jbodlab")
        fh.flush()
        os.fsync(fh.fileno())
    assert (daemon.backing / "a.img").read_bytes()[8192:8199] == b"jbodlab"
    os.truncate(mnt / "b.img", 1 << 20)
    assert (daemon.backing / "b.img").stat().st_size == 1 << 20
    assert os.statvfs(mnt).f_blocks == os.statvfs(daemon.backing).f_blocks
    ops = daemon.get("a.img")["ops"]
    assert ops["write"] >= 1 and ops["fsync"] >= 1


@pytest.mark.parametrize("mode, fails", [
    ("ok", set()),
    ("error", {"read", "write", "fsync"}),
    ("error-reads", {"read"}),
    ("error-writes", {"write", "fsync"}),
    ("removed", {"read", "write", "fsync"}),
    ("flaky:1", {"read", "write", "fsync"}),
    ("flaky:0", set()),
])
def test_each_mode_gates_reads_writes_and_fsyncs(daemon, mode, fails):
    a, b = Direct(daemon.mountpoint / "a.img"), Direct(daemon.mountpoint / "b.img")
    try:
        before = daemon.get("a.img")
        reply = daemon.set_mode("a.img", FaultMode.parse(mode))
        assert reply["mode"] == FaultMode.parse(mode).to_dict() and reply["injected"] == OPS
        assert reply["since_ns"] >= before["since_ns"]
        got = {"read": _errno_of(a.read), "write": _errno_of(a.write), "fsync": _errno_of(a.fsync)}
        assert got == {op: errno.EIO if op in fails else 0 for op in got}
        after = daemon.get("a.img")
        assert all(after["ops"][op] > before["ops"][op] for op in OPS), (before, after)
        assert after["injected"] == {op: int(op in fails) for op in OPS}
        # the other image is untouched
        assert (_errno_of(b.read), _errno_of(b.write), _errno_of(b.fsync)) == (0, 0, 0)
        assert daemon.get("b.img")["injected"] == OPS
        daemon.set_mode("a.img", FaultMode())
        assert _errno_of(a.read) == 0 and daemon.get("a.img")["injected"] == OPS
    finally:
        a.close()
        b.close()


def test_a_seeded_flaky_sequence_replays(daemon):
    f = Direct(daemon.mountpoint / "a.img")

    def sequence(seed: int) -> str:
        daemon.set_mode("a.img", FaultMode("flaky", p=0.5, seed=seed))
        return "".join("x" if _errno_of(lambda i=i: f.read(i * 4096)) else "." for i in range(64))

    try:
        first, again, other = sequence(7), sequence(7), sequence(8)
        assert first == again and first != other, (first, again, other)
        assert 10 < first.count("x") < 54, first
        assert daemon.get("a.img")["injected"]["read"] == other.count("x")
    finally:
        f.close()


def _parallel_delayed_reads(path: str, n: int, flags: int = 0) -> list[float]:
    took: list[float] = []

    def one(i: int) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | flags)
        buf = mmap.mmap(-1, 4096)
        try:
            t = time.monotonic()
            os.preadv(fd, [buf], i * 65536)
            took.append(time.monotonic() - t)
        finally:
            os.close(fd)
            buf.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took


def test_a_delayed_request_stalls_only_itself(daemon):
    daemon.set_mode("a.img", FaultMode("delay", delay_ms=200))
    t0 = time.monotonic()
    quick: list[float] = []
    other = threading.Thread(target=lambda: quick.extend(_parallel_delayed_reads(str(daemon.mountpoint / "b.img"), 1)))
    other.start()
    took = _parallel_delayed_reads(str(daemon.mountpoint / "a.img"), 8)
    other.join()
    wall = time.monotonic() - t0
    assert len(took) == 8 and min(took) >= 0.19, took
    assert wall < 0.2 * 8 / 2, f"8 delayed reads took {wall:.2f} s: serialised"
    assert quick and quick[0] < 0.15, f"a read of the other image waited {quick}"


def test_delayed_requests_stay_parallel_through_a_direct_io_loop_device(daemon):
    dev = loopdev.attach(daemon.mountpoint / "a.img")
    try:
        daemon.set_mode("a.img", FaultMode("delay", delay_ms=200))
        t0 = time.monotonic()
        took = _parallel_delayed_reads(dev, 16)
        wall = time.monotonic() - t0
        assert len(took) == 16 and min(took) >= 0.19, took
        assert wall < 0.2 * 16 / 4, f"16 delayed reads via {dev} took {wall:.2f} s: serialised"
    finally:
        daemon.set_mode("a.img", FaultMode())
        loopdev.detach(dev)


def test_control_replies_have_the_snapshot_shape(daemon):
    ping = daemon.request({"op": "ping"})
    assert ping == {"ok": True, "pid": daemon.pid()}
    reply = daemon.set_mode("b.img", FaultMode("delay", delay_ms=1.5))
    assert list(reply) == ["ok", *SNAPSHOT_KEYS]
    assert reply["mode"] == {"kind": "delay", "p": 0.0, "seed": 0, "delay_ms": 1.5, "ranges": []}
    assert list(reply["ops"]) == list(OPS) and reply["host_syncs"] == 0
    assert isinstance(reply["mode"]["p"], float) and isinstance(reply["since_ns"], int)
    got = daemon.get("b.img")
    assert got["since_ns"] == reply["since_ns"] and list(got) == list(reply)
    os.stat(daemon.mountpoint / "a.img")
    with open(daemon.mountpoint / "a.img", "rb"):      # an open makes a.img known to the daemon
        pass
    images = daemon.request({"op": "list"})
    assert images["ok"] and list(images["images"]) == ["a.img", "b.img"]
    assert all(list(s) == SNAPSHOT_KEYS for s in images["images"].values())
    assert images["images"]["b.img"]["mode"] == reply["mode"]


BAD_REQUESTS = [
    b"not json", b"", b"[1]", b'"op"', b"{", b'{"op": "set"}', b'{"op": "nope", "image": "a.img"}',
    b'{"op": "get", "image": "missing.img"}', b'{"op": "get", "image": "../backing/a.img"}',
    b'{"op": "get", "image": "not-an-image"}', b'{"op": "get", "image": 7}',
    b'{"op": "set", "image": "a.img", "mode": "error"}', b'{"op": "set", "image": "a.img", "mode": {}}',
    b'{"op": "set", "image": "a.img", "mode": {"kind": "melt"}}',
    b'{"op": "set", "image": "a.img", "mode": {"kind": "flaky", "p": 2}}',
    b'{"op": "set", "image": "a.img", "mode": {"kind": "delay", "delay_ms": -1}}',
    b'{"op": "set", "image": "a.img", "mode": {"kind": "flaky", "p": "x"}}',
    b'{"op": "get", "image": "a\\u0000.img"}', b"\xff\xfe\x00garbage", b"[" * 5000, b'{"op": "ping"} trailing',
]


def test_malformed_control_requests_get_an_error_and_the_daemon_lives(daemon):
    pid = daemon.pid()
    with socket.socket(socket.AF_UNIX) as sock:                 # all on one connection
        sock.settimeout(10)
        sock.connect(str(daemon.socket_path))
        f = sock.makefile("rwb")
        for raw in BAD_REQUESTS:
            f.write(raw + b"\n")
            f.flush()
            reply = json.loads(f.readline())
            assert reply["ok"] is False and isinstance(reply["error"], str) and reply["error"], (raw, reply)
        f.write(b'{"op": "ping"}\n')
        f.flush()
        assert json.loads(f.readline()) == {"ok": True, "pid": pid}
    with socket.socket(socket.AF_UNIX) as sock:                 # a connection that says nothing
        sock.connect(str(daemon.socket_path))
    with socket.socket(socket.AF_UNIX) as sock:                 # a request cut off by EOF
        sock.connect(str(daemon.socket_path))
        sock.sendall(b'{"op": "pi')
        sock.shutdown(socket.SHUT_WR)
        assert json.loads(sock.makefile("rb").readline())["ok"] is False
    with socket.socket(socket.AF_UNIX) as sock:                 # a line of 200 KiB
        sock.settimeout(10)
        sock.connect(str(daemon.socket_path))
        try:
            sock.sendall(b'{"op": "' + b"x" * 200_000 + b'"}\n')
        except BrokenPipeError:
            pass                                                # closed after its error reply
        assert json.loads(sock.makefile("rb").readline())["ok"] is False
    assert daemon.get("a.img")["mode"]["kind"] == "ok"         # no bad request changed a mode
    assert daemon.running() and daemon.request({"op": "ping"})["pid"] == pid
    assert sorted(os.listdir(daemon.mountpoint)) == ["a.img", "b.img"]


def test_build_is_cached_and_follows_the_source(monkeypatch, tmp_path):
    _skip_unless_runnable("native")
    built = faultfs_build.ensure_built()
    mtime = built.stat().st_mtime_ns
    assert faultfs_build.ensure_built() == built and built.stat().st_mtime_ns == mtime   # no rebuild
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    for f in faultfs_build.SOURCE.parent.iterdir():
        if f.suffix in (".c", ".h"):
            (src_dir / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(faultfs_build, "SOURCE", src_dir / "faultfs.c")
    monkeypatch.setattr(faultfs_build, "BUILD_DIR", tmp_path / "cache")
    first = faultfs_build.ensure_built()
    (src_dir / "image.h").write_bytes((src_dir / "image.h").read_bytes() + b"\n/* edited */\n")  # a header counts
    second = faultfs_build.ensure_built()
    assert first != second and second.exists() and first.exists()   # rebuilt; the older one kept (KEEP_BINARIES)
    monkeypatch.setattr(faultfs_build, "KEEP_BINARIES", 1)
    (src_dir / "jsonread.c").write_bytes((src_dir / "jsonread.c").read_bytes() + b"\n/* edited */\n")
    third = faultfs_build.ensure_built()
    assert third not in (first, second) and third.exists() and not first.exists() and not second.exists()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".build.lock", third.name]
