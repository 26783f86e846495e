"""The lab, laid out as the flow of one run (each subpackage says whether it is pure):

scenario (values, pure) -> generator (the timed operations, pure) -> run (lab, services, the
runner that interprets the generator) with workload (real Kafka clients) and nemesis (each
fault kind: inject, heal, describe) -> history (pure) -> checkers (verdicts and metrics, pure)
-> results (the run's files: ledger, Parquet tables, run.json) -> analysis; cli on top.
"""
