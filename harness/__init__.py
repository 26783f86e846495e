"""The lab, laid out as the flow of one run (each subpackage says whether it is pure):

scenario (values, pure; catalog: the S1-S23 scenario values and their resolution from a
name, file and overrides) -> generator (the timed plan of operations, pure) -> run (the runner
interprets the plan) with nemesis (each fault kind: inject, heal, describe), workload (real
Kafka clients) and cluster (node configs, the containers) -> results (the ledger, Parquet
tables, run.json) -> history (pure) -> checkers (verdicts and metrics, pure) -> analysis;
cli (the ``jbodlab`` command) on top; errors (``HarnessError``, the base of the lab's errors)
below them all.
"""
