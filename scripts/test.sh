#!/usr/bin/env bash
# The whole test suite: unit, integration and system tests. Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
if [ "$(id -u)" -eq 0 ] && .venv/bin/jbodlab setup --help >/dev/null 2>&1; then
  .venv/bin/jbodlab setup
fi
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi
exit "$rc"
