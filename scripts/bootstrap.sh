#!/usr/bin/env bash
# Idempotent host set-up for jbodlab: Debian packages, the virtual environment at .venv/.
# Safe to run again and again; each step says what it does and skips what is already there.
# (The container engine and the node image are set up by `jbodlab setup`, which the
# top-level scripts call after this.)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '[bootstrap] %s\n' "$*"; }

APT_PACKAGES=(
  docker.io debootstrap fuse3 libfuse3-3 xfsprogs e2fsprogs kcat iproute2 util-linux
  psmisc procps kmod openjdk-17-jre-headless
  gcc libc6-dev pkg-config libfuse3-dev   # the native FUSE daemon (infra/faultfs, built by jbodlab setup)
  burrow zookeeper   # the consumer-lag monitor of the old-protocol test (Burrow needs a ZooKeeper of its own)
)
# node + npm for the client tests outside Python and librdkafka (KafkaJS, tools/node);
# a node that is already installed (e.g. from another repository, with its own npm) is kept
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  APT_PACKAGES+=(nodejs npm)
fi

if [ "$(id -u)" -ne 0 ]; then
  say "not root: skipping system packages (the lab needs root; unit tests do not)"
else
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "Debian packages present"
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating virtual environment .venv ($($PY --version))"
  "$PY" -m venv .venv
fi
stamp=.venv/.jbodlab-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing the project and its pinned dependencies into .venv (takes a minute the first time)"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[lab,test]' 2>&1 \
    | { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }
  echo "$want" > "$stamp"
else
  say "virtual environment up to date"
fi

# KafkaJS (pinned in tools/node/package-lock.json) under tools/node/node_modules, not committed
if command -v npm >/dev/null 2>&1; then
  node_stamp=tools/node/node_modules/.jbodlab-installed
  node_want=$(sha256sum tools/node/package-lock.json | cut -c1-16)
  if [ "$(cat "$node_stamp" 2>/dev/null)" != "$node_want" ]; then
    say "installing the Node.js client packages into tools/node/node_modules (npm ci)"
    (cd tools/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$node_want" > "$node_stamp"
  else
    say "Node.js client packages up to date"
  fi
else
  say "npm not available: the KafkaJS client tests will fail (run as root to install nodejs/npm)"
fi
