#!/usr/bin/env bash
# The main job: set up the host, run the default chaos scenario end to end, summarise it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/jbodlab demo "$@"
