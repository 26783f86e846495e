"""A SEPARATE metadata.log.dir (not one of log.dirs: the lab's layout, every dir its own
disk) failing with a REAL EIO halts the broker (scenario S6 metadata-dir-fails).

The metadata dir is an ext4 file system on a small loop device, mounted before ``kraft-storage
format``; once the broker is unfenced the file system is shut down (``EXT4_IOC_SHUTDOWN``).
Nothing else writes there while the broker runs, so it is the health probe (every 100 ms
here) that hits the EIO: the broker must exit 1 with one ``kraft-broker: halted:`` line naming
the metadata dir, a ``probe_failed`` and a ``halt`` event for its directory id — and its data
dirs never go offline.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from testkit.cluster import reader_for, unfenced, until, wait_until  # noqa: E402
from kafka_common import ids, meta_properties as mp  # noqa: E402
from loopdev import loop_fs_factory  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.integration
PROBE_FILE = ".jbodlab-probe"


def test_eio_on_a_separate_metadata_dir_halts(loop_fs_factory, make_cluster, tmp_path):
    meta = str(tmp_path / "broker1" / "meta")
    fs = loop_fs_factory(mountpoint=meta, size_mb=16)   # before make_cluster: torn down after the processes
    ctrl, brokers = make_cluster(n_brokers=1, broker_extra={"log.dir.probe.interval.ms": "100",
                                                            "metadata.log.dir": meta})
    [b1] = brokers
    assert meta not in b1.dirs and os.path.ismount(meta)
    with open(os.path.join(meta, mp.FILE_NAME), encoding="utf-8") as f:
        meta_id = mp.parse(f.read()).directory_id   # formatted on the loop fs
    assert meta_id is not None

    async def run():
        client, reader = await reader_for(ctrl)
        try:
            await until(reader, lambda im: unfenced(im, (1,)), 30, "broker unfenced", brokers)
            assert meta_id not in reader.image.brokers[1].log_dirs   # not a data dir: never registered
        finally:
            await client.close()

    asyncio.run(run())
    wait_until(lambda: os.path.exists(os.path.join(meta, PROBE_FILE)), 5, "the probe to write the metadata dir")
    assert b1.alive(), b1.stderr()

    inject_ns = fs.shutdown()   # the real failure: ext4 answers EIO from now on

    assert b1.wait_exit(20) == 1, b1.stderr()
    err = b1.stderr()
    reason = [line for line in err.splitlines() if line.startswith("kraft-broker: halted:")]
    assert len(reason) == 1, err
    assert f"the metadata log dir {meta} failed" in reason[0] and "errno 5" in reason[0], reason
    ev = b1.events()
    probe = [e for e in ev if e["event"] == "probe_failed"]
    assert [(e["path"], e["errno"], e["dir_id"]) for e in probe] == [(meta, errno.EIO, ids.to_base64(meta_id))], probe
    halts = [e for e in ev if e["event"] == "halt"]
    assert len(halts) == 1 and halts[0]["dir_id"] == ids.to_base64(meta_id) and halts[0]["ts_ns"] >= inject_ns, halts
    assert f"the metadata log dir {meta} failed" in halts[0]["reason"]
    assert not [e for e in ev if e["event"] == "dir_offline"], "no data dir failed"
    assert ctrl.alive()
