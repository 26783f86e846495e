"""A lab: nodes × dirs of real disks, a docker network, containers, faults — and its teardown.

Provision a topology, get paths, run containers, inject/heal faults, tear down::

    from infra.lab import Lab, NodeSpec, Topology

    topo = Topology(nodes=(NodeSpec("controller-1", ("meta",)),
                           NodeSpec("broker-1", ("d1", "d2", "d3", "meta"))),
                    disk_size_mb=512, fstype="ext4", backend="auto", disk_cache="write-back")
    with Lab.create(topo) as lab:                      # destroy() on exit, even after errors
        lab.disk("broker-1", "d1").data_path           # host path of that log dir
        lab.container_log_dir("broker-1", "d1")        # "/jbodlab/disks/d1/data" inside the node
        lab.start_node("broker-1", ["kraft-broker", "/etc/…"])   # container jbodlab-<id>-broker-1
        fault = lab.disk_fault("broker-1", "d1", "error-writes")
        fault.inject(); ...; fault.heal()
        lab.repair_disk("broker-1", "d1")              # after a write error (ext4 is read-only)

    lab = Lab.create(topo, persistent=True)            # a chaos session: outlives this process
    Lab.load(lab.lab_id)                               # … attached to from another one

Each node's disks are mounted under ``<lab dir>/nodes/<node>/`` and that directory is
bind-mounted into the node's container at ``/jbodlab/disks`` with ``rslave`` propagation:
a repaired or replaced disk shows up inside the running container. The lab dir is made a
shared mount for that. ``lab.json`` records the owner pid (and its start time) so
``jbodlab cleanup`` can tell a live lab from a leftover.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra import _cmd, capability, cpu_group, image, lab_record
from infra.cleanup import remove_lab
from infra.disks import Disk, DiskBackend, DmBackend, FuseBackend, PlainBackend, create_disk, destroy_disk, repair_disk
from infra.docker import BindMount, ContainerSpec, Docker
from infra.errors import ContainerError, InfraError
from infra.faultmodes import FaultMode
from infra.faults import DiskFaultHandle
from infra.fuse_daemon import FuseDaemon
from infra.loopdev import WRITE_CACHES
from infra.procfaults import ProcessFaultHandle, ResourceSample, TreeSampler
from infra.netfaults import Isolate, NetTarget, Netem, Partition
from infra.naming import (ROLE_LABEL, check_name, container_name, lab_dir, network_name,
                          new_lab_id)

CONTAINER_DISKS = "/jbodlab/disks"
Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    dirs: tuple[str, ...]

    def __post_init__(self) -> None:
        check_name("node", self.name)
        for d in self.dirs:
            check_name("dir", d)
        if len(set(self.dirs)) != len(self.dirs):
            raise ValueError(f"node {self.name}: duplicate dir names in {self.dirs}")


@dataclass(frozen=True, slots=True)
class Topology:
    nodes: tuple[NodeSpec, ...]
    disk_size_mb: int = 512
    fstype: str = "ext4"            # ext4 | xfs | raw (bare device, nothing mounted)
    backend: str = "auto"
    network: bool = True
    # the disks' cache model (infra.loopdev.WRITE_CACHES): "write-back" — the kernel sends
    # flushes, and each reaches the fault layer — or "write-through" (a drive with a
    # power-loss-protected cache: no flushes)
    disk_cache: str = "write-back"
    # (uid, gid) the node containers run as and that owns every disk's data/ (None: root, and
    # a permission fault is impossible: root ignores file modes)
    node_user: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.disk_cache not in WRITE_CACHES:
            raise ValueError(f"disk_cache {self.disk_cache!r} is unknown (choose from {', '.join(WRITE_CACHES)})")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node names in topology: {names}")
        if self.node_user is not None:
            user = tuple(int(x) for x in self.node_user)
            if len(user) != 2 or min(user) < 1:
                raise ValueError(f"node_user {self.node_user!r} must be (uid, gid), both > 0 (not root)")
            object.__setattr__(self, "node_user", user)


@dataclass
class Lab:
    lab_id: str
    dir: Path
    topology: Topology
    backend: DiskBackend
    daemon: FuseDaemon | None = None
    disks: dict[tuple[str, str], Disk] = field(default_factory=dict)
    docker: Docker = field(default_factory=Docker)
    network: str | None = None
    cgroup_parent: str | None = None    # infra.cpu_group: the containers' parent cgroup
    say: Say = field(default=lambda _m: None, repr=False)
    _meta: dict | None = field(default=None, repr=False)
    _tree_sampler: TreeSampler | None = field(default=None, repr=False)

    # ---- creation ---------------------------------------------------------------------
    @classmethod
    def create(cls, topology: Topology, *, lab_id: str | None = None, say: Say | None = None,
               persistent: bool = False) -> Lab:
        """Provision ``topology``. ``persistent``: the lab outlives this process (a chaos session:
        other processes use ``Lab.load(lab_id)``; only ``destroy()`` or ``jbodlab cleanup --lab``
        removes it). Otherwise it belongs to this process and is a leftover once it exits."""
        say = say or (lambda _m: None)
        backend_name = capability.choose_backend(topology.backend)
        lab_id = lab_id or new_lab_id()
        root = lab_dir(lab_id)
        if root.exists():
            raise InfraError(f"lab {lab_id} already exists at {root}")
        root.mkdir(parents=True)
        meta = lab_record.new_record(lab_id, persistent=persistent, backend=backend_name,
                                     topology=asdict(topology))
        lab_record.write(root, meta)
        lab = cls(lab_id, root, topology, PlainBackend(), say=say)
        lab._meta = meta
        try:
            _cmd.run(["mount", "--bind", str(root), str(root)])
            _cmd.run(["mount", "--make-rshared", str(root)])
            if backend_name == "fuse":
                lab.daemon = FuseDaemon(root)
                lab.daemon.start()
                lab.backend = FuseBackend(lab.daemon)
            elif backend_name == "dm":
                lab.backend = DmBackend()
            say(f"lab {lab_id}: backend {backend_name}, {len(topology.nodes)} nodes at {root}")
            for node in topology.nodes:
                (root / "nodes" / node.name).mkdir(parents=True, exist_ok=True)
                for d in node.dirs:
                    lab.disks[(node.name, d)] = create_disk(
                        lab.backend, lab_id=lab_id, lab_dir=root, node=node.name, dirname=d,
                        size_mb=topology.disk_size_mb, fstype=topology.fstype, cache=topology.disk_cache,
                        owner=topology.node_user)
                    lab._save()  # cleanup finds the loop device even if the FUSE mount vanishes
            if topology.network:
                lab.network = network_name(lab_id)
                lab.docker.create_network(lab.network, lab_id)
            try:
                driver = lab.docker.cgroup_driver()
            except ContainerError as exc:
                driver = f"unknown: {exc}"
            group, why = cpu_group.create(lab_id, len(topology.nodes), driver=driver)
            if group is not None:
                lab.cgroup_parent = group.parent
                say(f"lab {lab_id}: containers in cgroup {group.path} ({group.weight_file} {group.weight}: "
                    f"one process's weight per node)")
            else:
                say(f"lab {lab_id}: containers in docker's own cgroup ({why}): on a busy host the whole "
                    f"cluster weighs one process")
        except BaseException:
            lab.destroy()
            raise
        lab._save()
        say(f"lab {lab_id}: {len(lab.disks)} disks mounted")
        return lab

    def _save(self) -> None:
        meta = dict(self._meta or lab_record.read(self.dir))
        meta["network"] = self.network
        meta["cgroup_parent"] = self.cgroup_parent
        meta["disks"] = [{**asdict(d), "image": str(d.image), "mountpoint": str(d.mountpoint)}
                         for d in self.disks.values()]
        lab_record.write(self.dir, meta)
        self._meta = meta

    @classmethod
    def load(cls, lab_id: str, *, say: Say | None = None) -> Lab:
        """Attach to an existing lab (e.g. a persistent one made by another process)."""
        root = lab_dir(lab_id)
        try:
            meta = lab_record.read(root)
        except (OSError, ValueError) as exc:
            raise InfraError(f"lab {lab_id}: cannot read {root / 'lab.json'}: {exc}") from exc
        t = meta["topology"]
        topology = Topology(nodes=tuple(NodeSpec(n["name"], tuple(n["dirs"])) for n in t["nodes"]),
                            disk_size_mb=t["disk_size_mb"], fstype=t["fstype"], backend=t["backend"],
                            network=t["network"], disk_cache=t.get("disk_cache", "write-back"),
                            node_user=tuple(t["node_user"]) if t.get("node_user") else None)
        lab = cls(lab_id, root, topology, PlainBackend(), network=meta.get("network"), say=say or (lambda _m: None))
        lab._meta = meta
        lab.cgroup_parent = meta.get("cgroup_parent")
        if meta["backend"] == "fuse":
            lab.daemon = FuseDaemon(root)
            if not lab.daemon.running():
                raise InfraError(f"lab {lab_id}: its FUSE daemon is not running (run `jbodlab cleanup --lab {lab_id}`)")
            lab.backend = FuseBackend(lab.daemon)
        elif meta["backend"] == "dm":
            lab.backend = DmBackend()
        for d in meta.get("disks", []):
            disk = Disk(**{**d, "image": Path(d["image"]), "mountpoint": Path(d["mountpoint"])})
            lab.disks[(disk.node, disk.name)] = disk
        return lab

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # ---- paths ------------------------------------------------------------------------
    def disk(self, node: str, dirname: str) -> Disk:
        try:
            return self.disks[(node, dirname)]
        except KeyError:
            raise InfraError(f"lab {self.lab_id} has no disk {node}/{dirname}") from None

    def node_disks_dir(self, node: str) -> Path:
        return self.dir / "nodes" / node

    def container_log_dir(self, node: str, dirname: str) -> str:
        self.disk(node, dirname)
        return f"{CONTAINER_DISKS}/{dirname}/data"

    def node_mount(self, node: str) -> BindMount:
        return BindMount(str(self.node_disks_dir(node)), CONTAINER_DISKS, "rslave")

    def container_name(self, node: str) -> str:
        return container_name(self.lab_id, node)

    # ---- containers -------------------------------------------------------------------
    def node_spec(self, node: str, command: list[str] | tuple[str, ...] = ("sleep", "infinity"), *,
                  image_tag: str | None = None, env: dict[str, str] | None = None,
                  extra_mounts: tuple[BindMount, ...] = ()) -> ContainerSpec:
        if node not in {n.name for n in self.topology.nodes}:
            raise InfraError(f"lab {self.lab_id} has no node {node!r}")
        user = self.topology.node_user
        return ContainerSpec(
            name=self.container_name(node), image=image_tag or image.node_image_tag(), command=tuple(command),
            lab_id=self.lab_id, hostname=node, network=self.network, network_aliases=(node,),
            mounts=(self.node_mount(node), *extra_mounts), env=tuple(sorted((env or {}).items())),
            labels=((ROLE_LABEL, node),), cgroup_parent=self.cgroup_parent,
            user=f"{user[0]}:{user[1]}" if user else None)

    def start_node(self, node: str, command: list[str] | tuple[str, ...] = ("sleep", "infinity"), **kw) -> str:
        spec = self.node_spec(node, command, **kw)
        if not image.image_exists(spec.image):
            raise InfraError(f"node image {spec.image} is not built for these sources: run `jbodlab setup` "
                             f"(or infra.image.ensure_node_image())")
        self.docker.run(spec)
        return spec.name

    # ---- faults -----------------------------------------------------------------------
    def net_target(self, node: str) -> NetTarget:
        """A running node as a network-fault target (container pid + IP on the lab network)."""
        name = self.container_name(node)
        if self.network is None:
            raise InfraError(f"lab {self.lab_id} has no network")
        return NetTarget(node, name, self.docker.pid(name), self.docker.ip(name, self.network))

    def partition(self, a: str, b: str) -> Partition:
        return Partition(self.net_target(a), self.net_target(b))

    def isolate(self, node: str) -> Isolate:
        return Isolate(self.net_target(node))

    def netem(self, node: str, *, delay_ms: float = 0.0, jitter_ms: float = 0.0, loss_pct: float = 0.0) -> Netem:
        return Netem(self.net_target(node), delay_ms, jitter_ms, loss_pct)

    def disk_fault(self, node: str, dirname: str, kind: str, **params) -> DiskFaultHandle:
        """A fault of ``kind`` on one disk (``infra.faults``; ``files=[host paths]`` limits the
        block-level kinds to those files' blocks)."""
        params.setdefault("node_user", self.topology.node_user)
        return DiskFaultHandle(self.disk(node, dirname), kind, self.backend, **params)

    def power_cut(self, node: str, say: Say | None = None) -> list:
        """Every disk of ``node`` loses power (its processes must be stopped first): what was
        not durable is lost, then the disks come back and are mounted again (``infra.power``)."""
        from infra.power import cut_power
        disks = [d for (n, _), d in self.disks.items() if n == node]
        if not disks:
            raise InfraError(f"lab {self.lab_id} has no disks of node {node!r}")
        return cut_power(self.backend, disks, owner=self.topology.node_user, say=say or self.say)

    def process_fault(self, node: str, kind: str, signal: str = "KILL") -> ProcessFaultHandle:
        return ProcessFaultHandle(self.docker, self.container_name(node), kind, signal)

    def sample(self, node: str) -> ResourceSample:
        """One psutil sample of the node's container process tree (ContainerError if none)."""
        got = self.sample_all([node])[node]
        if isinstance(got, Exception):
            raise got
        return got

    def sample_all(self, nodes: list[str], *, include_self: bool = False) -> dict[str, ResourceSample | Exception]:
        """:meth:`sample` of every node in one round (one scan of the process table, container
        pids kept between rounds): per node its sample or the error that says why there is
        none; with ``include_self`` the harness's own tree under ``infra.procfaults.SELF``."""
        if self._tree_sampler is None:
            self._tree_sampler = TreeSampler(self.docker)
        by_container = {self.container_name(n): n for n in nodes}
        got = self._tree_sampler.sample_all(list(by_container), include_self=include_self)
        return {by_container.get(c, c): s for c, s in got.items()}

    def repair_disk(self, node: str, dirname: str, busy_timeout_s: float = 10.0) -> str:
        return repair_disk(self.disk(node, dirname), busy_timeout_s=busy_timeout_s)

    def replace_disk(self, node: str, dirname: str) -> Disk:
        """A fresh, empty, formatted disk in place of the old one (same mount path)."""
        old = self.disk(node, dirname)
        destroy_disk(self.backend, old)
        new = create_disk(self.backend, lab_id=self.lab_id, lab_dir=self.dir, node=node, dirname=dirname,
                          size_mb=self.topology.disk_size_mb, fstype=self.topology.fstype,
                          cache=self.topology.disk_cache, owner=self.topology.node_user)
        self.disks[(node, dirname)] = new
        self._save()
        return new

    # ---- teardown ---------------------------------------------------------------------
    def destroy(self) -> None:
        """Remove everything of this lab (containers, network, mounts, devices, daemon, files)."""
        for disk in self.disks.values():  # heal first: a delayed or failing disk must not stall `docker rm`
            try:
                self.backend.set_mode(disk, FaultMode())
            except Exception:  # noqa: BLE001 - a dead daemon is handled by the crash-safe path below
                pass
        names = self.docker.containers(self.lab_id)
        if names:   # side by side: one by one, each removal's kill and wait cost a run ~0.3 s per node
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
                for future in [pool.submit(self.docker.remove, n) for n in names]:
                    try:
                        future.result()
                    except InfraError as exc:
                        self.say(f"lab {self.lab_id}: {exc}")
        if self.network:
            self.docker.remove_network(self.network)
        for disk in list(self.disks.values()):
            try:
                destroy_disk(self.backend, disk)
            except InfraError as exc:
                self.say(f"lab {self.lab_id}: {exc}")
        self.disks.clear()
        if self.daemon is not None:
            self.daemon.stop()
        remove_lab(self.lab_id, say=self.say)  # the crash-safe path finishes whatever is left
