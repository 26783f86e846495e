"""Find and remove lab leftovers — after any crash, including SIGKILL of the harness.

Leftovers are found from the system's own state, not from memory: lab dirs under
``/var/lib/jbodlab/labs/``, containers and networks labelled ``jbodlab.lab``, dm devices
named ``jbodlab-<lab>-…``, loop devices whose backing file (sysfs) lies in a lab dir, mounts
under a lab dir, FUSE daemons whose command line names a lab dir. A lab whose owner process
(``lab.json``: pid + start time) still runs is live and left alone unless asked (``--all`` or
its id). Loop devices of other tests (``jbodtest-*``, backing files elsewhere) are never touched.

Order per lab (FUSE notes): resume dm devices → abort the FUSE connection (frees processes
stuck on a wedged daemon) → remove containers (kills the workload) → remove the network →
remove the CPU cgroup → lazy-unmount the filesystems → remove dm devices → detach loop devices → unmount the FUSE
mount → stop the daemon → unmount the lab dir → delete the lab dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from infra import _cmd, cpu_group, dm, lab_record, loopdev
from infra.docker import Docker
from infra.errors import ContainerError
from infra.fuse_daemon import FuseDaemon, is_daemon_argv, pid_alive
from infra.mounts import mounts_under
from infra.naming import LABS_ROOT, PREFIX

Say = Callable[[str], None]
CREATE_GRACE_S = 60.0


@dataclass
class LabLeftovers:
    lab_id: str
    live: bool
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    dm_devices: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    daemons: list[int] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    has_dir: bool = False

    def empty(self) -> bool:
        return not (self.containers or self.networks or self.dm_devices or self.loops or self.mounts
                    or self.daemons or self.cgroups or self.has_dir)

    def summary(self) -> str:
        parts = [f"{len(v)} {k}" for k, v in (("containers", self.containers), ("networks", self.networks),
                                              ("dm devices", self.dm_devices), ("loop devices", self.loops),
                                              ("mounts", self.mounts), ("daemons", self.daemons),
                                              ("cgroups", self.cgroups)) if v]
        if self.has_dir:
            parts.append("lab dir")
        return ", ".join(parts) or "nothing"


def _lab_of_path(path: str) -> str | None:
    pre = str(LABS_ROOT) + "/"
    if not path.startswith(pre):
        return None
    return path[len(pre):].split("/", 1)[0] or None


def fusefs_daemons() -> list[tuple[int, str]]:
    """(pid, lab id) of every running FUSE daemon (native or ``infra.fusefs``) serving a lab dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not is_daemon_argv(argv):
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "--mount" in args:
            lab = _lab_of_path(args[args.index("--mount") + 1])
            if lab:
                found.append((int(entry.name), lab))
    return found


def _recorded_loops() -> dict[str, tuple[str, str]]:
    """loop device -> (lab id, image file name), from every lab.json."""
    return lab_record.recorded_loops(LABS_ROOT)


def survey(unchecked: list[str] | None = None) -> dict[str, LabLeftovers]:
    """Everything of every lab on this host, keyed by lab id. What could not be looked at
    (containers and networks when dockerd does not answer) is appended to ``unchecked``."""
    labs: dict[str, LabLeftovers] = {}

    def get(lab_id: str) -> LabLeftovers:
        if lab_id not in labs:
            live = False
            try:
                live = lab_record.owner_alive(lab_record.read(LABS_ROOT / lab_id))
            except (OSError, ValueError):
                # no readable lab.json: a lab being created right now (grace period) or a wreck
                try:
                    live = time.time() - (LABS_ROOT / lab_id).stat().st_mtime < CREATE_GRACE_S
                except OSError:
                    live = False
            labs[lab_id] = LabLeftovers(lab_id, live)
        return labs[lab_id]

    if LABS_ROOT.is_dir():
        for d in LABS_ROOT.iterdir():
            if d.is_dir():
                get(d.name).has_dir = True
    try:
        containers, networks = Docker().labelled()
    except ContainerError as exc:
        containers, networks = [], []
        if unchecked is not None:
            unchecked.append(f"lab containers and networks ({exc})")
    for name, lab in containers:
        get(lab).containers.append(name)
    for name, lab in networks:
        get(lab).networks.append(name)
    for name in dm.list_devices(PREFIX + "-"):
        get(name.split("-")[1]).dm_devices.append(name)
    recorded = _recorded_loops()
    for dev, backing in loopdev.list_loops():
        lab = _lab_of_path(backing)
        if lab is None and dev in recorded:
            # the FUSE mount went away under the loop device (daemon killed, auto_unmount):
            # its backing path is now relative to a detached mount, e.g. "/n1--d1.img"
            lab_id, image_name = recorded[dev]
            if backing.rsplit("/", 1)[-1] == image_name and not backing.startswith(str(LABS_ROOT)):
                lab = lab_id
        if lab:
            get(lab).loops.append(dev)
    for m in mounts_under(LABS_ROOT):
        lab = _lab_of_path(m.target)
        if lab:
            get(lab).mounts.append(m.target)
    for pid, lab in fusefs_daemons():
        get(lab).daemons.append(pid)
    for lab, paths in cpu_group.leftovers().items():
        get(lab).cgroups.extend(str(p) for p in paths)
    return labs


def _umount_all(prefix: Path, say: Say) -> None:
    for _ in range(3):  # bounded: lazy unmounts of stacked mounts may need a second pass
        entries = mounts_under(prefix)
        if not entries:
            return
        for m in entries:
            if m.fstype.startswith("fuse"):
                _cmd.run(["fusermount3", "-u", "-z", m.target], check=False)
            _cmd.run(["umount", "-l", m.target], check=False)


def remove_lab(lab_id: str, say: Say = lambda _m: None) -> LabLeftovers:
    """Remove every trace of one lab (idempotent; works whatever state it was left in)."""
    root = LABS_ROOT / lab_id
    found = survey().get(lab_id) or LabLeftovers(lab_id, False)
    if found.empty():
        return found
    say(f"lab {lab_id}: removing {found.summary()}")
    for name in found.dm_devices:
        dm.resume_quietly(name)
    daemon = FuseDaemon(root)
    if daemon.abort():
        say(f"lab {lab_id}: aborted FUSE connection of {daemon.mountpoint}")
    docker = Docker()
    for name in found.containers:
        try:
            docker.remove(name)
        except ContainerError as exc:
            say(f"lab {lab_id}: {exc}")
    for name in found.networks:
        docker.remove_network(name)
    for problem in cpu_group.remove(lab_id):   # its containers are gone: the group is empty
        say(f"lab {lab_id}: cgroup {problem}")
    _umount_all(root / "nodes", say)
    for name in found.dm_devices:
        try:
            dm.remove(name)
        except Exception as exc:  # noqa: BLE001 - report and go on with the rest
            say(f"lab {lab_id}: {exc}")
    for dev in sorted(set(found.loops) | set(loopdev.loops_for(root))):
        proc = _cmd.run(["losetup", "-d", dev], check=False)
        if proc.returncode != 0:
            say(f"lab {lab_id}: losetup -d {dev}: {proc.stderr.strip()}")
    _umount_all(root / "fuse", say)
    pids = set(found.daemons)
    if daemon.pid() is not None:
        pids.add(daemon.pid())
    for pid in pids:
        _stop_pid(pid, root)
    _umount_all(root, say)
    if mounts_under(root):
        say(f"lab {lab_id}: mounts remain under {root}, not deleting it: {[m.target for m in mounts_under(root)]}")
    elif root.exists():
        shutil.rmtree(root, ignore_errors=True)
    return found


def _stop_pid(pid: int, root: Path) -> None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if not is_daemon_argv(cmdline.split(b"\0")) or str(root).encode() not in cmdline:
        return  # pid reused by something else: not ours
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            if sig == signal.SIGTERM:
                os.kill(pid, signal.SIGCONT)  # a stopped (wedged) daemon must run to see SIGTERM
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.02)
        if not pid_alive(pid):
            return


def cleanup(*, lab_ids: list[str] | None = None, include_live: bool = False, dry_run: bool = False,
            say: Say = lambda _m: None, unchecked: list[str] | None = None) -> list[LabLeftovers]:
    """Remove leftovers of dead labs (or of the given labs / of all with ``include_live``).
    What could not be checked is said and appended to ``unchecked``."""
    missed: list[str] = []
    labs = survey(missed)
    for what in missed:
        say(f"NOT CHECKED: {what}")
    if unchecked is not None:
        unchecked.extend(missed)
    chosen = []
    for lab_id, found in sorted(labs.items()):
        if lab_ids is not None and lab_id not in lab_ids:
            continue
        if found.live and not include_live and lab_ids is None:
            say(f"lab {lab_id}: owner still running, left alone ({found.summary()}); use --all to remove")
            continue
        chosen.append(found)
    for found in chosen:
        if dry_run:
            say(f"lab {found.lab_id}: would remove {found.summary()}")
        else:
            remove_lab(found.lab_id, say)
    return chosen
