"""The analysis as a spark-submit script: ``jbodlab analyze`` with the Spark engine by default.

    spark-submit harness/analysis/spark_submit.py results/ --out report/

Same options as ``jbodlab analyze`` (:mod:`harness.analysis.cli`); the job itself is
:mod:`harness.analysis.spark_engine`.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by spark-submit: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis import cli  # noqa: E402  (after the path above)

if __name__ == "__main__":
    raise SystemExit(cli.main(sys.argv[1:], default_engine="spark"))
