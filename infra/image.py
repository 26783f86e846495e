"""The node image, built offline.

Two layers:

1. ``jbodlab-base:<key>`` — ``debootstrap --variant=minbase bookworm`` with python3,
   python3-venv, procps and iproute2; the rootfs tarball is cached in
   ``/var/cache/jbodlab/`` and ``docker import``-ed. ``<key>`` hashes suite, variant,
   package list and mirror.
2. ``jbodlab-node:<source hash>`` — ``docker build --network none`` FROM the base: a venv in
   ``/opt/jbodlab`` with the project wheel and the wheels of pyproject ``dependencies``
   (only the runtime ones; the wheel holds only the runtime packages kafka_common,
   kafka_runtime, controller_impl, broker_impl), from a wheelhouse built on the host (deps cached in
   ``/var/cache/jbodlab/wheels/``). The image carries the label ``jbodlab.source-hash``;
   it is rebuilt only when the hash of the sources + pyproject changes.

``node_image_tag(root)`` is what the harness passes to ``docker run``;
``ensure_node_image(root, say)`` builds what is missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra import _cmd
from infra.errors import SetupError
from infra.naming import CACHE_ROOT

Say = Callable[[str], None]

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "procps", "iproute2")
# What runs inside a node: the broker/controller runtime. Host-only packages (harness, infra,
# scenarios) are neither hashed nor installed, so editing the lab does not rebuild the image.
PACKAGES_DIRS = ("kafka_common", "kafka_runtime", "controller_impl", "broker_impl")
SOURCE_LABEL = "jbodlab.source-hash"
VENV = "/opt/jbodlab"
LOCK_PATH = Path("/var/lock/jbodlab-setup.lock")


@dataclass(frozen=True, slots=True)
class BuildReport:
    base_image: str
    node_image: str
    base_built: bool
    node_built: bool
    seconds: float


def project_root() -> Path:
    return Path(__file__).resolve().parents[1]


def base_key() -> str:
    text = "|".join([SUITE, "minbase", ",".join(BASE_PACKAGES), MIRROR])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_image_tag() -> str:
    return f"jbodlab-base:{base_key()}"


def _source_files(root: Path) -> list[Path]:
    files = [root / "pyproject.toml"]
    for pkg in PACKAGES_DIRS:
        base = root / pkg
        if base.is_dir():
            files += sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)
    return files


def source_hash(root: Path | None = None) -> str:
    """sha256 over the relative path and content of every file that goes into the wheel."""
    root = root or project_root()
    digest = hashlib.sha256()
    for path in _source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def node_image_tag(root: Path | None = None) -> str:
    return f"jbodlab-node:{source_hash(root)}"


def runtime_dependencies(root: Path) -> list[str]:
    data = tomllib.loads((root / "pyproject.toml").read_text())
    deps = data.get("project", {}).get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise SetupError("pyproject.toml: project.dependencies must be a list of strings")
    return deps


def image_exists(tag: str) -> bool:
    return _cmd.ok(["docker", "image", "inspect", "--format", "{{.Id}}", tag], timeout_s=30)


@contextmanager
def setup_lock(say: Say) -> Iterator[None]:
    """One set-up at a time on this host (several worktrees run `jbodlab setup`)."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for another `jbodlab setup` on this host")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def ensure_base_image(say: Say) -> tuple[str, bool]:
    tag = base_image_tag()
    if image_exists(tag):
        say(f"base image {tag} present")
        return tag, False
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    tarball = CACHE_ROOT / f"rootfs-{SUITE}-minbase-{base_key()}.tar"
    if not tarball.exists():
        rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE_ROOT))
        try:
            say(f"debootstrap --variant=minbase {SUITE} (+{','.join(BASE_PACKAGES)}) into {rootfs} (about 40 s)")
            t0 = time.monotonic()
            _cmd.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                      SUITE, str(rootfs), MIRROR], timeout_s=1800)
            for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (rootfs / sub).glob("*"):
                    if item.is_file():
                        item.unlink()
            say(f"debootstrap done in {time.monotonic() - t0:.0f} s; caching rootfs tarball {tarball}")
            partial = tarball.with_suffix(".partial")
            _cmd.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], timeout_s=600)
            partial.rename(tarball)
        finally:
            _umount_leftovers(rootfs)
            shutil.rmtree(rootfs, ignore_errors=True)
    else:
        say(f"using cached rootfs tarball {tarball}")
    say(f"docker import {tarball.name} -> {tag}")
    _cmd.run(["docker", "import", "--change", 'CMD ["/bin/bash"]', str(tarball), tag], timeout_s=600)
    return tag, True


def _umount_leftovers(rootfs: Path) -> None:
    """debootstrap mounts proc/sys inside the target; a failed run can leave them."""
    for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
        target = line.split()[4]
        if target.startswith(str(rootfs) + "/"):
            _cmd.run(["umount", "-l", target], check=False)


def _dep_wheelhouse(root: Path, say: Say) -> Path:
    deps = runtime_dependencies(root)
    key = hashlib.sha256(("|".join(sorted(deps)) + f"|py{sys.version_info[0]}{sys.version_info[1]}").encode()).hexdigest()[:12]
    house = CACHE_ROOT / "wheels" / f"deps-{key}"
    if (house / ".complete").exists():
        return house
    house.mkdir(parents=True, exist_ok=True)
    say(f"building the runtime-dependency wheelhouse {house}: {' '.join(deps)}")
    _cmd.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q",
              "--wheel-dir", str(house), *deps], timeout_s=900)
    (house / ".complete").write_text("\n".join(deps) + "\n")
    return house


KEEP_NODE_IMAGES = 6


def _prune_node_images(keep: set[str], say: Say) -> None:
    """Remove all but the newest KEEP_NODE_IMAGES node images (other worktrees may use the recent ones)."""
    proc = _cmd.run(["docker", "images", "jbodlab-node", "--format", "{{.Repository}}:{{.Tag}} {{.CreatedAt}}"],
                    check=False)
    rows = sorted((line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line),
                  key=lambda r: r[1], reverse=True)
    tags = [t for t, _ in rows if not t.endswith(":latest") and t not in keep]
    for old in tags[KEEP_NODE_IMAGES - 1:]:
        if _cmd.ok(["docker", "image", "rm", old]):
            say(f"removed old node image {old}")


def _build_python(say: Say) -> str:
    """A small venv with setuptools + wheel (the project venv has no `wheel`), cached."""
    venv = CACHE_ROOT / "buildenv"
    py = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return str(py)
    say(f"creating the wheel-build environment {venv} (setuptools, wheel)")
    shutil.rmtree(venv, ignore_errors=True)
    _cmd.run([sys.executable, "-m", "venv", str(venv)], timeout_s=300)
    _cmd.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "setuptools>=65", "wheel"],
             timeout_s=600)
    (venv / ".complete").write_text("ok\n")
    return str(py)


def _stage_sources(root: Path, dest: Path) -> None:
    for path in _source_files(root):
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


DOCKERFILE = """\
FROM {base}
COPY wheels /tmp/wheels
RUN python3 -m venv {venv} \\
 && {venv}/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --find-links /tmp/wheels jbodlab \\
 && rm -rf /tmp/wheels
ENV PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONUNBUFFERED=1
LABEL {label}={hash} jbodlab.role=node
CMD ["/bin/bash"]
"""


def ensure_node_image(root: Path | None = None, say: Say = lambda _m: None, *, force: bool = False) -> BuildReport:
    """Build whatever of base and node image is missing; return what was done."""
    root = root or project_root()
    t0 = time.monotonic()
    with setup_lock(say):
        base, base_built = ensure_base_image(say)
        digest = source_hash(root)
        tag = f"jbodlab-node:{digest}"
        if image_exists(tag) and not force:
            say(f"node image {tag} up to date (source hash {digest})")
            return BuildReport(base, tag, base_built, False, time.monotonic() - t0)
        say(f"building node image {tag}: sources changed (hash {digest})")
        deps = _dep_wheelhouse(root, say)
        with tempfile.TemporaryDirectory(prefix="jbodlab-build-") as tmp:
            ctx = Path(tmp)
            src = ctx / "src"
            wheels = ctx / "wheels"
            wheels.mkdir()
            _stage_sources(root, src)
            say("building the project wheel (offline, no build isolation)")
            _cmd.run([_build_python(say), "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps",
                      "--no-build-isolation", "--wheel-dir", str(wheels), str(src)], timeout_s=600)
            for whl in deps.glob("*.whl"):
                shutil.copy2(whl, wheels / whl.name)
            shutil.rmtree(src)
            (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base, venv=VENV, label=SOURCE_LABEL, hash=digest))
            say("docker build --network none (installs the wheels into /opt/jbodlab)")
            env = dict(os.environ, DOCKER_BUILDKIT="0")
            _cmd.run(["docker", "build", "--network", "none", "-q", "-t", tag, "-t", "jbodlab-node:latest", str(ctx)],
                     timeout_s=900, env=env)
        say(f"node image {tag} built")
        _prune_node_images(keep={tag}, say=say)
        return BuildReport(base, tag, base_built, True, time.monotonic() - t0)
