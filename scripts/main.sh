#!/usr/bin/env bash
# The main job: set up the host (Debian packages, .venv, dockerd, the offline node image),
# run the default chaos scenario S1 (leader-dir-fails) in containers on loop devices with a
# real block-level disk fault, print the summary (metrics + check verdicts), write Parquet to
# results/<run_id>/ and run the Spark analysis over it (results/analysis/report.{md,html}).
# Extra arguments go to `jbodlab run` (e.g. --runs 3, --backend fuse, another scenario name).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
.venv/bin/jbodlab setup
if [ "$#" -eq 0 ]; then set -- S1; fi
exec .venv/bin/jbodlab run "$@" --analyze --analyze-engine spark
