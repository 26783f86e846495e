"""The lab's CPU group (infra.cpu_group): its containers' parent cgroup, weighted as one
process per node, made with the lab and gone with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import cpu_group
from infra.lab import Lab, NodeSpec, Topology
from tests.infra.conftest import cpu_group_skip_reason


def _v1_root(tmp_path: Path) -> Path:
    """A cgroup v1 layout in a temp dir: a cpu controller dir (with cpu.shares) and a memory one."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    (tmp_path / "memory").mkdir()
    return tmp_path


@pytest.mark.unit
def test_v1_group_weighs_one_process_per_node_and_is_removed(tmp_path):
    root = _v1_root(tmp_path)
    group, why = cpu_group.create("ab12", 4, driver="cgroupfs", root=root)
    assert why == "" and group is not None
    assert group.parent == "/jbodlab-ab12" and group.path == root / "cpu" / "jbodlab-ab12"
    assert (group.path / "cpu.shares").read_text() == "4096"
    # docker made the group in another hierarchy too, with a container's group inside
    (root / "memory" / "jbodlab-ab12" / "c0ffee").mkdir(parents=True)
    assert sorted(cpu_group.leftovers(root)["ab12"]) == [root / "cpu" / "jbodlab-ab12",
                                                         root / "memory" / "jbodlab-ab12"]
    (group.path / "cpu.shares").unlink()   # cgroupfs's control files go with their dir; a temp dir's do not
    assert cpu_group.remove("ab12", root=root) == []
    assert cpu_group.leftovers(root) == {}
    assert cpu_group.remove("ab12", root=root) == []   # idempotent


@pytest.mark.unit
def test_v2_group_enables_cpu_and_caps_the_weight(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    group, _ = cpu_group.create("cd34", 200, driver="cgroupfs", root=tmp_path)
    assert group is not None and group.weight_file == "cpu.weight" and group.weight == 10000
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"


@pytest.mark.unit
@pytest.mark.parametrize("driver,layout,why", [("systemd", "v1", "cgroup driver is 'systemd'"),
                                               ("cgroupfs", "none", "no cpu controller")])
def test_no_group_says_why(tmp_path, driver, layout, why):
    root = _v1_root(tmp_path) if layout == "v1" else tmp_path
    group, reason = cpu_group.create("ef56", 3, driver=driver, root=root)
    assert group is None and why in reason and cpu_group.leftovers(root) == {}


@pytest.mark.system
def test_lab_containers_run_in_the_weighted_group(node_image):
    reason = cpu_group_skip_reason()
    if reason:
        pytest.skip(reason)
    with Lab.create(Topology(nodes=(NodeSpec("n1", ("d1",)), NodeSpec("n2", ("d1",)), NodeSpec("n3", ("d1",))),
                             disk_size_mb=32, backend="plain")) as lab:
        lab.start_node("n1")
        lab_id = lab.lab_id
        pid = lab.docker.pid(lab.container_name("n1"))
        cpu_line = next(line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                        if "cpu" in line.split(":")[1].split(",") or line.startswith("0::"))
        assert f"/jbodlab-{lab_id}/" in cpu_line, cpu_line
        version, base = cpu_group._cpu_hierarchy(cpu_group.CGROUP_ROOT)
        weight = (base / f"jbodlab-{lab_id}" / ("cpu.shares" if version == "v1" else "cpu.weight")).read_text()
        assert int(weight) == (3 * 1024 if version == "v1" else 300)
    assert lab_id not in cpu_group.leftovers()
