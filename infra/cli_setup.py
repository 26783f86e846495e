"""`jbodlab setup`: idempotent host set-up (packages, dockerd, fusectl, the native FUSE daemon,
node image)."""

from __future__ import annotations

import argparse
import os
import time

from infra import faultfs_build, host, image
from infra.errors import InfraError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--skip-packages", action="store_true", help="do not check/install Debian packages")
    parser.add_argument("--skip-image", action="store_true", help="do not build the node image")
    parser.add_argument("--force-image", action="store_true", help="rebuild the node image even if up to date")


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[setup +{time.monotonic() - t0:5.1f}s] {msg}", flush=True)

    if os.geteuid() != 0:
        say("FAILED: needs root (apt-get, dockerd, mounts)")
        return 1
    try:
        if not args.skip_packages:
            host.ensure_packages(say)
        host.ensure_fusectl(say)
        try:
            say(f"native FUSE daemon: {faultfs_build.ensure_built(say)}")
        except faultfs_build.BuildError as exc:
            say(f"native FUSE daemon cannot be built ({exc}): labs run the Python daemon (infra.fusefs)")
        host.ensure_dockerd(say)
        if not args.skip_image:
            report = image.ensure_node_image(say=say, force=args.force_image)
            say(f"node image: {report.node_image}")
    except InfraError as exc:
        say(f"FAILED: {exc}")
        return 1
    say("host ready")
    return 0
