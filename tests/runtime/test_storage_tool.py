"""`kraft-storage` as a real command on temp dirs (behaviour.md §1)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kafka_common import ids, meta_properties

pytestmark = pytest.mark.integration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(*args):
    return subprocess.run([sys.executable, "-m", "kafka_runtime.storage_tool", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(f"process.roles=broker\nnode.id=4\nlisteners=PLAINTEXT://127.0.0.1:9092\n"
                    f"controller.quorum.voters=1@127.0.0.1:9093\n"
                    f"log.dirs={tmp_path}/d1,{tmp_path}/d2,{tmp_path}/d3\nmetadata.log.dir={tmp_path}/meta\n"
                    f"some.unknown.key=1\n")
    return path


def read_meta(path):
    with open(os.path.join(path, "meta.properties")) as f:
        return meta_properties.parse(f.read())


def test_random_uuid_is_a_non_reserved_kafka_uuid():
    out = tool("random-uuid")
    assert out.returncode == 0
    value = ids.from_base64(out.stdout.strip())
    assert not ids.is_reserved(value)


def test_format_writes_every_dir_with_distinct_ids(tmp_path, conf):
    cid = tool("random-uuid").stdout.strip()
    out = tool("format", "-c", str(conf), "--cluster-id", cid)
    assert out.returncode == 0, out.stderr
    assert "unknown config key 'some.unknown.key'" in out.stderr
    metas = [read_meta(tmp_path / d) for d in ("d1", "d2", "d3", "meta")]
    assert {m.cluster_id for m in metas} == {cid} and {m.node_id for m in metas} == {4}
    dir_ids = [m.directory_id for m in metas]
    assert len(set(dir_ids)) == 4 and not any(ids.is_reserved(d) for d in dir_ids)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))


def test_already_formatted_is_an_error_unless_ignored(tmp_path, conf):
    cid = tool("random-uuid").stdout.strip()
    assert tool("format", "-c", str(conf), "--cluster-id", cid).returncode == 0
    before = (tmp_path / "d1" / "meta.properties").read_text()
    (tmp_path / "d2" / "meta.properties").unlink()
    again = tool("format", "-c", str(conf), "--cluster-id", cid)
    assert again.returncode == 1 and "already formatted" in again.stderr and str(tmp_path / "d1") in again.stderr
    assert not (tmp_path / "d2" / "meta.properties").exists()  # nothing written on error
    ok = tool("format", "-c", str(conf), "--cluster-id", cid, "--ignore-formatted")
    # by path: the new dir's random directory.id on the same line may itself contain "d1"
    formatted = [line.split()[1] for line in ok.stdout.splitlines() if line.startswith("Formatting ")]
    assert ok.returncode == 0 and formatted == [str(tmp_path / "d2")]
    assert (tmp_path / "d1" / "meta.properties").read_text() == before
    assert len({read_meta(tmp_path / d).directory_id for d in ("d1", "d2", "d3", "meta")}) == 4


def test_info_shows_each_dir_state(tmp_path, conf):
    cid = tool("random-uuid").stdout.strip()
    tool("format", "-c", str(conf), "--cluster-id", cid)
    (tmp_path / "d3" / "meta.properties").unlink()
    out = tool("info", "-c", str(conf))
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4
    d1 = read_meta(tmp_path / "d1").directory_id
    assert f"directory.id={ids.to_base64(d1)}" in lines[0] and "state=formatted" in lines[0]
    assert "state=unformatted" in lines[2]


@pytest.mark.parametrize("args,needle", [
    (["--cluster-id", "not-a-uuid"], "--cluster-id"),
])
def test_bad_cluster_id_is_named(conf, args, needle):
    out = tool("format", "-c", str(conf), *args)
    assert out.returncode == 2 and needle in out.stderr


def test_invalid_config_value_names_key_and_value(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("process.roles=controller\nnode.id=abc\nlisteners=CONTROLLER://h:1\nmetadata.log.dir=/x\n")
    out = tool("format", "-c", str(bad), "--cluster-id", "AAAAAAAAAAAAAAAAAAAAAA")
    assert out.returncode == 2 and "node.id" in out.stderr and "abc" in out.stderr
    missing = tool("info", "-c", str(tmp_path / "nope.properties"))
    assert missing.returncode == 2 and "nope.properties" in missing.stderr


def test_corrupt_meta_properties_is_reported_by_info_and_blocks_format(tmp_path, conf):
    cid = tool("random-uuid").stdout.strip()
    (tmp_path / "d1").mkdir()
    (tmp_path / "d1" / "meta.properties").write_text("version=7\n")
    out = tool("info", "-c", str(conf))
    assert out.returncode == 1 and "state=error" in out.stdout
    fmt = tool("format", "-c", str(conf), "--cluster-id", cid)
    assert fmt.returncode == 1 and "version" in fmt.stderr
