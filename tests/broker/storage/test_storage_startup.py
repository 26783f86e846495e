"""Start-up rules for the log dir set (behaviour §1): each bad case is a clear error naming the
dir, or a recovery (generated directory.id, unreadable data dir offline)."""

from __future__ import annotations

import os
import random

import pytest

from kafka_common import ids, meta_properties as mp
from broker_impl.storage.errors import LogDirStartupError
from broker_impl.storage.startup import load_log_dirs
from conftest import CLUSTER_ID, NODE_ID, format_dir

pytestmark = pytest.mark.integration
OTHER_CLUSTER = ids.to_base64(ids.uuid_of(77, 88))


def _load(paths, meta=None, node_id=NODE_ID, seed=1, **kw):
    return load_log_dirs(paths, meta or paths[0], node_id, random.Random(seed), **kw)


def test_good_dirs_load_with_ids_in_order(log_dirs):
    result = _load(log_dirs)
    assert [d.path for d in result.dirs] == log_dirs
    assert all(d.online and d.directory_id is not None for d in result.dirs)
    assert result.cluster_id == CLUSTER_ID
    assert result.metadata_dir.path == log_dirs[0]
    assert result.registration_dir_ids() == sorted((d.directory_id for d in result.dirs), key=ids.halves)
    assert result.id_of(log_dirs[1]) == result.dirs[1].directory_id
    assert result.path_of(result.dirs[2].directory_id) == log_dirs[2]


def test_separate_metadata_dir_is_not_a_data_dir(log_dirs, tmp_path):
    meta = str(tmp_path / "meta")
    format_dir(meta)
    result = _load(log_dirs, meta)
    assert result.metadata_dir.path == meta and not result.metadata_dir.is_data_dir
    assert [d.path for d in result.data_dirs] == log_dirs


def test_duplicate_directory_id_is_fatal(log_dirs):
    same = ids.random_directory_id(random.Random(5))
    format_dir(log_dirs[0], directory_id=same)
    format_dir(log_dirs[2], directory_id=same)
    with pytest.raises(LogDirStartupError, match=f"Duplicate directory ID {ids.to_base64(same)}.*{log_dirs[2]}"):
        _load(log_dirs)


@pytest.mark.parametrize("lsb", [0, 1, 2, 99, -5])
def test_reserved_directory_id_is_fatal(log_dirs, lsb):
    path = os.path.join(log_dirs[1], mp.FILE_NAME)
    text = open(path).read().replace(_dir_line(path), f"directory.id={ids.to_base64(ids.uuid_of(0, lsb))}")
    open(path, "w").write(text)
    with pytest.raises(LogDirStartupError, match="reserved directory.id .*" + log_dirs[1]):
        _load(log_dirs)


def _dir_line(path):
    return next(l for l in open(path).read().splitlines() if l.startswith("directory.id="))


def test_node_id_mismatch_is_fatal(log_dirs):
    format_dir(log_dirs[1], node_id=NODE_ID + 1)
    with pytest.raises(LogDirStartupError, match=f"Stored node id {NODE_ID + 1} in {log_dirs[1]}"):
        _load(log_dirs)


def test_cluster_id_differing_between_dirs_is_fatal(log_dirs):
    format_dir(log_dirs[2], cluster_id=OTHER_CLUSTER)
    with pytest.raises(LogDirStartupError, match=f"Invalid cluster.id in: {log_dirs[2]}.*Expected {CLUSTER_ID}"):
        _load(log_dirs)


def test_configured_cluster_id_must_match(log_dirs):
    with pytest.raises(LogDirStartupError, match="Invalid cluster.id"):
        _load(log_dirs, cluster_id=OTHER_CLUSTER)


def test_data_dir_without_meta_properties_is_fatal(log_dirs, tmp_path):
    fresh = str(tmp_path / "new-disk")
    os.mkdir(fresh)
    with pytest.raises(LogDirStartupError, match=f"No meta.properties found in {fresh}.*format"):
        _load([*log_dirs, fresh])
    with pytest.raises(LogDirStartupError, match="No meta.properties found"):
        _load([*log_dirs, str(tmp_path / "missing")])


def test_missing_directory_id_is_generated_and_rewritten_atomically(log_dirs):
    format_dir(log_dirs[1], directory_id=None)
    before = open(os.path.join(log_dirs[1], mp.FILE_NAME)).read()
    assert "directory.id" not in before
    result = _load(log_dirs, seed=42)
    new_id = result.dirs[1].directory_id
    assert new_id is not None and not ids.is_reserved(new_id)
    assert new_id not in (result.dirs[0].directory_id, result.dirs[2].directory_id)
    assert result.rewritten == (log_dirs[1],)
    on_disk = mp.parse(open(os.path.join(log_dirs[1], mp.FILE_NAME)).read())
    assert on_disk.directory_id == new_id and on_disk.cluster_id == CLUSTER_ID and on_disk.node_id == NODE_ID
    assert not os.path.exists(os.path.join(log_dirs[1], mp.FILE_NAME + ".tmp"))
    assert _load(log_dirs, seed=7).dirs[1].directory_id == new_id  # stable once written
    assert _load(log_dirs).rewritten == ()


def test_generated_id_never_collides(log_dirs):
    """An rng that first yields an existing dir's id must not produce a duplicate."""
    taken = _load(log_dirs).dirs[0].directory_id
    format_dir(log_dirs[1], directory_id=None)

    class Replay(random.Random):
        def __init__(self):
            super().__init__(3)
            self.first = True
        def getrandbits(self, k):
            if self.first:
                self.first = False
                return taken.int
            return super().getrandbits(k)
    result = load_log_dirs(log_dirs, log_dirs[0], NODE_ID, Replay())
    assert result.dirs[1].directory_id not in (taken, None)


@pytest.mark.parametrize("damage", ["garbage", "not_a_dir", "meta_is_a_dir", "bad_version"])
def test_unreadable_data_dir_starts_offline(log_dirs, tmp_path, damage):
    bad = log_dirs[2]
    meta_file = os.path.join(bad, mp.FILE_NAME)
    if damage == "garbage":
        open(meta_file, "wb").write(b"\xff\xfe\x00garbage")
    elif damage == "not_a_dir":
        for n in os.listdir(bad):
            os.unlink(os.path.join(bad, n))
        os.rmdir(bad)
        open(bad, "w").write("a file where a dir should be")
    elif damage == "meta_is_a_dir":
        os.unlink(meta_file)
        os.mkdir(meta_file)
    else:
        open(meta_file, "w").write(open(meta_file).read().replace("version=1", "version=9"))
    result = _load(log_dirs)
    info = result.dirs[2]
    assert not info.online and info.directory_id is None and info.reason
    assert [d.path for d in result.online_data_dirs] == log_dirs[:2]
    assert len(result.registration_dir_ids()) == 2


def test_unreadable_metadata_dir_is_fatal(log_dirs, tmp_path):
    meta = str(tmp_path / "meta")
    format_dir(meta)
    open(os.path.join(meta, mp.FILE_NAME), "w").write("version=1\nnode.id=x\n")
    with pytest.raises(LogDirStartupError, match=f"metadata log directory {meta}. Cannot continue"):
        _load(log_dirs, meta)
    with pytest.raises(LogDirStartupError, match="metadata log directory"):
        open(os.path.join(log_dirs[0], mp.FILE_NAME), "w").write("garbage line\n")
        _load(log_dirs)


def test_listing_a_dir_twice_is_fatal(log_dirs):
    with pytest.raises(LogDirStartupError, match="Duplicate log directory"):
        _load([log_dirs[0], log_dirs[1], log_dirs[0] + "/"])


def test_no_readable_dir_is_fatal(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.mkdir(a)
    open(b, "w").write("x")
    with pytest.raises(LogDirStartupError):
        load_log_dirs([a, b], b, NODE_ID, random.Random(1))


def test_metadata_log_in_a_data_dir_other_than_the_metadata_dir_is_fatal(log_dirs):
    os.mkdir(os.path.join(log_dirs[0], "__cluster_metadata-0"))
    _load(log_dirs)  # in the metadata dir (the first of log.dirs): fine
    os.mkdir(os.path.join(log_dirs[2], "__cluster_metadata-0"))
    with pytest.raises(LogDirStartupError, match=f"unexpected metadata location in data directory {log_dirs[2]}"):
        _load(log_dirs)
